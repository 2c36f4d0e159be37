#ifndef DCP_SCHEDULER_CONTROL_TEST_PLAN_H_
#define DCP_SCHEDULER_CONTROL_TEST_PLAN_H_

// Test-only: a small hand-made step plan, and reports of it, for the unit
// tests of the control plane's parts (no planner needed).

#include <cstdint>
#include <utility>
#include <vector>

#include "proto/plan.pb.h"

namespace dcp {
namespace testing_plan {

/// The world of `SmallPlan`: 4 ranks, 2 GPUs a node.
constexpr int kWorld = 4;
constexpr int kGpusPerNode = 2;
/// What every task of `TimingsOf` takes per token.
constexpr double kSecondsPerToken = 1e-3;
constexpr double kPredictedSeconds = 2.0;

inline v1::Task* AddTask(v1::StepPlan& plan, std::vector<int> ranks,
                         std::vector<int64_t> lengths, int group_id) {
  v1::Task* task = plan.add_tasks();
  task->set_task_index(plan.tasks_size() - 1);
  task->set_group_id(group_id);
  for (int r : ranks) task->add_ranks(r);
  for (int64_t length : lengths) {
    task->add_samples(plan.samples_size());
    plan.add_samples(plan.samples_size());
    task->add_lengths(length);
    plan.set_total_tokens(plan.total_tokens() + length);
  }
  return task;
}

/// Step `step` of epoch 0 with three tasks: 0 on ranks {0,1} (one node;
/// lengths 100 and 300, recompute 0.5), 1 on ranks {1,2} (two nodes; 50
/// tokens), 2 on rank 3 alone (70 tokens). Ranks 0..3 run 1, 2, 1 and 1
/// tasks.
inline v1::StepPlan SmallPlan(int64_t step) {
  v1::StepPlan plan;
  plan.set_epoch(0);
  plan.set_step(step);
  AddTask(plan, {0, 1}, {100, 300}, 1)->set_recompute(0.5);
  AddTask(plan, {1, 2}, {50}, 2);
  AddTask(plan, {3}, {70}, 0);
  for (const auto& [id, ranks] : std::vector<std::pair<int, std::vector<int>>>{
           {1, {0, 1}}, {2, {1, 2}}}) {
    v1::CommGroup* group = plan.add_groups();
    group->set_id(id);
    for (int r : ranks) group->add_ranks(r);
  }
  plan.set_predicted_makespan_s(kPredictedSeconds);
  return plan;
}

/// What a correct agent of `rank` reports for `plan`: each of its tasks,
/// in plan order, takes `seconds_per_token` a token; the sync takes
/// `sync_seconds`.
inline v1::TimingReport ReportAtRate(const v1::StepPlan& plan, int rank,
                                     double seconds_per_token,
                                     double sync_seconds) {
  v1::TimingReport report;
  report.set_epoch(plan.epoch());
  report.set_step(plan.step());
  report.set_rank(rank);
  report.set_sync_seconds(sync_seconds);
  for (const v1::Task& task : plan.tasks()) {
    bool mine = false;
    for (int r : task.ranks()) mine = mine || r == rank;
    if (!mine) continue;
    int64_t tokens = 0;
    for (int64_t length : task.lengths()) tokens += length;
    v1::TaskTiming* t = report.add_tasks();
    t->set_task_index(task.task_index());
    t->set_micro_step(report.tasks_size() - 1);
    t->set_group_size(task.ranks_size());
    t->set_tokens(tokens);
    t->set_recompute(task.recompute());
    t->set_seconds(seconds_per_token * static_cast<double>(tokens));
    t->set_peak_memory_bytes(1000 * tokens);
  }
  return report;
}

/// Rank `rank`'s timings of `plan`: each of its tasks (in plan order) takes
/// `kSecondsPerToken` a token, scaled by `slowdown`; the sync takes
/// `sync_seconds`.
inline v1::TimingReport TimingsOf(const v1::StepPlan& plan, int rank,
                                  double sync_seconds, double slowdown = 1) {
  return ReportAtRate(plan, rank, kSecondsPerToken * slowdown, sync_seconds);
}

}  // namespace testing_plan
}  // namespace dcp

#endif  // DCP_SCHEDULER_CONTROL_TEST_PLAN_H_
