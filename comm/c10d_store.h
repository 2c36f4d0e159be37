#ifndef DCP_COMM_C10D_STORE_H_
#define DCP_COMM_C10D_STORE_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/rendezvous_store.h"
#include "common/clock.h"
#include "torch/csrc/distributed/c10d/Store.hpp"

namespace dcp {

/// A `c10d::Store` over dcp's `RendezvousStoreInterface` (the in-memory
/// store, or the scheduler's over gRPC), so that c10d process groups form
/// through the rendezvous dcp already runs. Keys and values pass through
/// unchanged; put a `c10d::PrefixStore` in front to meet under a plan's
/// `CommGroup.rendezvous_prefix`.
///
/// What it implements is what ProcessGroupGloo (libtorch 1.13) uses, through
/// its GlooStore: `set`, `get` and `wait` (Gloo's full-mesh rendezvous has
/// each member publish its pair addresses under "<device>/<rank>" and its
/// host under "<device>/rank_<rank>", then wait for and read the others';
/// `setSequenceNumberForGroup` sets one key and waits for it). `get`
/// blocks like c10d's stores do, up to the store's timeout. dcp's store has
/// no atomic read-modify-write and no listing, so `add`, `compareSet`,
/// `deleteKey`, `check`, `getNumKeys` and `watchKey` are refused with
/// c10::NotImplementedError rather than emulated racily; nothing in
/// ProcessGroupGloo calls them (Python's store-based barrier does, and is
/// not used here).
///
/// Timeouts: `wait(keys)` and `get` use the store's timeout, `wait(keys, t)`
/// uses t (zero, c10d's "no timeout", also means the store's timeout: a
/// wait never blocks unbounded). Every wait also ends at `deadline` when one
/// is set, so that a formation that waits for several keys in turn is bound
/// as a whole. A key still missing then throws `c10d::TimeoutError` whose
/// message names the keys; any other failure of the underlying store throws
/// `c10d::C10dError`. The status behind the last failure is kept
/// (`last_error()`) for callers that turn exceptions back into statuses.
///
/// Thread-safe if the underlying store is (dcp's are). Does not own the
/// underlying store, which must outlive this one and every process group
/// built on it (they keep a reference to their store).
///
///   InMemoryRendezvousStore dcp_store;
///   ASSIGN_OR_RETURN(auto store, C10dRendezvousStore::Create(&dcp_store, {}));
///   auto prefixed = c10::make_intrusive<c10d::PrefixStore>("job/e3/g0-1",
///                                                          store);
///   auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(
///       prefixed, group_rank, group_size, gloo_options);
class C10dRendezvousStore final : public c10d::Store {
 public:
  struct Options {
    /// The timeout of `get` and `wait(keys)`. Positive.
    absl::Duration timeout = absl::Seconds(30);
    /// No wait ends later than this (measured on `clock`); InfiniteFuture:
    /// only the timeouts bound them.
    absl::Time deadline = absl::InfiniteFuture();
    /// What `deadline` is read on; null: the system clock. Not owned.
    Clock* clock = nullptr;
  };

  /// INVALID_ARGUMENT for a null store or a non-positive timeout.
  static absl::StatusOr<c10::intrusive_ptr<C10dRendezvousStore>> Create(
      RendezvousStoreInterface* store, Options options);

  C10dRendezvousStore(RendezvousStoreInterface* store, Options options);
  ~C10dRendezvousStore() override = default;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  /// A non-positive timeout is refused (c10::Error): waits stay bounded.
  void setTimeout(const std::chrono::milliseconds& timeout) override;

  // Refused: see the class comment.
  std::vector<uint8_t> compareSet(const std::string& key,
                                  const std::vector<uint8_t>& current,
                                  const std::vector<uint8_t>& desired) override;
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void watchKey(const std::string& key,
                c10d::WatchKeyCallback callback) override;

  /// The status of the last call that failed (set, get or wait), OK if
  /// none did.
  absl::Status last_error() const;

 private:
  // Waits up to `timeout` (cut to the deadline) and returns the values, or
  // records the failure and throws.
  std::vector<std::string> WaitOrThrow(const std::vector<std::string>& keys,
                                       absl::Duration timeout);
  [[noreturn]] void Fail(absl::Status status);

  RendezvousStoreInterface* const store_;
  const absl::Time deadline_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dcp

#endif  // DCP_COMM_C10D_STORE_H_
