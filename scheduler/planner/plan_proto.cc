#include "scheduler/planner/plan_proto.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/internal/raw_logging.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace dcp {
namespace {

template <typename Repeated>
bool StrictlyAscending(const Repeated& values) {
  for (int i = 1; i < values.size(); ++i) {
    if (values[i - 1] >= values[i]) return false;
  }
  return true;
}

/// Builds INVALID_ARGUMENT errors that say which step (and task) is wrong.
class Complaint {
 public:
  explicit Complaint(const v1::StepPlan& plan)
      : where_(absl::StrCat("step ", plan.step(), " (epoch ", plan.epoch(),
                            ")")) {}

  template <typename... Args>
  absl::Status Step(const Args&... args) const {
    return absl::InvalidArgumentError(absl::StrCat(where_, ": ", args...));
  }
  template <typename... Args>
  absl::Status Task(int index, const Args&... args) const {
    return absl::InvalidArgumentError(
        absl::StrCat(where_, ", task ", index, ": ", args...));
  }

 private:
  std::string where_;
};

absl::Status ValidateGroups(const v1::StepPlan& plan, const Complaint& error) {
  // Group id -> ranks, and the set of rank lists seen.
  absl::flat_hash_map<int32_t, std::vector<int32_t>> by_id;
  std::map<std::vector<int32_t>, int32_t> by_ranks;
  for (const v1::CommGroup& group : plan.groups()) {
    std::vector<int32_t> ranks(group.ranks().begin(), group.ranks().end());
    const std::string name = absl::StrCat("group ", group.id(), " [",
                                          absl::StrJoin(ranks, ","), "]");
    if (group.id() < 1) return error.Step(name, ": group ids start at 1");
    if (ranks.size() < 2) {
      return error.Step(name, ": a group needs at least two ranks");
    }
    if (!StrictlyAscending(ranks) || ranks.front() < 0) {
      return error.Step(name, ": ranks must be >= 0 and strictly ascending");
    }
    if (!by_id.emplace(group.id(), ranks).second) {
      return error.Step(name, ": group id used twice");
    }
    auto [it, inserted] = by_ranks.emplace(std::move(ranks), group.id());
    if (!inserted) {
      return error.Step(name, ": same ranks as group ", it->second);
    }
  }

  absl::flat_hash_set<int32_t> used;
  for (int i = 0; i < plan.tasks_size(); ++i) {
    const v1::Task& task = plan.tasks(i);
    if (task.ranks_size() == 1) {
      if (task.group_id() != 0) {
        return error.Task(i, "a single-rank task has group_id 0, not ",
                          task.group_id());
      }
      continue;
    }
    auto it = by_id.find(task.group_id());
    if (it == by_id.end()) {
      return error.Task(i, "group_id ", task.group_id(),
                        " names no group of the step");
    }
    if (!std::equal(it->second.begin(), it->second.end(), task.ranks().begin(),
                    task.ranks().end())) {
      return error.Task(i, "ranks [", absl::StrJoin(task.ranks(), ","),
                        "] differ from those of group ", task.group_id());
    }
    used.insert(task.group_id());
  }
  for (const v1::CommGroup& group : plan.groups()) {
    if (!used.contains(group.id())) {
      return error.Step("group ", group.id(), " is used by no task");
    }
  }
  return absl::OkStatus();
}

// The checks of task `i` that need nothing but the task and whether the
// step's tasks carry loss weights (`weighted`).
absl::Status ValidateTaskFields(const v1::Task& task, int i, bool weighted,
                                const Complaint& error) {
  if (task.ranks_size() == 0) return error.Task(i, "no ranks");
  if (!StrictlyAscending(task.ranks()) || task.ranks(0) < 0) {
    return error.Task(i, "ranks [", absl::StrJoin(task.ranks(), ","),
                      "] must be >= 0 and strictly ascending");
  }
  if (task.samples_size() == 0) return error.Task(i, "no samples");
  if (!(task.recompute() >= 0 && task.recompute() <= 1)) {
    return error.Task(i, "recompute ", task.recompute(), " is outside [0, 1]");
  }
  if (task.ulysses() < 0 ||
      (task.ulysses() > 0 && task.ranks_size() % task.ulysses() != 0)) {
    return error.Task(i, "Ulysses degree ", task.ulysses(),
                      " must be 0 (the whole group) or divide the group of ",
                      task.ranks_size());
  }
  if (weighted != (task.loss_weights_size() > 0)) {
    return error.Task(
        i, "loss_weights must be given on every task of a step or on none");
  }
  if (weighted) {
    if (task.loss_weights_size() != task.samples_size()) {
      return error.Task(i, task.loss_weights_size(), " loss_weights for ",
                        task.samples_size(), " samples");
    }
    for (double w : task.loss_weights()) {
      if (!std::isfinite(w) || w < 0) {
        return error.Task(i, "loss weight ", w, " is not finite and >= 0");
      }
    }
  }
  if (task.lengths_size() != 0 && task.lengths_size() != task.samples_size()) {
    return error.Task(i, task.lengths_size(), " lengths for ",
                      task.samples_size(), " samples");
  }
  for (int64_t length : task.lengths()) {
    if (length < 0) return error.Task(i, "length ", length, " < 0");
  }
  if (task.micro_steps_size() != 0 &&
      task.micro_steps_size() != task.ranks_size()) {
    return error.Task(i, task.micro_steps_size(), " micro_steps for ",
                      task.ranks_size(), " ranks");
  }
  return absl::OkStatus();
}

absl::Status Validate(const v1::StepPlan& plan) {
  const Complaint error(plan);
  if (plan.epoch() < 0 || plan.step() < 0) {
    return error.Step("epoch and step must be >= 0");
  }
  if (!std::isfinite(plan.predicted_makespan_s()) ||
      plan.predicted_makespan_s() < 0) {
    return error.Step("predicted_makespan_s must be finite and >= 0, not ",
                      plan.predicted_makespan_s());
  }

  // Sample id -> whether a task has claimed it yet.
  absl::flat_hash_map<int64_t, bool> claimed;
  claimed.reserve(plan.samples_size());
  for (int64_t id : plan.samples()) {
    if (id < 0) return error.Step("sample id ", id, " is negative");
    if (!claimed.emplace(id, false).second) {
      return error.Step("sample ", id, " is listed twice");
    }
  }

  const bool weighted =
      plan.tasks_size() > 0 && plan.tasks(0).loss_weights_size() > 0;
  bool indexed = false;
  for (const v1::Task& task : plan.tasks()) indexed |= task.task_index() != 0;
  bool all_lengths = true;
  int64_t tokens = 0;
  absl::flat_hash_map<int32_t, int32_t> micro_steps;  // rank -> tasks so far

  for (int i = 0; i < plan.tasks_size(); ++i) {
    const v1::Task& task = plan.tasks(i);
    RETURN_IF_ERROR(ValidateTaskFields(task, i, weighted, error));
    for (int64_t id : task.samples()) {
      auto it = claimed.find(id);
      if (it == claimed.end()) {
        return error.Task(i, "sample ", id, " is not a sample of the step");
      }
      if (it->second) {
        return error.Task(i, "sample ", id, " is already in an earlier task");
      }
      it->second = true;
    }
    if (task.lengths_size() == 0) {
      all_lengths = false;
    } else {
      for (int64_t length : task.lengths()) tokens += length;
    }
    if (indexed && task.task_index() != i) {
      return error.Task(i, "task_index is ", task.task_index());
    }
    for (int r = 0; r < task.ranks_size(); ++r) {
      const int32_t expected = micro_steps[task.ranks(r)]++;
      if (task.micro_steps_size() != 0 && task.micro_steps(r) != expected) {
        return error.Task(i, "micro-step on rank ", task.ranks(r), " is ",
                          task.micro_steps(r), ", the task order says ",
                          expected);
      }
    }
  }

  for (const auto& [id, in_task] : claimed) {
    if (!in_task) return error.Step("sample ", id, " is in no task");
  }
  if (all_lengths && plan.tasks_size() > 0 && tokens != plan.total_tokens()) {
    return error.Step("total_tokens is ", plan.total_tokens(),
                      " but the tasks' lengths add up to ", tokens);
  }
  return ValidateGroups(plan, error);
}

}  // namespace

