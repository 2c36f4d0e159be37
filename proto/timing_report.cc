#include "proto/timing_report.h"

#include <algorithm>
#include <cstdint>

namespace dcp {

v1::TimingReport TimingReportOf(const v1::RankStep& step,
                                absl::Span<const double> task_seconds,
                                double sync_seconds) {
  v1::TimingReport report;
  report.set_epoch(step.epoch());
  report.set_step(step.step());
  report.set_rank(step.rank());
  report.set_sync_seconds(sync_seconds);
  report.mutable_tasks()->Reserve(step.tasks_size());
  for (int m = 0; m < step.tasks_size(); ++m) {
    const v1::Task& task = step.tasks(m);
    v1::TaskTiming& timing = *report.add_tasks();
    timing.set_task_index(task.task_index());
    timing.set_micro_step(m);
    timing.set_group_size(task.ranks_size());
    int64_t tokens = 0;
    for (int64_t length : task.lengths()) tokens += length;
    timing.set_tokens(tokens);
    *timing.mutable_sample_lengths() = task.lengths();
    timing.set_recompute(task.recompute());
    timing.set_ulysses(task.ulysses());
    timing.set_seconds(std::max(task_seconds[m], kMinReportedTaskSeconds));
  }
  return report;
}

}  // namespace dcp
