#ifndef DCP_WORKER_AGENT_RELAY_PLAN_MUX_H_
#define DCP_WORKER_AGENT_RELAY_PLAN_MUX_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/scheduler_service.pb.h"

namespace dcp {

/// Where one local StreamPlans call's messages go (the relay's reactor of
/// that call; a fake in tests).
class PlanSink {
 public:
  /// The next message of the rank's plan stream.
  virtual void Send(const v1::PlanUpdate& update) = 0;
  /// The rank's stream is over with `status`; nothing follows.
  virtual void End(const absl::Status& status) = 0;

 protected:
  ~PlanSink() = default;
};

/// The multiplexing of a node's StreamPlans calls onto StreamNodePlans calls
/// upstream: subscriptions that arrive within `gather_window` of the first
/// one pending go upstream together as one call (a node's agents start
/// together, so a node costs one upstream stream, not one per rank); each
/// upstream message is split into its ranks' parts, and a part's end ends
/// only its rank's local call. A subscription that comes later (a restarted
/// rank) goes upstream in a call of its own, where the scheduler replaces
/// the rank's older part (ending it ABORTED, as it would a StreamPlans call).
///
/// Pure: no gRPC, no clock, no threads; the caller passes the time, opens
/// the upstream calls `TakeGathered` returns and feeds back what they read.
/// Not thread-safe (the relay holds one lock around it). Sinks are
/// borrowed: a sink stays valid until it is ended or `Unsubscribe`d.
///
///   PlanMux mux(absl::Milliseconds(20));
///   mux.Subscribe(&sink, request, now);
///   if (auto call = mux.TakeGathered(now + absl::Milliseconds(20))) {
///     // open StreamNodePlans(call->request); per message:
///     mux.Deliver(call->id, message);
///   }
class PlanMux {
 public:
  /// One upstream StreamNodePlans call to open.
  struct Upstream {
    int64_t id = 0;
    v1::NodePlansRequest request;
  };

  explicit PlanMux(absl::Duration gather_window)
      : gather_window_(gather_window) {}

  /// Queues a subscription. A pending one of the same rank is replaced: it
  /// ends ABORTED, as the scheduler would end it.
  void Subscribe(PlanSink* sink, v1::StreamPlansRequest request,
                 absl::Time now);
  /// When the pending subscriptions are due to go upstream; nullopt when
  /// none is pending.
  std::optional<absl::Time> GatherDeadline() const;
  /// The pending subscriptions as one call once `now` reached the gather
  /// deadline; nullopt before, or when none is pending.
  std::optional<Upstream> TakeGathered(absl::Time now);

  /// Routes a message read on upstream call `id` to its ranks' sinks.
  void Deliver(int64_t id, const v1::NodePlanUpdate& update);
  /// Upstream call `id` ended with `status`: the sinks still on it end with
  /// it (the scheduler's status reaches the agents as it is).
  void EndUpstream(int64_t id, const absl::Status& status);
  /// Forgets `sink` (its agent went away) without ending it. Returns the
  /// upstream call it was on when no sink is left there (to cancel), else
  /// nullopt.
  std::optional<int64_t> Unsubscribe(PlanSink* sink);
  /// Ends every sink, pending or upstream, with `status` (shutdown).
  void EndAll(const absl::Status& status);

  /// Upstream calls with a sink still on them.
  int upstream_calls() const { return static_cast<int>(upstreams_.size()); }

 private:
  struct Pending {
    PlanSink* sink;
    v1::StreamPlansRequest request;
  };
  using Ranks = absl::flat_hash_map<int32_t, PlanSink*>;

  const absl::Duration gather_window_;
  std::vector<Pending> pending_;
  absl::Time first_pending_;
  int64_t next_id_ = 1;
  absl::flat_hash_map<int64_t, Ranks> upstreams_;
  /// Each sink's upstream call (0: pending).
  absl::flat_hash_map<PlanSink*, int64_t> calls_;
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_RELAY_PLAN_MUX_H_
