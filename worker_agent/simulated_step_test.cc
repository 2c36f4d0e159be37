#include "worker_agent/simulated_step.h"

#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "proto/plan.pb.h"

namespace dcp {
namespace {

v1::RankStep TwoTasks() {
  v1::RankStep step;
  step.set_epoch(2);
  step.set_step(7);
  step.set_rank(1);
  v1::Task& solo = *step.add_tasks();
  solo.set_task_index(3);
  solo.add_ranks(1);
  solo.add_samples(10);
  solo.add_samples(11);
  solo.add_lengths(100);
  solo.add_lengths(50);
  v1::Task& shared = *step.add_tasks();
  shared.set_task_index(5);
  shared.add_ranks(0);
  shared.add_ranks(1);
  shared.add_samples(12);
  shared.add_lengths(4000);
  shared.set_recompute(0.5);
  return step;
}

TEST(SimulatedStepTest, ReportsThePlanAsRunWithTheGivenTaskTime) {
  const StepExecution done = SimulateStep(TwoTasks(), absl::Milliseconds(20));
  const v1::TimingReport& r = done.report;
  EXPECT_EQ(r.epoch(), 2);
  EXPECT_EQ(r.step(), 7);
  EXPECT_EQ(r.rank(), 1);
  ASSERT_EQ(r.tasks_size(), 2);
  EXPECT_EQ(r.tasks(0).task_index(), 3);
  EXPECT_EQ(r.tasks(0).micro_step(), 0);
  EXPECT_EQ(r.tasks(0).group_size(), 1);
  EXPECT_EQ(r.tasks(0).tokens(), 150);
  EXPECT_EQ(r.tasks(0).sample_lengths_size(), 2);
  EXPECT_DOUBLE_EQ(r.tasks(0).seconds(), 0.02);
  EXPECT_EQ(r.tasks(1).task_index(), 5);
  EXPECT_EQ(r.tasks(1).micro_step(), 1);
  EXPECT_EQ(r.tasks(1).group_size(), 2);
  EXPECT_EQ(r.tasks(1).tokens(), 4000);
  EXPECT_DOUBLE_EQ(r.tasks(1).recompute(), 0.5);
  EXPECT_GT(r.sync_seconds(), 0);
  ASSERT_EQ(done.tasks.size(), 2u);
  EXPECT_EQ(done.tasks[0].samples, (std::vector<int64_t>{10, 11}));
  EXPECT_EQ(done.tasks[1].group, (std::vector<int>{0, 1}));
  EXPECT_EQ(done.tokens, 4150);
}

TEST(SimulatedStepTest, ARankWithoutTasksStillReports) {
  v1::RankStep step;
  step.set_step(4);
  step.set_rank(3);
  const StepExecution done = SimulateStep(step, absl::ZeroDuration());
  EXPECT_EQ(done.report.step(), 4);
  EXPECT_EQ(done.report.tasks_size(), 0);
  EXPECT_TRUE(done.tasks.empty());
}

TEST(SimulatedStepTest, TimesArePositiveEvenForZero) {
  const StepExecution done = SimulateStep(TwoTasks(), absl::ZeroDuration());
  EXPECT_GT(done.report.tasks(0).seconds(), 0);
}

}  // namespace
}  // namespace dcp
