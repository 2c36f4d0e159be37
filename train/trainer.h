#ifndef DCP_TRAIN_TRAINER_H_
#define DCP_TRAIN_TRAINER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/process_groups.h"
#include "common/clock.h"
#include "proto/plan.pb.h"
#include "train/corpus.h"
#include "train/rank_plan.h"
#include "train/transformer.h"

namespace torch::optim {
class AdamW;
}  // namespace torch::optim

namespace dcp::train {

/// torch::optim::AdamW's coefficients (its defaults, but weight decay).
struct AdamWCoefficients {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

/// What a RankTrainer is: the model, the data, the optimizer, and where the
/// rank sits in the data-parallel world. Plain value type.
struct RankTrainerOptions {
  TransformerOptions model;
  /// The decoder needs corpus.vocab <= model.vocab; the DiT variant needs
  /// corpus.feature_dim equal to the model's features.
  SyntheticCorpus::Options corpus;
  AdamWCoefficients optimizer;
  /// Ranks of the data-parallel world (>= 1) and this one's global rank.
  int world_size = 1;
  int rank = 0;
  /// The scheduler's session: the world's gradient all-reduce meets under
  /// "<session_id>/e<epoch>/dp", as dcp's agents do. Required when
  /// world_size > 1.
  std::string session_id;
  /// Pre-step states kept (a copy of the parameters and the AdamW moments
  /// each) for the last `history` steps applied, so that the first step of
  /// an epoch whose `RankPlan.abandoned_from` says a step this rank applied
  /// was abandoned can go back to the state before it. The scheduler's
  /// lookahead bounds how many applied steps a shrink abandons. 0: none
  /// kept (such a step then fails FAILED_PRECONDITION).
  int history = 0;
  /// What `StepStats` times are measured on; null: the system clock. A
  /// `ProcessCpuClock` measures the rank's own work where ranks share
  /// cores. Not owned.
  Clock* clock = nullptr;
};

/// What one step did, as every rank of the world sees it.
struct StepStats {
  int64_t step = 0;
  /// The step's loss over the global batch: sum over every task and sample
  /// of loss_weight * mean token loss (with the derived weights, the mean
  /// over every token of the step). The same on every rank.
  double loss = 0;
  /// L2 norm of the world's summed gradient before the optimizer step. The
  /// same on every rank.
  double grad_norm = 0;
  /// Real tokens the world ran in the step.
  int64_t tokens = 0;
  /// Time of the whole step on this rank, on `RankTrainerOptions.clock`.
  double seconds = 0;
  /// Parallel to the plan's tasks: each micro-step's forward and backward
  /// (its collectives included), on the same clock.
  std::vector<double> task_seconds;
  /// What the step took after its last task: the world's agreement vote,
  /// the gradient all-reduce and the optimizer step (what dcp's cost model
  /// calls the gradient sync).
  double sync_seconds = 0;
  /// `WeightsDigest()` when the step began, after its epoch's state was
  /// made one (`Step`), before any task; empty from `ReferenceStep`.
  std::string start_digest;
};

struct StepOptions {
  /// Keep a copy of the summed gradients (after the world's all-reduce,
  /// before the optimizer step) for `gradients()`.
  bool keep_gradients = false;
};

/// Trains one rank of a dcp job: runs the rank's part of each step's plan
/// (its tasks in micro-step order, Ulysses sequence-parallel over each
/// task's group), sums the gradients over the data-parallel world and takes
/// one AdamW step, so that every rank ends the step with the same
/// parameters, those a single process would have reached on the whole batch
/// (`ReferenceStep`).
///
/// Failure is collective: a rank that cannot run a task (a sample the corpus
/// cannot make, wrong-size weights, a group size that does not divide the
/// heads) still takes its part in that task's first collective and in
/// every later task of its own, refusing them, so that its peers fail at
/// once instead of waiting; every rank then learns in the world's
/// agreement all-reduce that the step failed, and none takes the optimizer
/// step. Each returns an error naming its rank, the step and the task.
/// Peers that never arrive fail within the groups' timeout.
///
/// Thread-compatible: one Step at a time. `groups` is not owned and must
/// outlive the trainer; null for a world of one.
///
///   ASSIGN_OR_RETURN(auto trainer, RankTrainer::Create(options, groups));
///   ASSIGN_OR_RETURN(RankPlan mine, RankPlanFromRankStep(update.step()));
///   ASSIGN_OR_RETURN(StepStats stats, trainer->Step(mine));
class RankTrainer {
 public:
  /// INVALID_ARGUMENT for a bad model, a corpus that does not fit it, a
  /// rank outside the world, or a world of more than one rank without
  /// groups or a session; also when `groups` belongs to another rank.
  static absl::StatusOr<std::unique_ptr<RankTrainer>> Create(
      RankTrainerOptions options, ProcessGroups* groups);

  ~RankTrainer();
  RankTrainer(const RankTrainer&) = delete;
  RankTrainer& operator=(const RankTrainer&) = delete;

