#ifndef DCP_TRAIN_RANK_PLAN_H_
#define DCP_TRAIN_RANK_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/plan.pb.h"

namespace dcp {

/// The part of a task's packed sequence one member of its group holds. The
/// pack of `total_tokens` T is padded to `padded_tokens` = p * ceil(T / p);
/// group rank g holds the padded positions [begin, begin + count), with
/// count = ceil(T / p) on every member. Positions at or past T are padding:
/// the first `real_tokens` of the shard are tokens, the rest padding (the
/// last members of a nearly empty pack may hold only padding).
struct PackShard {
  int64_t begin = 0;
  int64_t count = 0;
  int64_t real_tokens = 0;
  int64_t padded_tokens = 0;
};

/// The shard group rank `group_rank` of `group_size` holds of a pack of
/// `total_tokens`. Programmer invariants (checked with ABSL_RAW_CHECK):
/// group_size >= 1, 0 <= group_rank < group_size, total_tokens >= 0.
PackShard ShardOfPack(int64_t total_tokens, int group_size, int group_rank);

/// One micro-step of a rank: a task of the step, as the rank runs it.
struct RankTask {
  /// Task.task_index: the task's place in the step's global order.
  int32_t task_index = 0;
  /// The task's place among this rank's tasks of the step, from 0.
  int32_t micro_step = 0;
  /// CommGroup.id of the task's group; 0 when p = 1.
  int32_t group_id = 0;
  /// Global ranks of the group, ascending; its size is p.
  std::vector<int> group_ranks;
  /// This rank's index in `group_ranks`.
  int group_rank = 0;
  /// The group's Ulysses degree u (Task.ulysses, 0 there read as p): u-way
  /// Ulysses inside a (p / u)-way ring; p when the group has no ring.
  int ulysses = 1;
  /// CommGroup.rendezvous_prefix of the group: where its members meet.
  /// Empty when p = 1, and in plans that did not come from a scheduler.
  std::string rendezvous_prefix;
  /// The packed samples, in packing order, with their (truncated) lengths.
  std::vector<int64_t> samples;
  std::vector<int64_t> lengths;
  /// Parallel to `samples`; empty when the plan carries no weights (then
  /// every task of the step has none and the trainer derives them).
  std::vector<double> loss_weights;
  /// Fraction of layers recomputed in the backward pass, in [0, 1].
  double recompute = 0;
  /// Sum of `lengths`: the tokens of the whole pack (all members).
  int64_t total_tokens = 0;
  /// What this rank holds of the pack under plain Ulysses (one contiguous
  /// range). With a ring (p / ulysses > 1) the rank holds two zig-zag ranges
  /// instead (PackLayout and ShardTask of train/sequence_layout.h, given
  /// the ring size); the trainer then cuts them from the whole pack and
  /// counts its real tokens from that layout, not from this.
  PackShard shard;
};

/// What one rank runs in one step.
struct RankPlan {
  int64_t epoch = 0;
  int64_t step = 0;
  int rank = -1;
  /// StepPlan.total_tokens: the denominator of the loss weights.
  int64_t step_tokens = 0;
  /// The rank's micro-steps, in order (tasks[i].micro_step == i). Empty
  /// when the rank sits the step out; it still joins the data-parallel
  /// gradient sync.
  std::vector<RankTask> tasks;
  /// RankStep.world_ranks: the epoch's world, ascending, this rank among
  /// them; empty when the plan does not say (every rank of the job's world).
  std::vector<int> world_ranks;
  /// RankStep.abandoned_from: the first step of the earlier epochs that a
  /// shrink abandoned, in the steps of the epoch it began; unset otherwise.
  std::optional<int64_t> abandoned_from;
};

/// Turns a step's plan into what rank `rank` runs. A plan the rank cannot
/// run is INVALID_ARGUMENT naming the rank, the step and the task: a task
/// with unsorted or repeated ranks, samples and lengths (or non-empty loss
/// weights) of different sizes, a non-positive length, a recompute ratio
/// outside [0, 1], micro_steps that disagree with the task order, a
/// task_index that is not the task's position in the plan, a group id that
/// names no group of the plan (or one with other ranks), weights on some
/// tasks only. Pure; thread-safe.
///
///   ASSIGN_OR_RETURN(RankPlan mine, RankPlanFromStep(plan, /*rank=*/3));
///   for (const RankTask& task : mine.tasks) { ... }
absl::StatusOr<RankPlan> RankPlanFromStep(const v1::StepPlan& plan, int rank);

/// The same from the per-rank view a plan stream delivers (PlanUpdate.step):
/// every task must name `step.rank()`, and its tasks must come in
/// micro-step order (ascending task_index; micro_steps, when present, equal
/// to the position). The groups the tasks refer to must be in
/// `step.groups()`. Its `world_ranks`, when present, must be strictly
/// ascending, non-negative and hold `step.rank()`, and every task's ranks
/// must be among them.
absl::StatusOr<RankPlan> RankPlanFromRankStep(const v1::RankStep& step);

/// `plan` with every sample `token_scale` times shorter (ceil(L / k), at
/// least one token), so that a plan made for GPUs runs in seconds on a CPU:
/// lengths, pack totals and shards follow, and the step's token count is
/// ceil(step_tokens / k). Loss weights the plan carries are kept (they are
/// the unscaled plan's, so the step's weights sum to about 1, not exactly).
/// A `token_scale` of 1 returns the plan unchanged. Programmer invariant:
/// token_scale >= 1.
RankPlan ScaledRankPlan(const RankPlan& plan, int64_t token_scale);

}  // namespace dcp

#endif  // DCP_TRAIN_RANK_PLAN_H_
