#ifndef DCP_COMM_SCHEDULER_RENDEZVOUS_STORE_H_
#define DCP_COMM_SCHEDULER_RENDEZVOUS_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "comm/rendezvous_store.h"
#include "common/clock.h"

namespace grpc {
class ChannelInterface;
}  // namespace grpc

namespace dcp {

/// The rendezvous store of a real job: the scheduler's StoreSet/StoreGet RPCs
/// (proto/scheduler_service.proto). Keys are passed through unchanged; the
/// scheduler accepts only keys under the prefixes it hands out
/// ("<session_id>/...").
///
/// The server never blocks, so `Wait` polls StoreGet, sleeping between polls
/// with a backoff that starts at `initial_backoff` and doubles up to
/// `max_backoff`, until the keys are all set or the timeout passes (both
/// measured on, and slept on, the injected clock). NOT_FOUND
/// and UNAVAILABLE (a scheduler restarting) are retried; any other error ends
/// the wait at once. `Set` retries UNAVAILABLE and DEADLINE_EXCEEDED the
/// same way for up to `set_retry_timeout` (a Set is idempotent), so that a
/// group forming while a scheduler with durable state restarts still forms.
/// Thread-safe: gRPC stubs are.
///
///   SchedulerRendezvousStore::Options options;
///   options.session_id = registered.session_id();
///   ASSIGN_OR_RETURN(auto store, SchedulerRendezvousStore::Create(
///       grpc::CreateChannel(address, grpc::InsecureChannelCredentials()),
///       options));
///   RETURN_IF_ERROR(store->Set(prefix + "nccl/id", id_bytes));
class SchedulerRendezvousStore final : public RendezvousStoreInterface {
 public:
  struct Options {
    /// The `RegisterResponse.session_id` of the scheduler this agent joined;
    /// the scheduler rejects requests of another session.
    std::string session_id;
    /// First sleep between two polls of StoreGet; doubles after each poll.
    absl::Duration initial_backoff = absl::Milliseconds(1);
    /// Longest sleep between two polls.
    absl::Duration max_backoff = absl::Milliseconds(50);
    /// Deadline of one RPC (shortened to what is left of a `Wait`).
    absl::Duration rpc_timeout = absl::Seconds(10);
    /// How long `Set` keeps retrying a scheduler that is unavailable.
    absl::Duration set_retry_timeout = absl::Seconds(30);
    /// What `Wait`'s timeout and back-off are measured and slept on; not
    /// owned, must outlive the store. Null: the system clock. RPC deadlines
    /// are always in real time (gRPC's).
    Clock* clock = nullptr;
  };

  /// A store that talks to the scheduler over `channel`. INVALID_ARGUMENT for
  /// a null channel or non-positive durations.
  static absl::StatusOr<std::unique_ptr<SchedulerRendezvousStore>> Create(
      std::shared_ptr<grpc::ChannelInterface> channel, Options options);

  ~SchedulerRendezvousStore() override;
  SchedulerRendezvousStore(const SchedulerRendezvousStore&) = delete;
  SchedulerRendezvousStore& operator=(const SchedulerRendezvousStore&) = delete;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::vector<std::string>> Wait(
      absl::Span<const std::string> keys, absl::Duration timeout) override;

 private:
  struct Impl;
  explicit SchedulerRendezvousStore(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace dcp

#endif  // DCP_COMM_SCHEDULER_RENDEZVOUS_STORE_H_
