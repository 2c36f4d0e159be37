#ifndef DCP_WORKER_AGENT_AGENT_H_
#define DCP_WORKER_AGENT_AGENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/peer_loss.h"
#include "comm/rendezvous_store.h"
#include "common/clock.h"
#include "proto/plan.pb.h"
#include "proto/scheduler_service.pb.h"
#include "worker_agent/agent_options.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace grpc {
class ChannelInterface;
}  // namespace grpc

namespace dcp {

class CancellableStore;
class PlanReader;
class ProcessGroups;
class ProfileResponder;
class Registration;
class ReportSender;
class StepMailbox;

/// The per-rank agent of a dcp job: registers the rank with the
/// dcp-scheduler, receives the rank's plans on a background stream, forms
/// the c10d process groups they use ahead of time and hands the steps out
/// in order. The dcp-agent daemon serves it to a trainer over a Unix socket
/// (`AgentServer`) or runs the steps itself (execute mode); client_lib
/// embeds it in the trainer's process.
///
/// Plan stream: a reader thread registers, opens StreamPlans from the first
/// step it has not received (the scheduler's `next_step` at start) and
/// queues up to `prefetch_depth` RankSteps, dropping any whose (epoch, step)
/// is not newer than the last received. Each new step's groups with p > 1
/// are queued for warm-up in the rank's `ProcessGroups` (keyed by sorted
/// ranks and epoch), each formed as a ProcessGroupGloo under the plan's
/// `rendezvous_prefix` through the scheduler's store. When the
/// stream breaks (UNAVAILABLE, a lost
/// connection) the reader registers again and resumes after the last step
/// it received, with exponential backoff, at most `max_reconnect_attempts`
/// times in a row; then, or when another agent takes the rank over (ABORTED)
/// or the scheduler restarted (new session), NextStep returns the error.
/// After the scheduler's drain marker the reader ends and NextStep reports
/// `drained` once the queue is empty.
///
/// The agent only wires its parts: `Registration` (the Register calls),
/// `PlanReader` (the stream's thread) filling a `StepMailbox` (what
/// NextStep hands out), `ReportSender` (stream or unary reports),
/// `ProfileResponder` and the `ProcessGroups`. Every time read and wait
/// of theirs is on `AgentOptions::clock`.
///
/// Thread-safety: all methods may be called from any thread. `NextStep` is
/// meant for one consumer (the training loop); `NextStepAsync` for the gRPC
/// service, whose threads must not block. Groups from `Group` are owned by
/// the agent and stay valid until their epoch is released or the agent is
/// destroyed; like any c10d group each is used by one thread at a time (the
/// order of collectives must match on every member). Nothing crashes on
/// errors: every failure comes back as a status.
///
///   AgentOptions options;
///   options.scheduler_address = "10.0.0.1:50051";
///   options.security.tls_ca = "/etc/dcp/ca.crt";  // TLS off loopback
///   options.rank = 3;
///   ASSIGN_OR_RETURN(std::unique_ptr<Agent> agent, Agent::Start(options));
///   int64_t last = -1;
///   while (true) {
///     ASSIGN_OR_RETURN(NextStepResult next,
///                      agent->NextStep(last, absl::Minutes(10)));
///     if (next.drained) break;
///     for (const v1::Task& task : next.step.tasks()) { ... agent->Group() }
///     RETURN_IF_ERROR(agent->ReportTimings(report));
///     last = next.step.step();
///   }
class Agent {
 public:
  /// Registers with the scheduler (waiting up to `connect_timeout` for it)
  /// and starts the plan stream. INVALID_ARGUMENT for bad options (security
  /// options among them: plaintext to a non-loopback scheduler without
  /// `security.insecure`) or a rank or world size the scheduler refuses;
  /// NOT_FOUND for a certificate or token file that cannot be read;
  /// UNAUTHENTICATED / PERMISSION_DENIED when the scheduler refuses the
  /// token or the job id; UNAVAILABLE / DEADLINE_EXCEEDED when the
  /// scheduler cannot be reached (a TLS handshake it refuses among them).
  static absl::StatusOr<std::unique_ptr<Agent>> Start(AgentOptions options);

  /// Shuts down and releases the groups.
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  /// The first step after `after_step` (the last step the caller ran, -1 at
  /// the start), waiting up to `timeout` for it. Queued steps not after
  /// `after_step` are dropped. Asking again with the same `after_step`
  /// returns the same step (so a caller that lost the answer can retry).
  /// DEADLINE_EXCEEDED when nothing came in time; the stream's error when it
  /// failed for good; UNAVAILABLE after `Shutdown`.
  absl::StatusOr<NextStepResult> NextStep(int64_t after_step,
                                          absl::Duration timeout);

  using NextStepCallback =
      std::function<void(absl::StatusOr<NextStepResult> result)>;
  /// `NextStep` without blocking: `done` runs exactly once, with what
  /// NextStep would return, either inline (when the answer is known now) or
  /// later on the agent's own thread (a step arrived, the deadline passed,
  /// the agent shut down), unless `CancelNextStep` removed it first. `done`
  /// must not block. Returns the id for `CancelNextStep`.
  int64_t NextStepAsync(int64_t after_step, absl::Time deadline,
                        NextStepCallback done);
  /// Removes a pending `NextStepAsync`. True when it was pending: its `done`
  /// will never run. False when `done` has run or is running.
  bool CancelNextStep(int64_t id);

