#ifndef DCP_SCHEDULER_CONTROL_STEP_STATS_H_
#define DCP_SCHEDULER_CONTROL_STEP_STATS_H_

#include <vector>

#include "absl/types/span.h"
#include "proto/plan.pb.h"
#include "scheduler/planner/cost_model.h"

namespace dcp {

/// Each rank's predicted busy seconds in `plan` (index = rank, `world_size`
/// entries): the `model`'s predicted time of every task naming the rank,
/// summed; the gradient sync and any wait for a task's other ranks are
/// not busy time. A task is intra-node when its first and last ranks share
/// a node of `model.gpus_per_node()`, as the report validation counts it.
/// Ranks outside [0, world_size) are ignored. Pure.
std::vector<double> PredictedRankBusySeconds(const v1::StepPlan& plan,
                                             const CostModel& model,
                                             int world_size);

/// The idle fraction of a step whose ranks were busy `rank_busy_seconds`:
/// 1 - mean / max, in [0, 1]; 0 when every rank was busy alike, and for no
/// ranks or a step where no rank was busy. Pure.
double IdleFraction(absl::Span<const double> rank_busy_seconds);

}  // namespace dcp

#endif  // DCP_SCHEDULER_CONTROL_STEP_STATS_H_
