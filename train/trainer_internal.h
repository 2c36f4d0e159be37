#ifndef DCP_TRAIN_TRAINER_INTERNAL_H_
#define DCP_TRAIN_TRAINER_INTERNAL_H_

// What trainer.cc (a step: tasks, the gradient all-reduce, the optimizer)
// and trainer_world.cc (an epoch's world: undo, state agreement) share:
// error context and the two world collectives. Private to //train:trainer.

#include <ATen/ATen.h>

#include <exception>
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
/// The exception's message, without c10's backtrace.
std::string ExceptionText(const std::exception& e);

/// One all-reduce of `tensor` (in place) over the world: DEADLINE_EXCEEDED
/// when it timed out, UNAVAILABLE for any other failure, naming `what`.
absl::Status AllReduce(c10d::ProcessGroup& world, at::Tensor& tensor,
                       c10d::ReduceOp op, const char* what);
/// A broadcast of `tensor` (in place) from group rank `root` over the
/// world; UNAVAILABLE naming `what` when it fails.
absl::Status Broadcast(c10d::ProcessGroup& world, at::Tensor& tensor, int root,
                       const char* what);

}  // namespace dcp::train::trainer_internal

#endif  // DCP_TRAIN_TRAINER_INTERNAL_H_
