#ifndef DCP_WORKER_AGENT_CANCELLABLE_STORE_H_
#define DCP_WORKER_AGENT_CANCELLABLE_STORE_H_

#include <atomic>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "comm/rendezvous_store.h"
#include "common/clock.h"

namespace dcp {

/// Passes through to a rendezvous store, but waits in short slices so that
/// `Cancel` ends every wait within one slice (CANCELLED): a formation
/// waiting for peers that will not come ends when the agent shuts down.
/// The timeout of a wait is counted on `clock`.
///
/// Thread-safe. Borrows the store and the clock, which must outlive it.
class CancellableStore final : public RendezvousStoreInterface {
 public:
  CancellableStore(RendezvousStoreInterface* store, Clock* clock)
      : store_(store), clock_(clock) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::vector<std::string>> Wait(
      absl::Span<const std::string> keys, absl::Duration timeout) override;

  /// Every wait under way and later ends CANCELLED.
  void Cancel() { cancelled_ = true; }

 private:
  static constexpr absl::Duration kSlice = absl::Milliseconds(200);

  absl::Status Check() const;

  RendezvousStoreInterface* const store_;
  Clock* const clock_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_CANCELLABLE_STORE_H_
