#include "train/rank_plan.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/internal/raw_logging.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/repeated_field.h"

namespace dcp {
namespace {

using GroupsById = absl::flat_hash_map<int32_t, const v1::CommGroup*>;

// Says which rank, step and task a rejected plan is about.
class PlanError {
 public:
  PlanError(int rank, int64_t epoch, int64_t step)
      : rank_(rank), epoch_(epoch), step_(step) {}

  template <typename... Args>
  absl::Status Step(const Args&... args) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank_, ", step ", step_, " (epoch ", epoch_, "): ", args...));
  }

  template <typename... Args>
  absl::Status Task(int32_t task_index, const Args&... args) const {
    return Step("task ", task_index, ": ", args...);
  }

 private:
  const int rank_;
  const int64_t epoch_;
  const int64_t step_;
};

bool StrictlyAscending(const google::protobuf::RepeatedField<int32_t>& v) {
  for (int i = 1; i < v.size(); ++i) {
    if (v[i] <= v[i - 1]) return false;
  }
  return true;
}

absl::StatusOr<GroupsById> IndexGroups(
    const google::protobuf::RepeatedPtrField<v1::CommGroup>& groups,
    const PlanError& error) {
  GroupsById by_id;
  for (const v1::CommGroup& group : groups) {
    if (group.id() < 1) {
      return error.Step("group id ", group.id(), " is not positive");
    }
    if (!by_id.emplace(group.id(), &group).second) {
      return error.Step("group id ", group.id(), " appears twice");
    }
  }
  return by_id;
}

// Checks the sample fields of `task` and copies them into `out`.
absl::Status TakeSamples(const v1::Task& task, const PlanError& error,
                         RankTask& out) {
  const int32_t t = task.task_index();
  if (task.samples_size() != task.lengths_size()) {
    return error.Task(t, task.samples_size(), " samples but ",
                      task.lengths_size(), " lengths");
  }
  if (task.loss_weights_size() != 0 &&
      task.loss_weights_size() != task.samples_size()) {
    return error.Task(t, task.loss_weights_size(), " loss_weights for ",
                      task.samples_size(), " samples");
  }
  if (!(task.recompute() >= 0.0 && task.recompute() <= 1.0)) {
    return error.Task(t, "recompute ", task.recompute(), " is outside [0, 1]");
  }
  int64_t total = 0;
  for (int i = 0; i < task.lengths_size(); ++i) {
    if (task.lengths(i) <= 0) {
      return error.Task(t, "sample ", task.samples(i), " has length ",
                        task.lengths(i));
    }
    total += task.lengths(i);
  }
  out.samples.assign(task.samples().begin(), task.samples().end());
  out.lengths.assign(task.lengths().begin(), task.lengths().end());
  out.loss_weights.assign(task.loss_weights().begin(),
                          task.loss_weights().end());
  out.recompute = task.recompute();
  out.total_tokens = total;
  return absl::OkStatus();
}

// Checks the group fields of `task` for `rank` and copies them into `out`.
absl::Status TakeGroup(const v1::Task& task, int rank, const GroupsById& groups,
                       const PlanError& error, RankTask& out) {
  const int32_t t = task.task_index();
  if (task.ranks_size() == 0 || !StrictlyAscending(task.ranks())) {
    return error.Task(t, "ranks [", absl::StrJoin(task.ranks(), ","),
                      "] are not strictly ascending");
  }
  auto it = std::lower_bound(task.ranks().begin(), task.ranks().end(), rank);
  if (it == task.ranks().end() || *it != rank) {
    return error.Task(t, "rank ", rank, " is not in the task's group [",
                      absl::StrJoin(task.ranks(), ","), "]");
  }
  out.group_ranks.assign(task.ranks().begin(), task.ranks().end());
  out.group_rank = static_cast<int>(it - task.ranks().begin());
  out.group_id = task.group_id();
  if (task.ulysses() < 0 ||
      (task.ulysses() > 0 && task.ranks_size() % task.ulysses() != 0)) {
    return error.Task(t, "Ulysses degree ", task.ulysses(),
                      " must be 0 (the whole group) or divide the group of ",
                      task.ranks_size());
  }
  out.ulysses = task.ulysses() > 0 ? task.ulysses() : task.ranks_size();
  if (task.ranks_size() == 1) {
    if (task.group_id() != 0) {
      return error.Task(t, "a single-rank task has group_id 0, not ",
                        task.group_id());
    }
    return absl::OkStatus();
  }
  auto group = groups.find(task.group_id());
  if (group == groups.end()) {
    return error.Task(t, "group_id ", task.group_id(),
                      " names no group of the plan");
  }
  if (!std::equal(group->second->ranks().begin(), group->second->ranks().end(),
                  task.ranks().begin(), task.ranks().end())) {
    return error.Task(t, "ranks [", absl::StrJoin(task.ranks(), ","),
                      "] differ from those of group ", task.group_id(), " [",
                      absl::StrJoin(group->second->ranks(), ","), "]");
  }
  out.rendezvous_prefix = group->second->rendezvous_prefix();
  return absl::OkStatus();
}

