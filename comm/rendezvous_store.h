#ifndef DCP_COMM_RENDEZVOUS_STORE_H_
#define DCP_COMM_RENDEZVOUS_STORE_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/clock.h"

namespace dcp {

/// A small key-value store through which the ranks of a communicator group
/// find each other (Gloo addresses, NCCL unique ids).
///
/// Keys are write-once per formation of a group: a group formed again must use
/// a new key prefix, or it reads the previous formation's (stale) values. The
/// scheduler hands out such prefixes (`CommGroup.rendezvous_prefix`).
/// Implementations are thread-safe.
class RendezvousStoreInterface {
 public:
  virtual ~RendezvousStoreInterface() = default;

  /// Publishes `value` (arbitrary bytes) under `key`, replacing any value.
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;

  /// The values of `keys`, in order, once all of them are set. Blocks up to
  /// `timeout`, then returns DEADLINE_EXCEEDED naming the keys still missing
  /// (when the store can tell).
  virtual absl::StatusOr<std::vector<std::string>> Wait(
      absl::Span<const std::string> keys, absl::Duration timeout) = 0;
};

/// A `RendezvousStoreInterface` in the memory of one process: the store of
/// single-process runs and of tests that run the ranks of a group as threads.
///
/// Thread-safe; `Wait` blocks on a condition, it does not poll, and measures
/// its timeout on the injected clock.
///
///   InMemoryRendezvousStore store;
///   // thread of rank 0: store.Set("g/0", address0);
///   // thread of rank 1: store.Wait({"g/0"}, absl::Seconds(5));
class InMemoryRendezvousStore final : public RendezvousStoreInterface {
 public:
  struct Options {
    /// What `Wait`'s timeout is measured on; not owned, must outlive the
    /// store. Null: the system clock.
    Clock* clock = nullptr;
  };

  InMemoryRendezvousStore() : InMemoryRendezvousStore(Options()) {}
  explicit InMemoryRendezvousStore(Options options);
  InMemoryRendezvousStore(const InMemoryRendezvousStore&) = delete;
  InMemoryRendezvousStore& operator=(const InMemoryRendezvousStore&) = delete;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::vector<std::string>> Wait(
      absl::Span<const std::string> keys, absl::Duration timeout) override;

  /// Number of keys set so far.
  size_t size() const;

 private:
  Clock* const clock_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dcp

#endif  // DCP_COMM_RENDEZVOUS_STORE_H_
