#ifndef DCP_SCHEDULER_PLANNER_PLAN_PROTO_H_
#define DCP_SCHEDULER_PLANNER_PLAN_PROTO_H_

/// Conversion between the scheduler's plan structs (scheduler/planner/plan.h) and the
/// wire schema every part of dcp shares (proto/plan.proto).
///
/// The C++ structs are what the planner and the simulator work on; the proto
/// adds what a rank needs to act on a plan without the length table: the
/// truncated lengths of each task's samples, the step's token count, the
/// communicator groups, and each task's micro-step index on each of its ranks.
///
///   v1::StepPlan wire = ToProto(plan, lengths, epoch);
///   v1::RankStep mine = RankView(wire, /*rank=*/3);  // streamed to rank 3
///   absl::StatusOr<StepPlan> back = FromProto(wire);  // validated
///
/// All functions are pure and thread-compatible.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/plan.pb.h"
#include "scheduler/planner/plan.h"

namespace dcp {

/// The wire form of `plan`, for epoch `epoch`.
///
/// Copies step, samples, predicted_makespan_s and every task (ranks, samples,
/// loss weights when present, recompute) and fills in:
///  - `Task.lengths`: each sample's length from `lengths` (context window
///    applied), and `StepPlan.total_tokens`, their sum over all tasks;
///  - `Task.task_index` and `Task.micro_steps` (the task's position among the
///    tasks naming each of its ranks);
///  - `StepPlan.groups`: one CommGroup per distinct rank set of the tasks with
///    more than one rank, numbered 1, 2, ... in the order their first task
///    runs, and `Task.group_id` (0 for single-rank tasks, which need no
///    communicator).
///
/// Precondition (a programmer error otherwise, checked): every sample id of
/// the tasks is in [0, lengths.size()), as it is for plans the planner made
/// over `lengths` or that `ReplayStep` accepted. No other check is made; use
/// `FromProto` or `ReplayStep` to validate.
v1::StepPlan ToProto(const StepPlan& plan, const LengthView& lengths,
                     int64_t epoch);
/// The same into `out`, an empty message the caller made (on an arena,
/// say).
void ToProto(const StepPlan& plan, const LengthView& lengths, int64_t epoch,
             v1::StepPlan* out);

/// The scheduler's form of a wire plan, after checking that it is consistent.
///
/// Returns INVALID_ARGUMENT, naming the step (and task), unless:
///  - epoch and step are >= 0; predicted_makespan_s is finite and >= 0;
///  - the step's samples are distinct and >= 0, and each is in exactly one
///    task; every task has at least one sample;
///  - every task has strictly ascending ranks >= 0 and recompute in [0, 1];
///  - `loss_weights` is given (one per sample, finite, >= 0) on every task or
///    on none;
///  - `lengths`, where given, has one entry >= 0 per sample, and when every
///    task has them they add up to `total_tokens`;
///  - `micro_steps`, where given, match the task order, and `task_index`,
///    unless 0 everywhere (not filled in), is each task's position;
///  - groups have distinct ids >= 1 and distinct rank sets of at least two
///    strictly ascending ranks, and each is used by a task;
///  - a task's `group_id` is 0 if and only if it has one rank, and otherwise
///    names the group with exactly the task's ranks.
///
/// The result drops what the structs do not hold (epoch, lengths, groups,
/// indices); `ToProto` recomputes them.
absl::StatusOr<StepPlan> FromProto(const v1::StepPlan& plan);

/// The part of `plan` that `rank` acts on: the tasks naming it in execution
/// order (its micro-steps, so `tasks(i)` is micro-step i) and the groups
/// containing it, ascending by id. A rank named by no task gets a RankStep
/// with no tasks and no groups. Does not validate `plan`.
v1::RankStep RankView(const v1::StepPlan& plan, int rank);

/// `RankView` of every rank in [0, world_size), in one pass over the plan:
/// O(tasks x group size) rather than O(world x tasks). Ranks outside the
/// world are ignored. Does not validate `plan`.
std::vector<v1::RankStep> AllRankViews(const v1::StepPlan& plan,
                                       int world_size);

/// `AllRankViews` into messages the caller made (on an arena, say):
/// `*views[rank]`, empty, becomes `RankView(plan, rank)` for every rank in
/// [0, views.size()).
void FillRankViews(const v1::StepPlan& plan,
                   const std::vector<v1::RankStep*>& views);

}  // namespace dcp

#endif  // DCP_SCHEDULER_PLANNER_PLAN_PROTO_H_
