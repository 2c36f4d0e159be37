#include "train/trainer_internal.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "c10/util/Exception.h"

namespace dcp::train::trainer_internal {

std::string Where(const RankPlan& plan) {
  return absl::StrCat("rank ", plan.rank, ", step ", plan.step, " (epoch ",
                      plan.epoch, ")");
}

std::string WhereTask(const RankPlan& plan, const RankTask& task) {
  return absl::StrCat(Where(plan), ", task ", task.task_index, " (micro-step ",
                      task.micro_step, " of ", plan.tasks.size(), ", group [",
                      absl::StrJoin(task.group_ranks, ","), "])");
}

absl::Status Annotate(const absl::Status& status, const std::string& where) {
  return absl::Status(status.code(),
                      absl::StrCat(where, ": ", status.message()));
}

std::string ExceptionText(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) {
    return c10->what_without_backtrace();
  }
  return e.what();
}

absl::Status RunCollective(
    const std::string& what,
    absl::FunctionRef<c10::intrusive_ptr<c10d::Work>()> start) {
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = start();
  } catch (const std::exception& e) {
    // Refused before anything was sent (an argument c10d checks, such as a
    // root outside the group): the caller's mistake, not a lost peer.
    return absl::InvalidArgumentError(
        absl::StrCat(what, " could not start: ", ExceptionText(e)));
  }
  try {
    work->wait();
  } catch (const std::exception& e) {
    const std::string text = ExceptionText(e);
    const std::string lower = absl::AsciiStrToLower(text);
    const std::string message = absl::StrCat(what, " failed: ", text);
    if (absl::StrContains(lower, "timed out") ||
        absl::StrContains(lower, "timeout")) {
      return absl::DeadlineExceededError(message);
    }
    return absl::UnavailableError(message);
  }
  return absl::OkStatus();
}

absl::Status AllReduce(c10d::ProcessGroup& world, at::Tensor& tensor,
                       c10d::ReduceOp op, const char* what) {
  std::vector<at::Tensor> tensors = {tensor};
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  return RunCollective(absl::StrCat(what, " over the data-parallel world of ",
                                    world.getSize(), " ranks"),
                       [&] { return world.allreduce(tensors, options); });
}

absl::Status Broadcast(c10d::ProcessGroup& world, at::Tensor& tensor, int root,
                       const char* what) {
  std::vector<at::Tensor> tensors = {tensor};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  return RunCollective(
      absl::StrCat(what, " from rank ", root, " of the data-parallel world of ",
                   world.getSize(), " ranks"),
      [&] { return world.broadcast(tensors, options); });
}

}  // namespace dcp::train::trainer_internal