v1::StepPlan ToProto(const StepPlan& plan, const LengthView& lengths,
                     int64_t epoch) {
  v1::StepPlan out;
  ToProto(plan, lengths, epoch, &out);
  return out;
}

void ToProto(const StepPlan& plan, const LengthView& lengths, int64_t epoch,
             v1::StepPlan* out_message) {
  v1::StepPlan& out = *out_message;
  out.set_epoch(epoch);
  out.set_step(plan.step);
  out.mutable_samples()->Add(plan.samples.begin(), plan.samples.end());
  out.set_predicted_makespan_s(plan.predicted_makespan_s);

  std::map<std::vector<int>, int32_t> group_ids;
  absl::flat_hash_map<int, int32_t> micro_steps;  // rank -> tasks so far
  int64_t total_tokens = 0;
  out.mutable_tasks()->Reserve(static_cast<int>(plan.tasks.size()));
  for (int i = 0; i < static_cast<int>(plan.tasks.size()); ++i) {
    const TaskPlan& task = plan.tasks[i];
    v1::Task* wire = out.add_tasks();
    wire->mutable_ranks()->Add(task.ranks.begin(), task.ranks.end());
    wire->mutable_samples()->Add(task.samples.begin(), task.samples.end());
    wire->mutable_loss_weights()->Add(task.loss_weights.begin(),
                                      task.loss_weights.end());
    for (int64_t id : task.samples) {
      ABSL_RAW_CHECK(id >= 0 && id < lengths.size(),
                     "ToProto: sample id outside the length table");
      wire->add_lengths(lengths[id]);
      total_tokens += lengths[id];
    }
    wire->set_recompute(task.recompute);
    wire->set_ulysses(task.ulysses);
    wire->set_task_index(i);
    for (int rank : task.ranks) wire->add_micro_steps(micro_steps[rank]++);

    if (task.ranks.size() > 1) {
      auto [it, inserted] = group_ids.emplace(
          task.ranks, static_cast<int32_t>(group_ids.size()) + 1);
      if (inserted) {
        v1::CommGroup* group = out.add_groups();
        group->set_id(it->second);
        group->mutable_ranks()->Add(task.ranks.begin(), task.ranks.end());
      }
      wire->set_group_id(it->second);
    }
  }
  out.set_total_tokens(total_tokens);
}

