#include "scheduler/control/report_validation.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace dcp {
namespace {

bool SaneSeconds(double s, double max) {
  return std::isfinite(s) && s >= 0 && s <= max;
}

/// INVALID_ARGUMENT "<who>: <args...>".
template <typename... Args>
absl::Status Invalid(absl::string_view who, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(who, ": ", args...));
}

/// The step-level checks: planned, not completed, not yet reported by the
/// rank, and a sane sync time.
absl::Status CheckStep(absl::string_view who, const v1::TimingReport& report,
                       const KnownStep& known, const ReportLimits& limits) {
  if (report.step() < 0 || report.step() >= known.planned_steps) {
    return Invalid(who, "the step has not been planned (planned: ",
                   known.planned_steps == 0
                       ? std::string("none")
                       : absl::StrCat("0..", known.planned_steps - 1),
                   ")");
  }
  if (report.step() < known.completed_steps) {
    return absl::AlreadyExistsError(
        absl::StrCat(who, ": every rank has already reported the step"));
  }
  if (known.plan == nullptr) {
    return absl::InternalError(
        absl::StrCat(who, ": the kept step has no plan"));
  }
  if (known.already_reported) {
    return absl::AlreadyExistsError(absl::StrCat(who, ": rank ", report.rank(),
                                                 " already reported the step"));
  }
  if (!SaneSeconds(report.sync_seconds(), limits.max_seconds)) {
    return Invalid(who, "sync_seconds ", report.sync_seconds(),
                   " is not finite in [0, ", limits.max_seconds, "]");
  }
  return absl::OkStatus();
}

/// The optional details of a task timing: sample lengths as planned (when
/// given), a recompute ratio in [0, 1] and a memory peak >= 0.
absl::Status CheckTaskDetails(absl::string_view who, int index,
                              const v1::TaskTiming& timing,
                              const v1::Task& task) {
  const int given = timing.sample_lengths_size();
  if (given != 0) {
    const int planned = task.lengths_size();
    int i = 0;
    while (i < given && i < planned &&
           timing.sample_lengths(i) == task.lengths(i)) {
      ++i;
    }
    if (i < given || i < planned) {
      return Invalid(who, "task ", index, ": sample_lengths (", given,
                     " samples) differ from the plan's (", planned,
                     " samples) at sample ", i);
    }
  }
  if (!(timing.recompute() >= 0 && timing.recompute() <= 1)) {
    return Invalid(who, "task ", index, ": recompute ", timing.recompute(),
                   " is not in [0, 1]");
  }
  if (timing.peak_memory_bytes() < 0) {
    return Invalid(who, "task ", index, ": peak_memory_bytes ",
                   timing.peak_memory_bytes(), " is negative");
  }
  return absl::OkStatus();
}

/// Checks one task timing of `rank` against the plan's task; `seen` marks
/// the tasks of the report checked before it.
absl::Status CheckTaskTiming(absl::string_view who, int rank,
                             const v1::TaskTiming& timing,
                             const v1::StepPlan& plan,
                             const std::vector<bool>& seen,
                             const ReportLimits& limits) {
  const int index = timing.task_index();
  if (index < 0 || index >= plan.tasks_size()) {
    return Invalid(who, "task_index ", index, " does not exist (the step has ",
                   plan.tasks_size(), " tasks)");
  }
  const v1::Task& task = plan.tasks(index);
  if (std::find(task.ranks().begin(), task.ranks().end(), rank) ==
      task.ranks().end()) {
    return Invalid(who, "task ", index, " runs on ranks [",
                   absl::StrJoin(task.ranks(), ","), "], not on rank ", rank);
  }
  if (seen[index]) return Invalid(who, "task ", index, " is reported twice");
  if (!(timing.seconds() >= limits.min_task_seconds) ||
      !SaneSeconds(timing.seconds(), limits.max_seconds)) {
    return Invalid(who, "task ", index, ": seconds ", timing.seconds(),
                   " is not finite in [", limits.min_task_seconds, ", ",
                   limits.max_seconds, "]");
  }
  if (timing.group_size() != 0 && timing.group_size() != task.ranks_size()) {
    return Invalid(who, "task ", index, " ran with group size ",
                   timing.group_size(), " but the plan has ",
                   task.ranks_size());
  }
  int64_t tokens = 0;
  for (int64_t length : task.lengths()) tokens += length;
  if (timing.tokens() != 0 && timing.tokens() != tokens) {
    return Invalid(who, "task ", index, " ran ", timing.tokens(),
                   " tokens but the plan has ", tokens);
  }
  return CheckTaskDetails(who, index, timing, task);
}

}  // namespace

absl::Status CheckRank(int rank, int world_size) {
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside the world of ", world_size,
                     " ranks (0..", world_size - 1, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckReportAddress(const v1::TimingReport& report,
                                int world_size) {
  RETURN_IF_ERROR(CheckRank(report.rank(), world_size));
  if (report.epoch() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("timing report of rank ", report.rank(), " for step ",
                     report.step(), ": epoch ", report.epoch(),
                     " is negative"));
  }
  return absl::OkStatus();
}