absl::StatusOr<RankTask> MakeRankTask(const v1::Task& task, int rank,
                                      int32_t micro_step,
                                      const GroupsById& groups,
                                      const PlanError& error) {
  RankTask out;
  out.task_index = task.task_index();
  out.micro_step = micro_step;
  if (absl::Status s = TakeGroup(task, rank, groups, error, out); !s.ok()) {
    return s;
  }
  if (task.micro_steps_size() != 0) {
    if (task.micro_steps_size() != task.ranks_size()) {
      return error.Task(out.task_index, task.micro_steps_size(),
                        " micro_steps for ", task.ranks_size(), " ranks");
    }
    if (task.micro_steps(out.group_rank) != micro_step) {
      return error.Task(out.task_index, "micro_step ",
                        task.micro_steps(out.group_rank), " of rank ", rank,
                        " is out of order: the task order makes it micro-step ",
                        micro_step);
    }
  }
  if (absl::Status s = TakeSamples(task, error, out); !s.ok()) return s;
  out.shard =
      ShardOfPack(out.total_tokens, static_cast<int>(out.group_ranks.size()),
                  out.group_rank);
  return out;
}

// The checks both entry points share, over the tasks the rank runs.
absl::StatusOr<RankPlan> Build(int64_t epoch, int64_t step, int rank,
                               int64_t step_tokens,
                               const std::vector<const v1::Task*>& tasks,
                               const GroupsById& groups,
                               const PlanError& error) {
  RankPlan plan;
  plan.epoch = epoch;
  plan.step = step;
  plan.rank = rank;
  plan.step_tokens = step_tokens;
  plan.tasks.reserve(tasks.size());
  for (const v1::Task* task : tasks) {
    if (!plan.tasks.empty()) {
      const RankTask& previous = plan.tasks.back();
      if (task->task_index() <= previous.task_index) {
        return error.Task(task->task_index(), "comes after task ",
                          previous.task_index, ": micro-steps out of order");
      }
      const bool weighted = task->loss_weights_size() > 0;
      if (weighted != !previous.loss_weights.empty()) {
        return error.Task(task->task_index(),
                          "loss_weights must be given on every task of a "
                          "step or on none");
      }
    }
    const int32_t micro_step = static_cast<int32_t>(plan.tasks.size());
    absl::StatusOr<RankTask> made =
        MakeRankTask(*task, rank, micro_step, groups, error);
    if (!made.ok()) return made.status();
    plan.tasks.push_back(*std::move(made));
  }
  return plan;
}

