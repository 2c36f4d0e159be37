#ifndef DCP_SCHEDULER_CONTROL_KV_STORE_H_
#define DCP_SCHEDULER_CONTROL_KV_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace dcp {

/// Limits of a `KvStore`; all positive. `ControlPlane` initialises
/// it in field order.
struct KvStoreOptions {
  /// Keys must start with "<session_id>/".
  std::string session_id;
  int64_t max_key_bytes = 256;
  int64_t max_value_bytes = 64 << 10;
  int64_t max_keys = 100000;
  /// Keys plus values, each counted once.
  int64_t max_total_bytes = int64_t{256} << 20;
};

/// The key-value store communicators rendezvous through (each CommGroup's
/// `rendezvous_prefix` names its keys): bounded in key and value size, key
/// count and total bytes, scoped to one session, and purged by epoch.
///
/// Thread-safe; one lock of its own, never held while calling out: it is
/// hot while groups form and independent of the rest of the control plane.
///
///   KvStoreOptions options;
///   options.session_id = "s";
///   KvStore store(std::move(options));
///   RETURN_IF_ERROR(store.Set("s", "s/e0/g0-1/id", id));
///   ASSIGN_OR_RETURN(std::vector<std::string> v, store.Get("s", {key}));
class KvStore {
 public:
  explicit KvStore(KvStoreOptions options);
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  /// Sets (or replaces) `key`. FAILED_PRECONDITION for another session's
  /// id; INVALID_ARGUMENT for a key outside the session or over a size
  /// limit; RESOURCE_EXHAUSTED naming the key-count or total-size limit.
  absl::Status Set(absl::string_view session_id, absl::string_view key,
                   absl::string_view value) ABSL_LOCKS_EXCLUDED(mu_);

  /// What `Set` would answer, without setting anything (the control plane
  /// makes a key durable between the two).
  absl::Status Check(absl::string_view session_id, absl::string_view key,
                     absl::string_view value) const ABSL_LOCKS_EXCLUDED(mu_);

  /// Sets `key` as it was before a restart, with no check.
  void Restore(const std::string& key, const std::string& value)
      ABSL_LOCKS_EXCLUDED(mu_);

  /// The values of `keys`, in order; NOT_FOUND naming the first missing key
  /// (callers poll). FAILED_PRECONDITION for another session's id.
  absl::StatusOr<std::vector<std::string>> Get(
      absl::string_view session_id, const std::vector<std::string>& keys) const
      ABSL_LOCKS_EXCLUDED(mu_);

  /// Removes the entries of epochs before `epoch` (keys under
  /// "<session>/e<k>/" with k < epoch); returns how many.
  int64_t PurgeBefore(int64_t epoch) ABSL_LOCKS_EXCLUDED(mu_);

  /// What the store holds: keys, and keys plus values in bytes.
  struct Usage {
    int64_t keys = 0;
    int64_t bytes = 0;
  };
  Usage usage() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  /// The checks of `Set` that need no lock.
  absl::Status CheckKey(absl::string_view session_id, absl::string_view key,
                        absl::string_view value) const;
  /// The limits' checks, against what is held now.
  absl::Status CheckRoomLocked(absl::string_view key,
                               absl::string_view value) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PutLocked(absl::string_view key, absl::string_view value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const KvStoreOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::string, std::less<>> entries_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_CONTROL_KV_STORE_H_
