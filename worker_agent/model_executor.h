#ifndef DCP_WORKER_AGENT_MODEL_EXECUTOR_H_
#define DCP_WORKER_AGENT_MODEL_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/peer_loss.h"
#include "comm/rendezvous_store.h"
#include "common/clock.h"
#include "common/model_spec.h"
#include "proto/plan.pb.h"
#include "proto/scheduler_service.pb.h"
#include "worker_agent/step_execution.h"

namespace dcp {

class ProcessGroups;
namespace train {
class RankTrainer;
}  // namespace train

/// Configuration of a `ModelExecutor`. Plain value type.
struct ModelExecutorOptions {
  /// The model to train (train/transformer.h builds it from the spec: the
  /// decoder when `causal`, the DiT variant otherwise). Required.
  ModelSpec model;
  /// This rank and the job's world. rank >= 0, world_size >= 1.
  int rank = -1;
  int world_size = 1;
  /// The scheduler's session: the world's gradient all-reduce meets under
  /// "<session_id>/e<epoch>/dp". Required when world_size > 1.
  std::string session_id;
  /// Divisor of every sequence length (ceil(L / k), at least one token), so
  /// that plans made for GPUs train in seconds on a CPU. Reports carry the
  /// plan's tokens; their seconds are what the scaled tasks took. >= 1.
  int64_t token_scale = 64;
  /// Train in float64 instead of float32.
  bool float64 = false;
  /// Seeds the initial weights and the synthetic corpus: every rank of a
  /// job must use the same.
  uint64_t seed = 0;
  double learning_rate = 1e-3;
  /// Bound on forming a process group and on each of its collectives.
  absl::Duration group_timeout = absl::Seconds(120);
  /// Bound on forming the data-parallel group and on each of its
  /// collectives; zero: three times `group_timeout`. Longer than
  /// `group_timeout` because after a peer failed the survivors reach the new
  /// world's group each when its own waits on the dead peer end, which under
  /// load has taken more than two `group_timeout`s.
  absl::Duration world_timeout = absl::ZeroDuration();
  /// Told how long each process group took to form
  /// (`ProcessGroups::Options::on_formed`). May be empty.
  std::function<void(absl::Duration)> on_group_formed;
  /// Address this rank's Gloo device listens on and advertises.
  std::string hostname = "127.0.0.1";
  /// Sets torch's intra-op threads of this process (at::set_num_threads)
  /// when positive: 1 where several ranks share a host's cores. 0 leaves
  /// torch's own choice.
  int torch_threads = 0;
  /// Pre-step states kept to undo steps a shrink abandoned after this rank
  /// applied them (`train::RankTrainerOptions::history`): at least the
  /// scheduler's --lookahead_steps (default 4). Each costs a copy of the
  /// parameters and the AdamW moments.
  int history = 8;
  /// What tasks and steps are timed on: the system clock when null; a
  /// `ProcessCpuClock` counts the rank's own work only, for ranks that
  /// share cores. Not owned.
  Clock* clock = nullptr;
};

/// Trains one rank of a dcp job on the CPU, as dcp-agent's execute mode
/// does: each step of the plan stream is the rank's `RankPlan`
/// (train/rank_plan.h), scaled by `token_scale`, run by a `RankTrainer`
/// (forward, backward with the plan's recompute, Ulysses sequence
/// parallelism over each task's c10d Gloo group, the world's gradient
/// all-reduce, AdamW), and becomes the timing report the scheduler learns
/// from. The groups meet through `store` (the scheduler's rendezvous store)
/// and are cached for the executor's life.
///
/// Gloo and CPU only: Debian's libtorch (1.13) is built without CUDA, so
/// c10d has no NCCL process group and there are no CUDA tensors to give
/// one. A GPU trainer forms NCCL groups from each task's ranks and
/// rendezvous prefix (e.g. from Python, with a CUDA build of PyTorch).
///
/// Also runs the scheduler's start-up "data profile": real forward and
/// backward passes over the request's grid, timed, with their peak
/// resident memory.
///
/// Thread-compatible: one call at a time.
///
///   ASSIGN_OR_RETURN(std::unique_ptr<ModelExecutor> executor,
///                    ModelExecutor::Create(options, agent->rendezvous_store()));
///   ASSIGN_OR_RETURN(StepExecution done, executor->RunStep(step));
///   RETURN_IF_ERROR(agent->ReportTimings(done.report));
class ModelExecutor {
 public:
  /// INVALID_ARGUMENT naming a bad option or a model the trainer cannot
  /// build; UNAVAILABLE when the Gloo device cannot be created. `store` is
  /// not owned and must outlive the executor.
  static absl::StatusOr<std::unique_ptr<ModelExecutor>> Create(
      ModelExecutorOptions options, RendezvousStoreInterface* store);

  ~ModelExecutor();
  ModelExecutor(const ModelExecutor&) = delete;
  ModelExecutor& operator=(const ModelExecutor&) = delete;

  /// Trains this rank's part of `step` (every rank of the step's world,
  /// `RankStep.world_ranks`, must run the same step). The first step of a
  /// later epoch first aborts and releases the groups of the earlier ones
  /// and makes the new world's state one (`RankTrainer::Step`).
  /// INVALID_ARGUMENT naming the rank, step and task for a plan the rank
  /// cannot run (the other ranks then fail ABORTED, none takes the
  /// optimizer step); a peer failure (`IsPeerLoss`) when a peer is
  /// missing: the step's epoch is then given up, its groups aborted (the
  /// peers' collectives on them fail at once) and its later steps refused
  /// FAILED_PRECONDITION.
  absl::StatusOr<StepExecution> RunStep(const v1::RankStep& step);

  /// The profile grid on this rank: for each shape of `request` (in
  /// order; `ProfileShapes`), on the request's group of its size holding
  /// this rank (alone for 1), for each length and then each recompute
  /// ratio, one sequence of that length (scaled like a task's) forward and
  /// backward as the shape's u-way Ulysses inside a ring, `repetitions`
  /// times; an entry's seconds are the median, its memory_bytes the largest
  /// rise of resident memory over the runs. Only a group's first rank
  /// returns entries (every rank for size 1). INVALID_ARGUMENT for a shape
  /// whose degree does not divide the heads and its size, or a size with no
  /// group holding this rank.
  absl::StatusOr<v1::Profile> RunProfile(const v1::ProfileRequest& request);

  const ModelExecutorOptions& options() const { return options_; }

 private:
  ModelExecutor(ModelExecutorOptions options,
                std::unique_ptr<ProcessGroups> groups,
                std::unique_ptr<train::RankTrainer> trainer);

  // One grid point of the profile: seconds (median) and peak bytes.
  absl::StatusOr<v1::ProfileEntry> ProfilePoint(const v1::ProfileRequest& request,
                                                const v1::CommGroup* group,
                                                int ulysses, int64_t length,
                                                double recompute,
                                                int64_t sample);

  const ModelExecutorOptions options_;
  const std::unique_ptr<ProcessGroups> groups_;
  const std::unique_ptr<train::RankTrainer> trainer_;
  // The epoch of the last step run: its groups are the ones held.
  int64_t epoch_ = 0;
};

// A step that failed with `IsPeerLoss` (comm/peer_loss.h) left the
// weights those before it: a new world can go on from them.

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_MODEL_EXECUTOR_H_
