#include "scheduler/control/step_stats.h"

#include <vector>

#include "gtest/gtest.h"
#include "scheduler/planner/cost_model.h"
#include "scheduler/planner/test_data.h"

namespace dcp {
namespace {

CostModel Model() {
  return CostModel::FromSpecs(testing_data::RoundCluster(1e12),
                              testing_data::TinyModel(), /*world_size=*/4);
}

v1::Task* AddTask(v1::StepPlan& plan, std::vector<int> ranks,
                  std::vector<int64_t> lengths, double recompute) {
  v1::Task* task = plan.add_tasks();
  for (int r : ranks) task->add_ranks(r);
  for (int64_t l : lengths) task->add_lengths(l);
  task->set_recompute(recompute);
  return task;
}

TEST(PredictedRankBusySecondsTest, SumsTheModelsTaskTimesOfEachRank) {
  const CostModel model = Model();
  ASSERT_EQ(model.gpus_per_node(), 2);
  v1::StepPlan plan;
  AddTask(plan, {0, 1}, {300, 100}, 0.0);  // intra-node: node 0
  AddTask(plan, {1, 2}, {500}, 1.0);       // across nodes 0 and 1
  AddTask(plan, {3}, {50, 60, 70}, 0.5);
  AddTask(plan, {7}, {10}, 0.0);  // outside the world: ignored
  const std::vector<double> busy = PredictedRankBusySeconds(plan, model, 4);
  const double a = model.TaskSeconds(2, true, {300, 100}, 0.0);
  const double b = model.TaskSeconds(2, false, {500}, 1.0);
  const double c = model.TaskSeconds(1, true, {50, 60, 70}, 0.5);
  ASSERT_EQ(busy.size(), 4u);
  EXPECT_DOUBLE_EQ(busy[0], a);
  EXPECT_DOUBLE_EQ(busy[1], a + b);
  EXPECT_DOUBLE_EQ(busy[2], b);
  EXPECT_DOUBLE_EQ(busy[3], c);
  // The inter-node group is predicted slower than the same group in a node.
  EXPECT_GT(b, model.TaskSeconds(2, true, {500}, 1.0));
}

// A hybrid task is timed with its Ulysses degree: the same four ranks as a
// ring of four (u = 1) cost what the model says of a ring, not of Ulysses.
TEST(PredictedRankBusySecondsTest, TimesAHybridTaskWithItsDegree) {
  const CostModel model = Model();
  v1::StepPlan plan;
  AddTask(plan, {0, 1, 2, 3}, {4000}, 0.0)->set_ulysses(1);
  const std::vector<double> busy = PredictedRankBusySeconds(plan, model, 4);
  const double ring = model.TaskSeconds(4, false, {4000}, 0.0, 1);
  ASSERT_EQ(busy.size(), 4u);
  for (double b : busy) EXPECT_DOUBLE_EQ(b, ring);
  EXPECT_NE(ring, model.TaskSeconds(4, false, {4000}, 0.0));
}

TEST(PredictedRankBusySecondsTest, RanksWithoutTasksAreIdle) {
  v1::StepPlan plan;
  AddTask(plan, {2}, {100}, 0.0);
  const std::vector<double> busy = PredictedRankBusySeconds(plan, Model(), 3);
  ASSERT_EQ(busy.size(), 3u);
  EXPECT_EQ(busy[0], 0.0);
  EXPECT_EQ(busy[1], 0.0);
  EXPECT_GT(busy[2], 0.0);
}

TEST(IdleFractionTest, IsOneMinusMeanOverMax) {
  // Busy 1, 2, 3 and 6 s: mean 3, max 6, so half of the step sits idle.
  EXPECT_DOUBLE_EQ(IdleFraction({1.0, 2.0, 3.0, 6.0}), 0.5);
  EXPECT_DOUBLE_EQ(IdleFraction({4.0, 4.0}), 0.0);
  // One rank of four does all the work: 3/4 idle.
  EXPECT_DOUBLE_EQ(IdleFraction({0.0, 0.0, 0.0, 2.0}), 0.75);
}

TEST(IdleFractionTest, NoRanksOrNoWorkIsNoImbalance) {
  EXPECT_EQ(IdleFraction({}), 0.0);
  EXPECT_EQ(IdleFraction({0.0, 0.0}), 0.0);
}

}  // namespace
}  // namespace dcp
