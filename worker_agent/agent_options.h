#ifndef DCP_WORKER_AGENT_AGENT_OPTIONS_H_
#define DCP_WORKER_AGENT_AGENT_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/comm_key.h"
#include "comm/peer_loss.h"
#include "comm/rendezvous_store.h"
#include "common/clock.h"
#include "common/security_options.h"
#include "proto/plan.pb.h"
#include "proto/scheduler_service.pb.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace dcp {

class ReportSpool;  // worker_agent/report_spool.h

class Agent;

/// The c10d process group of a group this rank belongs to (p > 1), owned by
/// the agent.
using GroupResolver =
    std::function<absl::StatusOr<c10d::ProcessGroup*>(const v1::CommGroup&)>;

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
  /// How the connection to the scheduler is secured
  /// (common/security_options.h): TLS against `tls_ca`, a client
  /// certificate for mutual TLS, the bearer token and the job id on every
  /// call. The default, plaintext, only reaches a loopback
  /// `scheduler_address` (else `security.insecure`).
  SecurityOptions security;
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
  /// The address the agent's Gloo process groups listen on and advertise to
  /// their peers.
  std::string gloo_hostname = "127.0.0.1";
  /// Bound on forming one process group (all members meeting in the
  /// scheduler's rendezvous store and connecting) and on each of its
  /// collectives. A group whose formation times out cannot be formed again
  /// under the same plan, so keep it well above the time the slowest rank
  /// can lag behind (the scheduler's look-ahead of steps).
  absl::Duration rendezvous_timeout = absl::Seconds(120);
  /// Bound on forming a group of an epoch later than the one this agent
  /// registered in (a world shrunk or grown), and on each of its
  /// collectives (ProcessGroupGloo has one timeout for both); zero: three
  /// times `rendezvous_timeout`. After a peer failed the survivors reach the
  /// new world's groups each when its own wait on the dead peer ends, which
  /// on a loaded machine has taken more than two `rendezvous_timeout`s
  /// apart.
  absl::Duration world_timeout = absl::ZeroDuration();
  /// Steps received ahead of the caller and kept in memory; their groups are
  /// warmed as they arrive (see `warm_groups`). At least 1.
  int prefetch_depth = 4;
  /// Form the process groups of each step's groups as the step arrives, so
  /// that `Group` finds them ready. False for a trainer that forms its own
  /// groups (an NCCL trainer on CUDA, through `Agent::rendezvous_store()`)
  /// and never calls `Group`; `Group` then forms them on demand.
  bool warm_groups = true;
  /// The caller's training cannot follow a change of the world (no
  /// dcp-agent mode says so: execute mode re-forms its groups over each
  /// epoch's `RankStep.world_ranks`); told to the scheduler, which then
  /// refuses the rank if it shrinks the world on a failure
  /// (`--on_rank_failure=shrink`).
  bool fixed_world = false;
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
  /// reconnection that delivers a message resets the count. The agent
  /// gives up only once the scheduler has also been unreachable for
  /// `max_outage` (on `clock`): a restart shorter than that is a pause to
  /// the trainer (NextStep waits, reports are kept: `max_pending_reports`).
  int max_reconnect_attempts = 8;
  absl::Duration max_outage = absl::Minutes(10);
  /// Reports the trainer sent over the sidecar (`ReportTimingsAsync`) while
  /// the scheduler was unreachable, kept in order and delivered once it is
  /// back; the trainer is answered OK for them. Beyond this many it is
  /// answered RESOURCE_EXHAUSTED.
  int max_pending_reports = 1024;
  /// Where those kept reports are written too, so a restarted agent
  /// delivers them (dcp-agent --report_spool_dir; see ReportSpool). Null:
  /// memory only. Not owned; must outlive the agent.
  ReportSpool* report_spool = nullptr;
  /// Called on the plan stream's thread after each failed reconnection,
  /// with the failures in a row, the last error and how long the scheduler
  /// has been unreachable (dcp-agent logs it). Must be quick. May be empty.
  std::function<void(int failures, const absl::Status& last,
                     absl::Duration outage)>
      on_reconnect_failed;
  /// How long `Shutdown` lets the group formations under way finish before
  /// it cancels them: peers still connecting to a member that leaves can be
  /// aborted by Gloo (`ProcessGroups::Quiesce`).
  absl::Duration shutdown_formation_grace = absl::Seconds(2);
  /// Sleep before the first reconnection; doubles up to `max_backoff`.
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  /// What the agent reads the time from and waits on: back-off sleeps,
  /// NextStep's timeouts and deadlines, the wait for a report's answer,
  /// rendezvous waits. The deadlines of its RPCs are durations that gRPC
  /// counts down in real time. Null: the system clock. Not owned; must
  /// outlive the agent.
  Clock* clock = nullptr;
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
  /// Called on the plan stream's thread for each step it queues (not one
  /// dropped as stale) that carries the scheduler's planned-at time
  /// (`RankStep.planned_at_unix_micros`), with that time and this agent's
  /// `clock` on receipt: the plan's delivery, as the agent measures it
  /// (the two hosts' clock skew included). Must be quick. May be empty.
  std::function<void(absl::Time planned, absl::Time received)>
      on_step_received;
  /// Called after each process group the agent forms (`Group`, the
  /// warm-ups, `DataParallelGroup`), with how long the formation took on
  /// `clock` (the rendezvous and the Gloo connections). On the forming thread;
  /// not for failed formations. Must be thread-safe and quick. May be
  /// empty.
  std::function<void(absl::Duration)> on_group_formed;
};

/// INVALID_ARGUMENT naming the first option out of range.
absl::Status CheckAgentOptions(const AgentOptions& options);

/// The bound on forming a group of `epoch` for an agent registered in
/// `registered_epoch`: `rendezvous_timeout` in that epoch, `world_timeout`
/// (or three times `rendezvous_timeout`) in any later one.
absl::Duration GroupFormTimeout(const AgentOptions& options,
                                int64_t registered_epoch, int64_t epoch);

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
  /// Of the rank's process groups: groups served formed, groups formed on
  /// demand, groups formed ahead of use, failed formations, groups held.
  int64_t cache_hits = 0;
  int64_t cache_misses = 0;
  int64_t groups_warmed = 0;
  int64_t group_failures = 0;
  int64_t groups_live = 0;
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_AGENT_OPTIONS_H_
