#ifndef DCP_WORKER_AGENT_AGENT_H_
#define DCP_WORKER_AGENT_AGENT_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "proto/plan.pb.h"
#include "proto/scheduler_service.pb.h"
#include "comm/comm_key.h"
#include "comm/rendezvous_store.h"

namespace grpc {
class ChannelInterface;
class ClientContext;
}  // namespace grpc

namespace dcp {

class Agent;
class CommunicatorCache;
class ReportStream;

/// The communicator of a group this rank belongs to (p > 1), owned by the
/// agent.
using GroupResolver =
    std::function<absl::StatusOr<Communicator*>(const v1::CommGroup&)>;

/// Runs the scheduler's "data profile" request on this rank: for each group
/// of the request that holds the rank, time the layer and return the
/// entries this rank reports (see `AgentOptions::run_profile`).
using ProfileRunner = std::function<absl::StatusOr<v1::Profile>(
    Agent& agent, const v1::ProfileRequest& request,
    const GroupResolver& groups)>;

/// Configuration of an `Agent`. Only `scheduler_address` and `rank` are
/// required; the defaults suit a single host.
struct AgentOptions {
  /// "host:port" of the dcp-scheduler. Required.
  std::string scheduler_address;
  /// This agent's global rank. Required, >= 0.
  int rank = -1;
  /// Where the agent runs, told to the scheduler for status (e.g. the host
  /// name; empty is fine).
  std::string host;
  /// The local GPU index the rank drives, told to the scheduler.
  int gpu = 0;
  /// The world size the job was started with; the scheduler refuses a
  /// mismatch. 0 accepts the scheduler's.
  int world_size = 0;
  /// The address Gloo communicators listen on and advertise to their peers.
  std::string gloo_hostname = "127.0.0.1";
  /// Bound on forming one communicator group (all members meeting in the
  /// scheduler's rendezvous store and connecting) and on each of its
  /// collectives. A group whose formation times out cannot be formed again
  /// under the same plan, so keep it well above the time the slowest rank
  /// can lag behind (the scheduler's look-ahead of steps).
  absl::Duration rendezvous_timeout = absl::Seconds(120);
  /// Steps received ahead of the caller and kept in memory; their groups are
  /// warmed as they arrive. At least 1.
  int prefetch_depth = 4;
  /// How long `Start` waits for the scheduler to answer the first Register
  /// (it may still be starting).
  absl::Duration connect_timeout = absl::Seconds(30);
  /// Deadline of each unary RPC (Register, ReportTimings), and how long a
  /// report waits for its answer on the report stream.
  absl::Duration rpc_timeout = absl::Seconds(10);
  /// Send timing reports on one StreamReports stream (a unary call a step
  /// costs the scheduler several times more at scale); a report the stream
  /// cannot deliver falls back to ReportTimings. False: unary calls only.
  bool report_stream = true;
  /// After the plan stream breaks, how many reconnections in a row may fail
  /// before the agent gives up (NextStep then returns UNAVAILABLE). A
  /// reconnection that delivers a message resets the count.
  int max_reconnect_attempts = 8;
  /// How long `Shutdown` lets the group formations under way finish before
  /// it cancels them: peers still connecting to a member that leaves can be
  /// aborted by Gloo (`CommunicatorCache::Quiesce`).
  absl::Duration shutdown_formation_grace = absl::Seconds(2);
  /// Sleep before the first reconnection; doubles up to `max_backoff`.
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  /// Builds a communicator of a group this rank belongs to, meeting its
  /// peers under `prefix` in `store` (the scheduler's rendezvous store).
  /// Empty means Gloo over TCP (`GlooCommunicator`) on `gloo_hostname` with
  /// `rendezvous_timeout`; the NCCL path plugs in here.
  std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
      const CommKey& key, int rank, const std::string& prefix,
      RendezvousStoreInterface* store)>
      make_communicator;
  /// Runs a ProfileRequest that arrives on the plan stream, on the reader
  /// thread (the scheduler sends no step before every rank answered, so
  /// nothing waits behind it); the agent then sends the returned profile
  /// with ReportProfile. `groups` forms the request's groups under their
  /// rendezvous prefixes for the request's epoch; every member must ask for
  /// them in the same order. Empty: requests are ignored (the scheduler
  /// plans without this rank's profile after its timeout). A failed run or
  /// report is counted in `AgentStats::profile_failures`. `Shutdown` waits
  /// for a run in progress: formations end at once, a collective whose peer
  /// is gone by `rendezvous_timeout`.
  ProfileRunner run_profile;
};

/// What `Agent::NextStep` hands out: the rank's next step, or the end.
struct NextStepResult {
  /// The step, when `drained` is false.
  v1::RankStep step;
  /// True when the job is drained: no step follows the caller's last one.
  bool drained = false;
};

