#ifndef DCP_TRAIN_TRAINER_INTERNAL_H_
#define DCP_TRAIN_TRAINER_INTERNAL_H_

// What trainer.cc (a step: tasks, the gradient all-reduce, the optimizer)
// and trainer_world.cc (an epoch's world: undo, state agreement) share:
// error context, the one wrapper every collective runs through, and the two
// world collectives. Private to //train (its own library, :trainer_internal,
// so that it can be tested alone).

#include <ATen/ATen.h>

#include <exception>
#include <string>

#include "absl/functional/function_ref.h"
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

/// Runs one collective: `start` issues it over a group, this waits for it.
/// What c10d throws while it runs (a peer gone, a timeout) becomes
/// DEADLINE_EXCEEDED when it timed out and UNAVAILABLE otherwise, both peer
/// losses to `IsPeerLoss` (comm/communicator.h), with the message "`what`
/// failed: <c10d's text>"; what `start` throws (c10d refused the arguments,
/// nothing was sent) is INVALID_ARGUMENT, "`what` could not start: ...",
/// not a peer loss. Every world collective of the step and of the epoch's
/// state agreement goes through it.
absl::Status RunCollective(
    const std::string& what,
    absl::FunctionRef<c10::intrusive_ptr<c10d::Work>()> start);

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
