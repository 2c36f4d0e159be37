#include "scheduler/delivery/planned_step_log.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "scheduler/delivery/delivery_stats.h"

namespace dcp::plan_delivery {

thread_local PlanningClock::Readings PlanningClock::readings_;

absl::Time PlanningClock::Now() {
  const absl::Time now = absl::Now();
  Readings& r = readings_;
  if (r.count < kKept) {
    r.wall[r.count] = now;
    r.cpu[r.count] = ThreadCpuTime();
  }
  ++r.count;
  return now;
}

std::optional<std::pair<int, int>> PlanningClock::Readings::Find(
    absl::Duration planning_time) const {
  const int kept = static_cast<int>(std::min<int64_t>(count, kKept));
  for (int end = kept - 1; end > 0; --end) {
    for (int start = end - 1; start >= 0; --start) {
      if (wall[end] - wall[start] == planning_time) {
        return std::make_pair(start, end);
      }
    }
  }
  return std::nullopt;
}

std::optional<PlanningClock::Readings> PlanningClock::TakePlanningReadings() {
  std::optional<Readings> out;
  if (readings_.count >= 2) out = readings_;
  readings_.count = 0;
  return out;
}

void StepLog::Add(const PlannedStepEvent& event) {
  PlannedStep p;
  p.callback = absl::Now();
  p.step = event.step;
  p.planning_time = event.planning_time;
  p.tasks = event.tasks;
  p.groups = event.groups;
  const absl::Duration cpu = ThreadCpuTime();
  const auto readings = PlanningClock::TakePlanningReadings();
  const std::optional<std::pair<int, int>> pair =
      readings.has_value() ? readings->Find(event.planning_time) : std::nullopt;
  p.exact = pair.has_value();
  p.planned = p.exact ? readings->wall[pair->second] : p.callback;
  if (p.exact) {
    const auto [start, end] = *pair;
    p.planning_cpu = readings->cpu[end] - readings->cpu[start];
    p.fanout_cpu = cpu - readings->cpu[end];
  }
  absl::MutexLock lock(&mu_);
  steps_.push_back(p);
}

std::vector<PlannedStep> StepLog::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return steps_;
}

}  // namespace dcp::plan_delivery