  /// Runs this rank's part of a step and takes the optimizer step (see the
  /// class comment). Every rank of the step's world (`plan.world_ranks`,
  /// or every rank of `world_size`) must call it with its own plan of the
  /// same step, including ranks with no task; the gradients are summed over
  /// that world. INVALID_ARGUMENT for a plan this rank cannot run (or a
  /// world that does not hold it), ABORTED when another rank could not run
  /// its part, DEADLINE_EXCEEDED / UNAVAILABLE when a peer is missing; the
  /// parameters are then unchanged and the gradients cleared.
  ///
  /// The first step of an epoch after 0 (a world re-formed after a rank
  /// failed or returned) first undoes the steps of earlier epochs this
  /// rank applied that were abandoned (`plan.abandoned_from`: the state
  /// before the first of them comes back from the history), then makes the
  /// world's state one: the members
  /// agree, over the epoch's data-parallel group, on the member that took
  /// the fewest optimizer steps among those that took any and whose state
  /// is of the newest epoch any member trained in (a rank whose last step
  /// was cut short by a failure holds the weights before it; a rank that
  /// hung through an epoch holds an older state; a rank that joins fresh
  /// holds none), and it broadcasts its parameters,
  /// AdamW state and step count to the others. Without such a member every
  /// rank holds the seeded initial weights already.
  absl::StatusOr<StepStats> Step(const RankPlan& plan,
                                 const StepOptions& options = {});

  /// Runs this rank's tasks of `plan` (forward and backward, over their
  /// groups) and drops the gradients: no world all-reduce, no optimizer
  /// step, the parameters unchanged. Returns each task's seconds on the
  /// trainer's clock, as `StepStats.task_seconds`. What the profile stage
  /// times; every member of a task's group must rehearse it too. The
  /// errors of `Step`, for this rank only (there is no world agreement).
  absl::StatusOr<std::vector<double>> Rehearse(const RankPlan& plan);

  /// The whole step in this process: every task run whole (a group of one),
  /// with the plan's loss weights (or the same derived ones), then the same
  /// optimizer step. What `Step` on every rank of a world must equal. Needs
  /// no groups and communicates with no one.
  absl::StatusOr<StepStats> ReferenceStep(const v1::StepPlan& plan,
                                          const StepOptions& options = {});

  /// The summed gradients of the last step with `keep_gradients`, parallel
  /// to `model().named_parameters()`; empty otherwise.
  const std::vector<at::Tensor>& gradients() const { return gradients_; }

  const Transformer& model() const { return *model_; }
  const RankTrainerOptions& options() const { return options_; }
  /// FNV-1a (64 bits, in hex) over the bytes of every parameter in
  /// `model().parameters()` order: equal on ranks whose weights are equal
  /// bit for bit.
  std::string WeightsDigest() const;
  /// Optimizer steps this trainer's weights have taken (a member that
  /// received the world's state at an epoch change took the source's).
  int64_t steps_applied() const { return steps_applied_; }

 private:
  struct TaskOutcome;
  struct TasksRun;

  RankTrainer(RankTrainerOptions options, std::unique_ptr<Transformer> model,
              ProcessGroups* groups);

  // Step over `plan`; `world` is the data-parallel group (null: this
  // process holds the whole batch).
  absl::StatusOr<StepStats> RunStep(const RankPlan& plan,
                                    c10d::ProcessGroup* world,
                                    const StepOptions& options);
  // Runs (forward, backward) one task, or refuses it when `refuse`.
  // Forms the groups of this rank's tasks in task order (as every member
  // does), so that no task's time includes its group's formation.
  absl::Status FormTaskGroups(const RankPlan& plan);
  // Runs the plan's tasks in order from `start` on the trainer's clock,
  // refusing those after a failure (so that their peers fail at once).
  TasksRun RunTasks(const RankPlan& plan, absl::Time start,
                    TaskOutcome& outcome);
  absl::Status RunTask(const RankPlan& plan, const RankTask& task, bool refuse,
                       TaskOutcome& outcome);
  // Sums gradients and stats over `world`, takes the optimizer step.
  absl::StatusOr<StepStats> Finish(const RankPlan& plan,
                                   c10d::ProcessGroup* world, double loss,
                                   int64_t tokens, const StepOptions& options);
  void ZeroGradients();
  // The ranks of the plan's data-parallel world, ascending.
  absl::StatusOr<std::vector<int>> WorldOf(const RankPlan& plan) const;
  // Gives every member of `world` (a new epoch's) the state of one of them
  // (see `Step`).
  absl::Status SyncState(c10d::ProcessGroup& world);
  // This rank's parameters, AdamW moments and counts as flat tensors, and
  // their installation from the same.
  std::vector<at::Tensor> StateTensors();
  absl::Status InstallState(const std::vector<at::Tensor>& state);
  // Restores the state before the first applied step numbered
  // `abandoned_from` or later, if any, and forgets the later ones.
  absl::Status RollBack(int64_t abandoned_from);
  // The distributed part of `Step` once the world is known.
  absl::StatusOr<StepStats> StepInWorld(const RankPlan& plan,
                                        std::vector<int> members,
                                        const StepOptions& options);

  const RankTrainerOptions options_;
  const std::unique_ptr<Transformer> model_;
  ProcessGroups* const groups_;
  const SyntheticCorpus corpus_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::vector<at::Tensor> gradients_;
  int64_t steps_applied_ = 0;
  // The state before each of the last `options_.history` steps applied,
  // oldest first, and the latest step whose state before was dropped.
  struct Saved {
    int64_t step = 0;
    std::vector<at::Tensor> state;
  };
  std::deque<Saved> history_;
  int64_t forgotten_through_ = -1;
  // The epoch whose world last agreed on the state; epoch 0 starts from the
  // seeded weights on every rank.
  int64_t synced_epoch_ = 0;
};

}  // namespace dcp::train

#endif  // DCP_TRAIN_TRAINER_H_