/// Counters of an agent since it started.
struct AgentStats {
  /// RankSteps received on plan streams and queued.
  int64_t steps_received = 0;
  /// RankSteps handed out by NextStep (a repeated hand-out counts once).
  int64_t steps_delivered = 0;
  /// RankSteps dropped as stale: (epoch, step) not newer than one already
  /// received or delivered, or skipped by the caller's `after_step`.
  int64_t stale_dropped = 0;
  /// Plan streams reopened after a break.
  int64_t reconnects = 0;
  /// Timing reports the scheduler took, and of those the ones it took over
  /// a ReportTimings call after the report stream could not deliver them.
  int64_t reports_sent = 0;
  int64_t report_fallbacks = 0;
  /// Profile requests run and reported, and those that failed (run or
  /// report).
  int64_t profiles_sent = 0;
  int64_t profile_failures = 0;
  /// Of the communicator cache: groups served formed, groups formed on
  /// demand, groups formed ahead of use, failed formations, groups held.
  int64_t cache_hits = 0;
  int64_t cache_misses = 0;
  int64_t groups_warmed = 0;
  int64_t group_failures = 0;
  int64_t groups_live = 0;
};

/// The per-rank agent of a dcp job: registers the rank with the
/// dcp-scheduler, receives the rank's plans on a background stream, forms
/// the communicator groups they use ahead of time and hands the steps out
/// in order. The dcp-agent daemon serves it to a trainer over a Unix socket
/// (`AgentServer`) or runs the steps itself (execute mode); client_lib
/// embeds it in the trainer's process.
///
/// Plan stream: a reader thread registers, opens StreamPlans from the first
/// step it has not received (the scheduler's `next_step` at start) and
/// queues up to `prefetch_depth` RankSteps, dropping any whose (epoch, step)
/// is not newer than the last received. Each new step's groups with p > 1
/// are queued for warm-up in the `CommunicatorCache` (keyed by sorted ranks
/// and epoch, formed under the plan's `rendezvous_prefix` through the
/// scheduler's store). When the stream breaks (UNAVAILABLE, a lost
/// connection) the reader registers again and resumes after the last step
/// it received, with exponential backoff, at most `max_reconnect_attempts`
/// times in a row; then, or when another agent takes the rank over (ABORTED)
/// or the scheduler restarted (new session), NextStep returns the error.
/// After the scheduler's drain marker the reader ends and NextStep reports
/// `drained` once the queue is empty.
///
/// Thread-safety: all methods may be called from any thread. `NextStep` is
/// meant for one consumer (the training loop); `NextStepAsync` for the gRPC
/// service, whose threads must not block. Communicators from `Group` are
/// owned by the agent and stay valid until the agent is destroyed; like any
/// communicator each is used by one thread at a time. Nothing crashes on
/// errors: every failure comes back as a status.
///
///   AgentOptions options;
///   options.scheduler_address = "10.0.0.1:50051";
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
  /// and starts the plan stream. INVALID_ARGUMENT for bad options or a rank
  /// or world size the scheduler refuses; UNAVAILABLE / DEADLINE_EXCEEDED
  /// when the scheduler cannot be reached.
  static absl::StatusOr<std::unique_ptr<Agent>> Start(AgentOptions options);

  /// Shuts down and releases the communicators.
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

  /// The communicator of `group` for the epoch of the last step handed out:
  /// from the cache, or formed now (blocking until every member asks for it
  /// or was warmed, up to `rendezvous_timeout`). Owned by the agent.
  /// INVALID_ARGUMENT for a group without this rank or with fewer than two
  /// ranks; the formation's error otherwise.
  absl::StatusOr<Communicator*> Group(const v1::CommGroup& group);

  /// The data-parallel group of the whole world for the epoch of the last
  /// step handed out: what the gradient sync closing a step all-reduces
  /// over. Every rank must ask for it, at the same point among its other
  /// collectives (after the step's tasks). It meets under
  /// "<session>/e<epoch>/dp" in the scheduler's store and is cached apart
  /// from the plans' groups of the same members (`CommPurpose`). Owned by
  /// the agent. FAILED_PRECONDITION in a world of one rank.
  absl::StatusOr<Communicator*> DataParallelGroup();

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

  /// The scheduler's answer to the first registration (session, world size,
  /// model).
  const v1::RegisterResponse& registration() const { return registration_; }
  int rank() const { return options_.rank; }

  /// Stops the stream, fails pending and later NextStep calls with
  /// UNAVAILABLE and aborts the communicators (collectives in flight fail
  /// instead of hanging); they are freed by the destructor. Idempotent.
  /// Not from a `NextStepAsync` or `ReportTimingsAsync` callback.
  void Shutdown();

 private:
  struct Waiter {
    int64_t after_step = 0;
    absl::Time deadline;
    NextStepCallback done;
  };

  explicit Agent(AgentOptions options);

  absl::StatusOr<v1::RegisterResponse> Register(absl::Duration timeout,
                                                bool wait_for_ready);
  void ReaderLoop();
  /// Reads one stream until it ends; returns its status and whether any
  /// message arrived.
  absl::Status ReadStream(int64_t from_step, bool* got_message);
  void HandleStep(v1::RankStep step);
  /// Runs `request` with `run_profile` and reports it; failures are counted
  /// (the scheduler's timeout covers a rank that does not answer).
  void HandleProfile(const v1::ProfileRequest& request);
  /// Sends a profile, retrying UNAVAILABLE / DEADLINE_EXCEEDED a few times.
  absl::Status SendProfile(const v1::ProfileReport& report);
  /// The open report stream, opened now if there is none or it ended; null
  /// after `Shutdown` or with `report_stream` off.
  std::shared_ptr<ReportStream> CurrentReportStream() ABSL_LOCKS_EXCLUDED(mu_);
  /// Sends `report` on the report stream and waits up to `rpc_timeout` for
  /// its answer: OK (taken, or ALREADY_EXISTS), an INVALID_ARGUMENT
  /// rejection, or nullopt when ReportTimings should take over (no stream,
  /// the stream ended, no answer in time, any other answer).
  std::optional<absl::Status> ReportOnStream(const v1::TimingReport& report);
  /// What a report stream's answer means for the caller: OK (taken, or
  /// ALREADY_EXISTS; counted in `reports_sent`), an INVALID_ARGUMENT
  /// rejection naming the step, or nullopt when ReportTimings should take
  /// over.
  std::optional<absl::Status> SettleStreamAnswer(const absl::Status& answer,
                                                 int64_t step)
      ABSL_LOCKS_EXCLUDED(mu_);
  /// The epoch of the last step handed out (the registration's before any):
  /// the one groups are formed for. UNAVAILABLE after `Shutdown`.
  absl::StatusOr<int64_t> GroupEpoch() const ABSL_LOCKS_EXCLUDED(mu_);
  /// One ReportTimings call without blocking (`ReportTimingsAsync` without
  /// the stream).
  void ReportUnaryAsync(const v1::TimingReport& report,
                        std::function<void(absl::Status)> done);
  /// Ends every report stream and waits until gRPC is done with them.
  void CloseReportStreams() ABSL_LOCKS_EXCLUDED(mu_);
  void WaiterLoop();

  /// NextStep's answer for `after_step` if known now; drops stale steps.
  std::optional<absl::StatusOr<NextStepResult>> TakeLocked(int64_t after_step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ShouldWakeWaiterLoop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasRoom() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Fail(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);

  const AgentOptions options_;
  std::shared_ptr<grpc::ChannelInterface> channel_;
  struct Stub;
  std::unique_ptr<Stub> stub_;
  v1::RegisterResponse registration_;
  /// The scheduler's store behind an adapter that `Shutdown` cancels, so a
  /// formation waiting for peers that will not come ends at once.
  class CancellableStore;
  std::unique_ptr<RendezvousStoreInterface> scheduler_store_;
  std::unique_ptr<CancellableStore> store_;
  std::unique_ptr<CommunicatorCache> cache_;

  mutable absl::Mutex mu_;
  /// Received, not yet handed out; ascending (epoch, step).
  std::deque<v1::RankStep> queue_ ABSL_GUARDED_BY(mu_);
  /// The newest (epoch, step) received; (-1, -1) before any.
  int64_t last_epoch_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t last_step_ ABSL_GUARDED_BY(mu_) = -1;
  /// The last step handed out, for repeated asks and for `Group`'s epoch.
  std::optional<v1::RankStep> delivered_ ABSL_GUARDED_BY(mu_);
  bool drained_ ABSL_GUARDED_BY(mu_) = false;
  /// The stream broke and the reader has not registered again yet.
  bool reconnecting_ ABSL_GUARDED_BY(mu_) = false;
  /// Successful registrations so far (the first one included).
  int64_t registrations_ ABSL_GUARDED_BY(mu_) = 0;
  bool drain_delivered_ ABSL_GUARDED_BY(mu_) = false;
  /// Set when the stream failed for good.
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  /// The open stream's context, to cancel it on shutdown.
  grpc::ClientContext* stream_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  /// Every report stream opened whose call may not be over yet, the
  /// current one last.
  std::vector<std::shared_ptr<ReportStream>> report_streams_
      ABSL_GUARDED_BY(mu_);
  std::map<int64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  int64_t next_waiter_id_ ABSL_GUARDED_BY(mu_) = 1;
  /// Bumped on every new waiter so the waiter thread re-reads deadlines.
  int64_t waiters_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t seen_generation_ ABSL_GUARDED_BY(mu_) = 0;
  AgentStats stats_ ABSL_GUARDED_BY(mu_);
  /// Counts ReportTimingsAsync calls whose callback has not finished; shared
  /// with the callbacks so it outlives the last of them.
  struct AsyncCalls;
  std::shared_ptr<AsyncCalls> async_calls_;

  /// Serialises `Shutdown`'s joins.
  absl::Mutex join_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::thread reader_thread_;
  std::thread waiter_thread_;
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_AGENT_H_