absl::StatusOr<StepPlan> FromProto(const v1::StepPlan& plan) {
  if (absl::Status status = Validate(plan); !status.ok()) return status;

  StepPlan out;
  out.step = plan.step();
  out.samples.assign(plan.samples().begin(), plan.samples().end());
  out.predicted_makespan_s = plan.predicted_makespan_s();
  out.tasks.reserve(plan.tasks_size());
  for (const v1::Task& wire : plan.tasks()) {
    TaskPlan& task = out.tasks.emplace_back();
    task.ranks.assign(wire.ranks().begin(), wire.ranks().end());
    task.samples.assign(wire.samples().begin(), wire.samples().end());
    task.loss_weights.assign(wire.loss_weights().begin(),
                             wire.loss_weights().end());
    task.recompute = wire.recompute();
    task.ulysses = wire.ulysses();
  }
  return out;
}

v1::RankStep RankView(const v1::StepPlan& plan, int rank) {
  v1::RankStep out;
  out.set_epoch(plan.epoch());
  out.set_step(plan.step());
  out.set_rank(rank);
  out.set_total_tokens(plan.total_tokens());
  out.set_planned_at_unix_micros(plan.planned_at_unix_micros());
  for (const v1::Task& task : plan.tasks()) {
    if (std::find(task.ranks().begin(), task.ranks().end(), rank) !=
        task.ranks().end()) {
      *out.add_tasks() = task;
    }
  }
  std::vector<const v1::CommGroup*> groups;
  for (const v1::CommGroup& group : plan.groups()) {
    if (std::find(group.ranks().begin(), group.ranks().end(), rank) !=
        group.ranks().end()) {
      groups.push_back(&group);
    }
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const v1::CommGroup* a, const v1::CommGroup* b) {
                     return a->id() < b->id();
                   });
  for (const v1::CommGroup* group : groups) *out.add_groups() = *group;
  return out;
}

void FillRankViews(const v1::StepPlan& plan,
                   const std::vector<v1::RankStep*>& views) {
  const int world_size = static_cast<int>(views.size());
  for (int rank = 0; rank < world_size; ++rank) {
    v1::RankStep& v = *views[rank];
    v.set_epoch(plan.epoch());
    v.set_step(plan.step());
    v.set_rank(rank);
    v.set_total_tokens(plan.total_tokens());
    v.set_planned_at_unix_micros(plan.planned_at_unix_micros());
  }
  auto named = [&](int rank) { return rank >= 0 && rank < world_size; };
  for (const v1::Task& task : plan.tasks()) {
    for (int rank : task.ranks()) {
      if (named(rank)) *views[rank]->add_tasks() = task;
    }
  }
  std::vector<const v1::CommGroup*> groups;
  groups.reserve(plan.groups_size());
  for (const v1::CommGroup& group : plan.groups()) groups.push_back(&group);
  std::stable_sort(groups.begin(), groups.end(),
                   [](const v1::CommGroup* a, const v1::CommGroup* b) {
                     return a->id() < b->id();
                   });
  for (const v1::CommGroup* group : groups) {
    for (int rank : group->ranks()) {
      if (named(rank)) *views[rank]->add_groups() = *group;
    }
  }
}

std::vector<v1::RankStep> AllRankViews(const v1::StepPlan& plan,
                                       int world_size) {
  std::vector<v1::RankStep> views(std::max(world_size, 0));
  std::vector<v1::RankStep*> targets;
  targets.reserve(views.size());
  for (v1::RankStep& view : views) targets.push_back(&view);
  FillRankViews(plan, targets);
  return views;
}

}  // namespace dcp
