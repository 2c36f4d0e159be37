#include "worker_agent/simulated_step.h"

#include <algorithm>
#include <vector>

#include "proto/timing_report.h"

namespace dcp {

StepExecution SimulateStep(const v1::RankStep& step, absl::Duration task_time) {
  StepExecution out;
  // Every task takes `task_time` (at least a microsecond).
  const double seconds = std::max(absl::ToDoubleSeconds(task_time), 1e-6);
  for (int m = 0; m < step.tasks_size(); ++m) {
    const v1::Task& task = step.tasks(m);
    int64_t tokens = 0;
    for (int64_t length : task.lengths()) tokens += length;

    ExecutedTask& ran = out.tasks.emplace_back();
    ran.task_index = task.task_index();
    ran.micro_step = m;
    ran.group.assign(task.ranks().begin(), task.ranks().end());
    ran.samples.assign(task.samples().begin(), task.samples().end());
    ran.scaled_tokens = tokens;
    ran.seconds = seconds;
    out.tokens += tokens;
  }
  out.report = TimingReportOf(
      step, std::vector<double>(step.tasks_size(), seconds), 1e-6);
  return out;
}

}  // namespace dcp