// The view's epoch world, when it names one: ascending, holding the rank and
// every rank of its tasks.
absl::Status CheckWorldRanks(const v1::RankStep& step, const PlanError& error) {
  const auto& world = step.world_ranks();
  if (world.empty()) return absl::OkStatus();
  if (!StrictlyAscending(world) || world[0] < 0) {
    return error.Step("world_ranks [", absl::StrJoin(world, ","),
                      "] are not non-negative and strictly ascending");
  }
  auto in_world = [&world](int r) {
    return std::binary_search(world.begin(), world.end(), r);
  };
  if (!in_world(step.rank())) {
    return error.Step("the rank is not in the epoch's world [",
                      absl::StrJoin(world, ","), "]");
  }
  for (const v1::Task& task : step.tasks()) {
    for (int r : task.ranks()) {
      if (!in_world(r)) {
        return error.Task(task.task_index(), "rank ", r,
                          " is not in the epoch's world [",
                          absl::StrJoin(world, ","), "]");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

PackShard ShardOfPack(int64_t total_tokens, int group_size, int group_rank) {
  ABSL_RAW_CHECK(group_size >= 1, "a group has at least one rank");
  ABSL_RAW_CHECK(group_rank >= 0 && group_rank < group_size,
                 "group rank outside the group");
  ABSL_RAW_CHECK(total_tokens >= 0, "negative token count");
  PackShard shard;
  shard.count = (total_tokens + group_size - 1) / group_size;
  shard.padded_tokens = shard.count * group_size;
  shard.begin = shard.count * group_rank;
  shard.real_tokens =
      std::clamp<int64_t>(total_tokens - shard.begin, 0, shard.count);
  return shard;
}

absl::StatusOr<RankPlan> RankPlanFromStep(const v1::StepPlan& plan, int rank) {
  const PlanError error(rank, plan.epoch(), plan.step());
  if (rank < 0) return error.Step("negative rank");
  absl::StatusOr<GroupsById> groups = IndexGroups(plan.groups(), error);
  if (!groups.ok()) return groups.status();
  std::vector<const v1::Task*> mine;
  for (int i = 0; i < plan.tasks_size(); ++i) {
    const v1::Task& task = plan.tasks(i);
    if (task.task_index() != i) {
      return error.Task(task.task_index(), "is at position ", i,
                        " of the plan's tasks");
    }
    if (std::find(task.ranks().begin(), task.ranks().end(), rank) !=
        task.ranks().end()) {
      mine.push_back(&task);
    }
  }
  return Build(plan.epoch(), plan.step(), rank, plan.total_tokens(), mine,
               *groups, error);
}

absl::StatusOr<RankPlan> RankPlanFromRankStep(const v1::RankStep& step) {
  const PlanError error(step.rank(), step.epoch(), step.step());
  if (step.rank() < 0) return error.Step("negative rank");
  absl::StatusOr<GroupsById> groups = IndexGroups(step.groups(), error);
  if (!groups.ok()) return groups.status();
  std::vector<const v1::Task*> tasks;
  tasks.reserve(step.tasks_size());
  for (const v1::Task& task : step.tasks()) tasks.push_back(&task);
  if (absl::Status s = CheckWorldRanks(step, error); !s.ok()) return s;
  absl::StatusOr<RankPlan> plan = Build(step.epoch(), step.step(), step.rank(),
                                        step.total_tokens(), tasks, *groups,
                                        error);
  if (plan.ok()) {
    plan->world_ranks.assign(step.world_ranks().begin(),
                             step.world_ranks().end());
    if (step.has_abandoned_from()) plan->abandoned_from = step.abandoned_from();
  }
  return plan;
}

RankPlan ScaledRankPlan(const RankPlan& plan, int64_t token_scale) {
  ABSL_RAW_CHECK(token_scale >= 1, "token_scale is at least 1");
  if (token_scale == 1) return plan;
  const auto scaled = [token_scale](int64_t tokens) {
    return std::max<int64_t>(1, (tokens + token_scale - 1) / token_scale);
  };
  RankPlan out = plan;
  out.step_tokens = plan.step_tokens > 0 ? scaled(plan.step_tokens) : 0;
  for (RankTask& task : out.tasks) {
    task.total_tokens = 0;
    for (int64_t& length : task.lengths) {
      length = scaled(length);
      task.total_tokens += length;
    }
    task.shard =
        ShardOfPack(task.total_tokens, static_cast<int>(task.group_ranks.size()),
                    task.group_rank);
  }
  return out;
}

}  // namespace dcp
