#include "worker_agent/simulated_step.h"

#include <algorithm>

namespace dcp {

StepExecution SimulateStep(const v1::RankStep& step, absl::Duration task_time) {
  StepExecution out;
  out.report.set_epoch(step.epoch());
  out.report.set_step(step.step());
  out.report.set_rank(step.rank());
  // The scheduler refuses times that are not positive.
  const double seconds = std::max(absl::ToDoubleSeconds(task_time), 1e-6);
  for (int m = 0; m < step.tasks_size(); ++m) {
    const v1::Task& task = step.tasks(m);
    int64_t tokens = 0;
    for (int64_t length : task.lengths()) tokens += length;
    v1::TaskTiming& timing = *out.report.add_tasks();
    timing.set_task_index(task.task_index());
    timing.set_micro_step(m);
    timing.set_group_size(task.ranks_size());
    timing.set_tokens(tokens);
    for (int64_t length : task.lengths()) timing.add_sample_lengths(length);
    timing.set_recompute(task.recompute());
    timing.set_ulysses(task.ulysses());
    timing.set_seconds(seconds);

    ExecutedTask& ran = out.tasks.emplace_back();
    ran.task_index = task.task_index();
    ran.micro_step = m;
    ran.group.assign(task.ranks().begin(), task.ranks().end());
    ran.samples.assign(task.samples().begin(), task.samples().end());
    ran.scaled_tokens = tokens;
    ran.seconds = seconds;
    out.tokens += tokens;
  }
  out.report.set_sync_seconds(1e-6);
  return out;
}

}  // namespace dcp
