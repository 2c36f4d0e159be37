#ifndef DCP_TRAIN_TRAINER_INTERNAL_H_
#define DCP_TRAIN_TRAINER_INTERNAL_H_

// What trainer.cc (a step: tasks, the gradient all-reduce, the optimizer)
// and trainer_world.cc (an epoch's world: undo, state agreement) share:
// error context and the two world collectives (over comm/collectives.h's
// RunCollective, which every collective of theirs runs through). Private to
// //train.

#include <ATen/ATen.h>

#include <string>

#include "absl/status/status.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"
#include "train/rank_plan.h"

namespace dcp::train::trainer_internal {

/// "rank R, step S (epoch E)".
std::string Where(const RankPlan& plan);
/// `Where` and the task: its index, micro-step and group.
std::string WhereTask(const RankPlan& plan, const RankTask& task);
/// `status` with `where` in front of its message, its code kept.
absl::Status Annotate(const absl::Status& status, const std::string& where);
/// One all-reduce of `tensor` (in place) over the world; `RunCollective`'s
/// errors, naming `what` and the world's size.
absl::Status AllReduce(c10d::ProcessGroup& world, at::Tensor& tensor,
                       c10d::ReduceOp op, const char* what);
/// A broadcast of `tensor` (in place) from group rank `root` over the
/// world; `RunCollective`'s errors, naming `what`, `root` and the world's
/// size.
absl::Status Broadcast(c10d::ProcessGroup& world, at::Tensor& tensor, int root,
                       const char* what);

}  // namespace dcp::train::trainer_internal

#endif  // DCP_TRAIN_TRAINER_INTERNAL_H_