absl::Status CheckSession(absl::string_view session_id,
                          absl::string_view expected) {
  if (session_id != expected) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session '", session_id, "' is not this scheduler's ('", expected,
        "'): the scheduler restarted or the id is wrong; register again"));
  }
  return absl::OkStatus();
}

absl::Status CheckSender(absl::string_view who, int rank, bool registered,
                         int64_t epoch, int64_t current_epoch) {
  if (!registered) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": rank ", rank, " has not registered"));
  }
  if (epoch != current_epoch) {
    return absl::FailedPreconditionError(absl::StrCat(
        who, ": epoch ", epoch, " is not the current epoch ", current_epoch));
  }
  return absl::OkStatus();
}

absl::StatusOr<AcceptedTimings> ValidateTimingReport(
    const v1::TimingReport& report, const KnownStep& known,
    const ReportLimits& limits) {
  RETURN_IF_ERROR(CheckRank(report.rank(), limits.world_size));
  const int rank = report.rank();
  const std::string who =
      absl::StrCat("timing report of rank ", rank, " for step ", report.step());
  RETURN_IF_ERROR(
      CheckSender(who, rank, known.registered, report.epoch(), known.epoch));
  RETURN_IF_ERROR(CheckStep(who, report, known, limits));
  const v1::StepPlan& plan = *known.plan;
  std::vector<bool> seen(plan.tasks_size(), false);
  AcceptedTimings accepted;
  accepted.sync_seconds = report.sync_seconds();
  for (const v1::TaskTiming& timing : report.tasks()) {
    RETURN_IF_ERROR(CheckTaskTiming(who, rank, timing, plan, seen, limits));
    seen[timing.task_index()] = true;
    accepted.busy_seconds += timing.seconds();
  }
  if (report.tasks_size() != known.rank_tasks) {
    return Invalid(who, "rank ", rank, " runs ", known.rank_tasks,
                   " tasks in the step but reported ", report.tasks_size());
  }
  const int node = limits.gpus_per_node;
  for (const v1::TaskTiming& timing : report.tasks()) {
    const v1::Task& task = plan.tasks(timing.task_index());
    if (task.ranks(0) != rank) continue;
    TaskObservation& o = accepted.observations.emplace_back();
    o.group_size = task.ranks_size();
    o.intra_node =
        task.ranks(0) / node == task.ranks(task.ranks_size() - 1) / node;
    o.recompute = task.recompute();
    o.ulysses = task.ulysses();
    o.lengths.assign(task.lengths().begin(), task.lengths().end());
    o.seconds = timing.seconds();
    o.memory_bytes = static_cast<double>(timing.peak_memory_bytes());
  }
  return accepted;
}

absl::StatusOr<std::vector<TaskObservation>> ValidateProfileReport(
    const v1::ProfileReport& report, const ReportLimits& limits) {
  RETURN_IF_ERROR(CheckRank(report.rank(), limits.world_size));
  const std::string who = absl::StrCat("profile of rank ", report.rank());
  if (report.profile().entries_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, " has no entries"));
  }
  std::vector<TaskObservation> observations;
  observations.reserve(report.profile().entries_size());
  for (int i = 0; i < report.profile().entries_size(); ++i) {
    const v1::ProfileEntry& e = report.profile().entries(i);
    const std::string entry = absl::StrCat(who, ", entry ", i);
    if (e.length() <= 0)
      return Invalid(entry, "length ", e.length(), " is not > 0");
    if (e.group_size() < 1 || e.group_size() > limits.world_size) {
      return Invalid(entry, "group_size ", e.group_size(), " is not in [1, ",
                     limits.world_size, "]");
    }
    if (!(e.recompute() >= 0 && e.recompute() <= 1)) {
      return Invalid(entry, "recompute ", e.recompute(), " is not in [0, 1]");
    }
    if (!(e.seconds() >= limits.min_task_seconds) ||
        !SaneSeconds(e.seconds(), limits.max_seconds)) {
      return Invalid(entry, "seconds ", e.seconds(), " is not finite in [",
                     limits.min_task_seconds, ", ", limits.max_seconds, "]");
    }
    if (e.memory_bytes() < 0) {
      return Invalid(entry, "memory_bytes ", e.memory_bytes(), " is negative");
    }
    if (e.ulysses() < 0 ||
        (e.ulysses() > 0 && e.group_size() % e.ulysses() != 0)) {
      return Invalid(entry, "ulysses ", e.ulysses(),
                     " must be 0 or divide group_size ", e.group_size());
    }
    TaskObservation& o = observations.emplace_back();
    o.group_size = e.group_size();
    o.ulysses = e.ulysses();
    o.intra_node = e.group_size() <= limits.gpus_per_node;
    o.recompute = e.recompute();
    o.lengths = {e.length()};
    o.seconds = e.seconds();
    o.memory_bytes = static_cast<double>(e.memory_bytes());
  }
  return observations;
}

}  // namespace dcp
