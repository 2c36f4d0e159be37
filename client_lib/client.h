#ifndef DCP_CLIENT_LIB_CLIENT_H_
#define DCP_CLIENT_LIB_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/peer_loss.h"
#include "comm/rendezvous_store.h"
#include "proto/plan.pb.h"
#include "worker_agent/agent.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace dcp {

/// How a trainer reaches its plans; see `Client`.
struct ClientOptions {
  enum class Mode {
    /// The agent runs inside the trainer's process (recommended): tasks
    /// carry usable process groups, formed ahead of use.
    kInProcess,
    /// The agent is a dcp-agent (`--mode=serve`) beside the trainer,
    /// reached over its Unix socket; tasks carry no process group, the
    /// trainer forms its own from each task's ranks and rendezvous prefix.
    kSidecar,
  };
  Mode mode = Mode::kInProcess;
  /// In-process mode: the embedded agent's options (scheduler address,
  /// rank, world size, ...; `agent.security` secures its connection: TLS,
  /// a client certificate, the bearer token, the job id).
  AgentOptions agent;
  /// Sidecar mode: the dcp-agent's socket, as a path or "unix:/path". A
  /// Unix socket is local to the host and takes no credentials: its file's
  /// and directory's permissions decide who may act for the rank (the
  /// dcp-agent holds the scheduler's credentials).
  std::string agent_socket;
  /// Sidecar mode: the rank the dcp-agent serves (its reports must match).
  int rank = -1;
  /// How long `NextStep` waits for the next step before DEADLINE_EXCEEDED.
  absl::Duration step_timeout = absl::Minutes(10);
  /// Sidecar mode: deadline of ReportStep's call to the agent.
  absl::Duration rpc_timeout = absl::Seconds(30);
  /// In-process mode: hand each task of more than one rank its c10d process
  /// group (ProcessGroupGloo, CPU tensors), which the agent forms as steps
  /// arrive (comm/process_groups.h). False for a trainer that forms its own
  /// groups through `rendezvous_store()` (NCCL groups on CUDA, or a task's
  /// Ulysses subgroups and ring, `ProcessGroups::Hybrid`): the tasks'
  /// `group` is then null and the agent forms nothing.
  bool form_groups = true;
};

/// One task of a step, as the trainer runs it: one forward and backward
/// pass over `samples`, packed back to back, on the sequence-parallel group
/// `group_ranks`.
struct StepTask {
  /// The task's position in the global plan (for reports and logs).
  int task_index = 0;
  /// Its position among this rank's tasks of the step.
  int micro_step = 0;
  std::vector<int64_t> samples;
  /// Parallel to `samples`: tokens, truncated to the context window.
  std::vector<int64_t> lengths;
  /// Parallel to `samples`: the factor each sample's mean per-token loss is
  /// multiplied by (proto/plan.proto, Task.loss_weights); empty when the
  /// plan carries none.
  std::vector<double> loss_weights;
  /// Fraction of layers that recompute their activations, in [0, 1].
  double recompute = 0;
  /// Ascending global ranks of the group; this rank is one of them.
  std::vector<int> group_ranks;
  /// The group's Ulysses degree (proto/plan.proto, Task.ulysses): u-way
  /// Ulysses inside a (p / u)-way ring; 0 for the whole group (no ring).
  int ulysses = 0;
  /// In-process mode, p > 1: the group's c10d process group, owned by the
  /// client (valid until a later epoch's step or its destruction; use it
  /// from one thread at a time; see `ClientOptions::form_groups`). Null for
  /// p = 1 and in sidecar mode.
  c10d::ProcessGroup* group = nullptr;
  /// Where the group's members meet in the scheduler's rendezvous store
  /// (empty for p = 1): what a sidecar trainer forms its own group under.
  std::string rendezvous_prefix;
};

/// One global batch as this rank sees it.
struct Step {
  int64_t step = -1;
  int64_t epoch = 0;
  /// The step's tokens over all ranks (the denominator of the weights).
  int64_t total_tokens = 0;
  /// This rank's micro-steps, in order; empty when it sits the step out
  /// (it still joins the gradient sync and reports).
  std::vector<StepTask> tasks;
  /// True when the job is drained: there is no step, stop training.
  bool drained = false;
  /// The epoch's world: the ranks whose gradients the step's sync sums
  /// (`RankStep.world_ranks`, ascending). Empty when the plan does not say:
  /// every rank of the job. After a shrink, the ranks not failed.
  std::vector<int> world_ranks;
  /// Set in the steps of an epoch a shrink began that abandoned steps
  /// (`RankStep.abandoned_from`): the first abandoned step. A trainer that
  /// applied a step numbered this or higher of an earlier epoch to its
  /// weights goes back to its state before the first such step, then takes
  /// the world's state (see `Client::NextEpoch`). -1 when not set.
  int64_t abandoned_from = -1;
  /// The step as the scheduler sent it for this rank (what `tasks` is made
  /// from): a RankTrainer's input through `RankPlanFromRankStep`
  /// (train/rank_plan.h).
  v1::RankStep plan;
};

// `IsPeerLoss(status)` (comm/peer_loss.h): whether a step's error says a
// peer is gone, what a trainer answers with `Client::NextEpoch`.

