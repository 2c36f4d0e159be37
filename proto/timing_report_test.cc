#include "proto/timing_report.h"

#include <vector>

#include "gtest/gtest.h"

namespace dcp {
namespace {

v1::RankStep TwoTasks() {
  v1::RankStep step;
  step.set_epoch(2);
  step.set_step(7);
  step.set_rank(3);
  v1::Task& ring = *step.add_tasks();
  ring.set_task_index(4);
  for (int r : {0, 1, 2, 3}) ring.add_ranks(r);
  for (int64_t l : {1000, 24}) ring.add_lengths(l);
  ring.set_recompute(0.5);
  ring.set_ulysses(2);
  v1::Task& alone = *step.add_tasks();
  alone.set_task_index(9);
  alone.add_ranks(3);
  alone.add_lengths(17);
  return step;
}

TEST(TimingReportTest, EachTaskIsReportedWithItsShapeInPlanOrder) {
  const std::vector<double> seconds = {0.25, 0.125};
  const v1::TimingReport r = TimingReportOf(TwoTasks(), seconds, 0.5);
  EXPECT_EQ(r.epoch(), 2);
  EXPECT_EQ(r.step(), 7);
  EXPECT_EQ(r.rank(), 3);
  EXPECT_EQ(r.sync_seconds(), 0.5);
  ASSERT_EQ(r.tasks_size(), 2);
  const v1::TaskTiming& ring = r.tasks(0);
  EXPECT_EQ(ring.task_index(), 4);
  EXPECT_EQ(ring.micro_step(), 0);
  EXPECT_EQ(ring.group_size(), 4);
  EXPECT_EQ(ring.tokens(), 1000 + 24);
  EXPECT_EQ(std::vector<int64_t>(ring.sample_lengths().begin(),
                                 ring.sample_lengths().end()),
            (std::vector<int64_t>{1000, 24}));
  EXPECT_EQ(ring.recompute(), 0.5);
  EXPECT_EQ(ring.ulysses(), 2);
  EXPECT_EQ(ring.seconds(), 0.25);
  EXPECT_EQ(r.tasks(1).task_index(), 9);
  EXPECT_EQ(r.tasks(1).micro_step(), 1);
  EXPECT_EQ(r.tasks(1).group_size(), 1);
  EXPECT_EQ(r.tasks(1).tokens(), 17);
  EXPECT_EQ(r.tasks(1).seconds(), 0.125);
}

TEST(TimingReportTest, AClockThatDidNotMoveStillReportsAPositiveTime) {
  const std::vector<double> seconds = {0.0, 1e-12};
  const v1::TimingReport r = TimingReportOf(TwoTasks(), seconds, 0);
  EXPECT_EQ(r.tasks(0).seconds(), kMinReportedTaskSeconds);
  EXPECT_EQ(r.tasks(1).seconds(), kMinReportedTaskSeconds);
  EXPECT_EQ(r.sync_seconds(), 0);  // not measured, as given
}

}  // namespace
}  // namespace dcp
