#include "train/trainer_internal.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/collectives.h"

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