/// The training loop's view of dcp: fetch each step's plan, run its tasks,
/// report how long they took. C++ first; a Python binding wraps the same
/// calls.
///
///   ClientOptions options;
///   options.agent.scheduler_address = "10.0.0.1:50051";
///   options.agent.security.tls_ca = "/etc/dcp/ca.crt";  // TLS off loopback
///   options.agent.rank = rank;
///   options.agent.world_size = world;
///   ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
///                    Client::Connect(std::move(options)));
///   bool lost = false;  // a peer failed: on to the next epoch
///   while (true) {
///     absl::StatusOr<Step> step =
///         lost ? client->NextEpoch() : client->NextStep();
///     if (!lost && IsPeerLoss(step.status())) { lost = true; continue; }
///     RETURN_IF_ERROR(step.status());
///     if (step->drained) break;
///     lost = false;
///     // At a new epoch: undo step->abandoned_from on, take the world's
///     // state (see NextEpoch).
///     absl::StatusOr<std::vector<double>> seconds =
///         RunForwardBackward(*step);  // uses task.group, then syncs
///     if (IsPeerLoss(seconds.status())) { lost = true; continue; }
///     RETURN_IF_ERROR(seconds.status());
///     RETURN_IF_ERROR(client->ReportStep(*step, *seconds, sync_seconds));
///   }
///
/// Thread-compatible: one training loop calls it. The client owns its
/// agent (in-process) or channel (sidecar); destroying it stops the agent
/// and frees the process groups it handed out.
class Client {
 public:
  /// In-process: starts the embedded agent (registers with the scheduler).
  /// Sidecar: connects to the dcp-agent's socket (waiting up to
  /// `rpc_timeout` for it). INVALID_ARGUMENT for bad options; the agent's or
  /// the connection's error otherwise.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(ClientOptions options);

  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  /// The step after the last one returned (waits up to `step_timeout`).
  /// In-process mode resolves every group of the step before returning (the
  /// agent has usually formed them already), so the tasks can run at once.
  /// Asking again after an error returns the same step.
  absl::StatusOr<Step> NextStep();

  /// What a trainer calls instead of `NextStep` once a step of epoch E
  /// (the epoch of the last step `NextStep` fetched) failed because a peer
  /// is gone: its collectives failed, or `NextStep` could not form its
  /// groups. Drops the steps of epoch E and earlier not returned yet (the
  /// failed one among them when `NextStep` returned the error for it) and
  /// returns the first step of a later epoch: when a rank fails, a
  /// scheduler with `--on_rank_failure=shrink` plans the steps its world
  /// did not complete again, for the ranks left, in a new epoch. The
  /// dropped steps and the failed one are not to be reported.
  ///
  /// The trainer's part at the step returned (the "undo and re-sync"):
  /// when it applied a step numbered `abandoned_from` or higher, it goes
  /// back to its state before the first of them; then the members agree on
  /// one state (in-process mode, over the new epoch's `DataParallelGroup`,
  /// which spans `world_ranks`; `train::RankTrainer::Step` does both).
  /// Drained when the job ended instead; DEADLINE_EXCEEDED when no step of
  /// a later epoch came within `step_timeout` (the scheduler holds the job,
  /// `--on_rank_failure=hold`, until the rank comes back); the error of
  /// forming the new step's groups as for `NextStep`.
  absl::StatusOr<Step> NextEpoch();

  /// Reports the measured seconds of each of `step`'s tasks, in the order of
  /// `step.tasks` (one entry each, positive), and of the gradient sync that
  /// closed the step (0: not measured; the scheduler then learns nothing
  /// about the sync from this step). INVALID_ARGUMENT when the sizes differ,
  /// a task time is not positive or the sync time is negative.
  absl::Status ReportStep(const Step& step,
                          const std::vector<double>& task_seconds,
                          double sync_seconds = 0);

  /// In-process mode: the data-parallel group of the epoch's world (the
  /// step's `RankStep.world_ranks`: after a shrink, the ranks not failed),
  /// for the gradient all-reduce that closes a step
  /// (`Agent::DataParallelGroup`; every member calls it after the step's
  /// tasks; formed once per epoch, the earlier epochs' released once a step
  /// of a later one is returned), a c10d group like the tasks'.
  /// Owned by the client. FAILED_PRECONDITION in sidecar mode (the agent's
  /// groups live in its process) and in a world of one. The trainer
  /// keeps its model state across epochs itself: at the first step of a
  /// new epoch it undoes abandoned steps and takes the world's state over
  /// this group (see `NextEpoch`; a returning rank needs the others'
  /// weights the same way).
  absl::StatusOr<c10d::ProcessGroup*> DataParallelGroup();

  /// This client's global rank.
  int rank() const;

  /// In-process mode: the scheduler's rendezvous store, where a trainer's
  /// own process groups meet (`Agent::rendezvous_store`), and the session
  /// its data-parallel group is named after ("<session>/e<epoch>/dp"). Null
  /// and empty in sidecar mode.
  RendezvousStoreInterface* rendezvous_store() const;
  std::string session_id() const;

  /// In-process mode: the embedded agent (stats, registration); null in
  /// sidecar mode.
  Agent* agent() { return agent_.get(); }

 private:
  struct Sidecar;
  explicit Client(ClientOptions options);

  /// The agent's answer for the step after `last_step_`, waiting up to
  /// `timeout`; notes its epoch in `fetched_epoch_`.
  absl::StatusOr<NextStepResult> Fetch(absl::Duration timeout);
  /// The `Step` of a fetched answer, its groups resolved (in-process).
  absl::StatusOr<Step> Resolve(NextStepResult next);

  const ClientOptions options_;
  std::unique_ptr<Agent> agent_;
  std::unique_ptr<Sidecar> sidecar_;
  /// The step last returned by NextStep (-1 before the first).
  int64_t last_step_ = -1;
  /// The epoch of the last step fetched, returned or not (-1 before the
  /// first): the one `NextEpoch` leaves.
  int64_t fetched_epoch_ = -1;
};

}  // namespace dcp

#endif  // DCP_CLIENT_LIB_CLIENT_H_