  /// The c10d group (ProcessGroupGloo, CPU tensors) of `group` for the epoch
  /// of the last step handed out: held already, or formed now (blocking
  /// until every member asks for it or was warmed, up to
  /// `rendezvous_timeout`). Owned by the agent. INVALID_ARGUMENT for a group
  /// without this rank, with fewer than two ranks or without a rendezvous
  /// prefix; the formation's error otherwise. A trainer on CUDA forms its
  /// own NCCL groups through `rendezvous_store()` instead.
  absl::StatusOr<c10d::ProcessGroup*> Group(const v1::CommGroup& group);

  /// The data-parallel group of the epoch's world for the epoch of the last
  /// step handed out: what the gradient sync closing a step all-reduces
  /// over. Its members are the step's `RankStep.world_ranks` (after a
  /// shrink, the ranks not failed; every rank of the job when the step does
  /// not say). Every member must ask for it, at the same point among its
  /// other collectives (after the step's tasks). It meets under
  /// "<session>/e<epoch>/dp" in the scheduler's store and is cached apart
  /// from the plans' groups of the same members (`CommPurpose`). Owned by
  /// the agent, as for `Group`.
  /// FAILED_PRECONDITION in a world of one rank.
  ///
  /// Once a step of a later epoch has been handed out, the next `NextStep`,
  /// `Group` or `DataParallelGroup` releases the groups of the earlier
  /// epochs (the caller must not use them any more).
  absl::StatusOr<c10d::ProcessGroup*> DataParallelGroup();

  /// Sends one step's timings to the scheduler, retrying UNAVAILABLE and
  /// DEADLINE_EXCEEDED a few times, and FAILED_PRECONDITION once the agent
  /// has registered again when the plan stream was reconnecting (a
  /// scheduler that came back does not know the rank until then).
  /// ALREADY_EXISTS (a retry after a lost ack) counts as success.
  /// INVALID_ARGUMENT for another rank's report.
  absl::Status ReportTimings(const v1::TimingReport& report);
  /// One attempt of `ReportTimings` without blocking; `done` runs on a gRPC
  /// thread and must not block.
  void ReportTimingsAsync(const v1::TimingReport& report,
                          std::function<void(absl::Status)> done);

  /// Blocks until the drain has been handed out by NextStep(Async), the
  /// stream failed for good, `Shutdown` was called, or `timeout` passed.
  /// OK only in the first case.
  absl::Status WaitForDrainDelivered(absl::Duration timeout);

  AgentStats Stats() const;

  /// The scheduler's rendezvous store (keys of this session), for a trainer
  /// that forms its own process groups; `Shutdown` cancels its waits. Owned
  /// by the agent; valid while it lives.
  RendezvousStoreInterface* rendezvous_store() const;

  /// The scheduler's answer to the first registration (session, world size,
  /// model).
  const v1::RegisterResponse& registration() const;
  int rank() const { return options_.rank; }
  /// The clock the agent reads and waits on (`AgentOptions::clock`, or the
  /// system clock).
  Clock* clock() const { return clock_; }

  /// Stops the stream, fails pending and later NextStep calls with
  /// UNAVAILABLE and aborts the groups (collectives in flight fail
  /// instead of hanging); they are freed by the destructor. Idempotent.
  /// Not from a `NextStepAsync` or `ReportTimingsAsync` callback.
  void Shutdown();

 private:
  Agent(AgentOptions options, std::shared_ptr<grpc::ChannelInterface> channel);

  /// Registers for the first time, waiting up to `connect_timeout`.
  absl::Status RegisterFirst();
  /// The scheduler's store, the process groups over it and the plan
  /// reader, after the first registration.
  absl::Status StartStreams();
  /// This rank's process groups, meeting through `store_`.
  absl::Status StartGroups();
  /// Queues the groups of this rank's of a step just received for warm-up.
  void WarmGroups(int64_t epoch, const std::vector<v1::CommGroup>& groups);
  /// The epoch of the last step handed out (the registration's before any):
  /// the one groups are formed for. UNAVAILABLE after `Shutdown`. Releases
  /// the groups of earlier epochs.
  absl::StatusOr<int64_t> GroupEpoch();
  /// Remembers the world of a step handed out, for `DataParallelGroup`.
  void NoteWorld(const absl::StatusOr<NextStepResult>& result);
  /// The data-parallel members of `epoch`: the last step's world if it is
  /// of that epoch and says, else every rank of the job.
  std::vector<int> WorldOf(int64_t epoch) const;

  const AgentOptions options_;
  Clock* const clock_;
  std::shared_ptr<grpc::ChannelInterface> channel_;
  struct Stub;
  std::unique_ptr<Stub> stub_;
  std::unique_ptr<Registration> registration_;
  std::unique_ptr<StepMailbox> mailbox_;
  std::unique_ptr<ReportSender> reports_;
  std::unique_ptr<ProfileResponder> profiles_;
  /// The scheduler's store behind an adapter that `Shutdown` cancels, so a
  /// formation waiting for peers that will not come ends at once.
  std::unique_ptr<RendezvousStoreInterface> scheduler_store_;
  std::unique_ptr<CancellableStore> store_;
  std::unique_ptr<ProcessGroups> groups_;
  std::unique_ptr<PlanReader> reader_;

  /// Serialises `Shutdown`'s joins.
  absl::Mutex join_mu_;

  /// The world of the last step handed out, and the epoch before which the
  /// groups were released.
  mutable absl::Mutex world_mu_;
  int64_t world_epoch_ ABSL_GUARDED_BY(world_mu_) = -1;
  std::vector<int> world_ranks_ ABSL_GUARDED_BY(world_mu_);
  int64_t evicted_before_ ABSL_GUARDED_BY(world_mu_) = 0;
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_AGENT_H_
