#include "scheduler/eval/simulator.h"

#include <cmath>

#include "gtest/gtest.h"
#include "scheduler/planner/test_data.h"

namespace dcp {
namespace {

using testing_data::TinyModel;

ClusterSpec RoundCluster() { return testing_data::RoundCluster(1e9); }

TEST(ReferenceClusterTest, SingleGpuTaskMatchesHandComputation) {
  ReferenceCluster cluster(RoundCluster(), TinyModel(), 4);
  // Pl = 2*1e4 + 2*1e4*0.5 + 3*100*200 = 90000; P = 180000 + 100000.
  EXPECT_DOUBLE_EQ(TinyModel().ParamsPerLayer(), 90000);
  const std::vector<int> ranks = {1};
  const std::vector<int64_t> seqs = {100, 300};
  ReferenceCluster::TaskCost c = cluster.Cost(ranks, seqs, 0.5);
  // linear: 2*9e4*2*400 = 1.44e8 FLOPs; eff = 0.5*400/500 = 0.4;
  // time = 1.44e8*3.5/(1e12*0.4).
  EXPECT_NEAR(c.linear_s, 1.44e8 * 3.5 / 4e11, 1e-15);
  // attention: 4*s^2*100*2*0.5 = 400*s^2; eff = 0.5*s/(s+100); factor 4.
  const double a100 = 400.0 * 1e4 * 4.0 / (1e12 * 0.25);
  const double a300 = 400.0 * 9e4 * 4.0 / (1e12 * 0.5 * 300 / 400);
  EXPECT_NEAR(c.attention_s, a100 + a300, 1e-15);
  EXPECT_EQ(c.all_to_all_s, 0.0);
  EXPECT_DOUBLE_EQ(c.overhead_s, 2e-3);
  EXPECT_NEAR(c.total_s, c.linear_s + c.attention_s + 2e-3, 1e-15);
  // memory: 16*280000/4 + (0.5*34*100*2 + 0.5*2*100*2 + 3400)*400.
  EXPECT_DOUBLE_EQ(c.memory_bytes,
                   16.0 * 280000 / 4 + (3400 + 200 + 3400) * 400.0);
}

TEST(ReferenceClusterTest, AllToAllUsesIntraOrInterNodeFigures) {
  ReferenceCluster cluster(RoundCluster(), TinyModel(), 4);
  const std::vector<int64_t> seqs = {400};
  // t = 200; vol = 2*200*100*(2 + 2*max(2,2)/4)*(1/2) = 60000 bytes.
  const std::vector<int> intra = {0, 1};
  const std::vector<int> inter = {1, 2};
  ReferenceCluster::TaskCost a = cluster.Cost(intra, seqs, 0.0);
  ReferenceCluster::TaskCost b = cluster.Cost(inter, seqs, 0.0);
  EXPECT_NEAR(a.all_to_all_s, (60000 / 1e9 + 4e-6) * 2 * 2, 1e-15);
  EXPECT_NEAR(b.all_to_all_s, (60000 / 1e8 + 8e-6) * 2 * 2, 1e-15);
  // With p=4 > kv_heads=2 the volume uses max(kv, p) = 4.
  const std::vector<int> four = {0, 1, 2, 3};
  ReferenceCluster::TaskCost c = cluster.Cost(four, seqs, 1.0);
  const double vol = 2.0 * 100 * 100 * (2 + 2.0 * 4 / 4) * 0.75;
  EXPECT_NEAR(c.all_to_all_s, (vol / 1e8 + 8e-6) * 2 * 3, 1e-15);
}

TEST(ReplayStepTest, TasksWaitForAllTheirRanks) {
  ReferenceCluster cluster(RoundCluster(), TinyModel(), 4);
  std::vector<int32_t> lens = {100, 200, 300, 400};
  LengthView view(lens, 1000);
  StepPlan plan;
  plan.samples = {0, 1, 2, 3};
  plan.tasks.push_back({{0}, {0}, {}, 0.0});
  plan.tasks.push_back({{1}, {1}, {}, 0.0});
  plan.tasks.push_back({{0, 1}, {2}, {}, 0.0});
  plan.tasks.push_back({{2}, {3}, {}, 0.0});
  absl::StatusOr<StepReport> r = ReplayStep(cluster, plan, view);
  ASSERT_TRUE(r.ok()) << r.status();
  const double t0 = cluster.Cost({0}, {100}, 0).total_s;
  const double t1 = cluster.Cost({1}, {200}, 0).total_s;
  const double t2 = cluster.Cost({0, 1}, {300}, 0).total_s;
  const double t3 = cluster.Cost({2}, {400}, 0).total_s;
  const double expected = std::max(std::max(t0, t1) + t2, t3);
  EXPECT_NEAR(r->makespan_s, expected + cluster.SyncSeconds(), 1e-12);
  EXPECT_NEAR(r->rank_busy_s[0], t0 + t2, 1e-12);
  EXPECT_EQ(r->rank_busy_s[3], 0.0);
  EXPECT_EQ(r->tokens, 1000);
  EXPECT_LT(r->lower_bound_s, r->makespan_s);
}

TEST(ReplayStepTest, LowerBoundMatchesFormula) {
  ReferenceCluster cluster(RoundCluster(), TinyModel(), 4);
  const std::vector<int64_t> seqs = {100, 300};
  const double linear = 6.0 * 90000 * 2 * 400 / (1e12 * 0.5);
  const double attn =
      3.5 * 400.0 * 1e4 / (1e12 * 0.25) + 3.5 * 400.0 * 9e4 / (1e12 * 0.375);
  const double sync = 2.0 * 3 / 4 * 2 * 280000 / 1e9;
  EXPECT_NEAR(cluster.LowerBound(seqs), (linear + attn) / 4 + sync, 1e-15);
}

TEST(ReplayStepTest, TruncatesToTheWindow) {
  ReferenceCluster cluster(RoundCluster(), TinyModel(), 4);
  std::vector<int32_t> lens = {5000};
  StepPlan plan;
  plan.samples = {0};
  plan.tasks.push_back({{0}, {0}, {}, 0.0});
  absl::StatusOr<StepReport> r =
      ReplayStep(cluster, plan, LengthView(lens, 300));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, 300);
}

TEST(ReplayStepTest, RejectsBrokenPlansNamingStepAndTask) {
  ReferenceCluster cluster(RoundCluster(), TinyModel(), 4);
  std::vector<int32_t> lens = {100, 200, 300};
  LengthView view(lens, 1000);
  auto replay = [&](StepPlan plan) {
    plan.step = 7;
    return ReplayStep(cluster, plan, view).status();
  };
  StepPlan missing;
  missing.samples = {0, 1};
  missing.tasks.push_back({{0}, {0}, {}, 0.0});
  EXPECT_NE(replay(missing).message().find("sample 1 is in no task"),
            std::string::npos);

  StepPlan twice;
  twice.samples = {0, 1};
  twice.tasks.push_back({{0}, {0, 1}, {}, 0.0});
  twice.tasks.push_back({{1}, {1}, {}, 0.0});
  absl::Status s = replay(twice);
  EXPECT_NE(s.message().find("step 7, task 1"), std::string::npos) << s;
  EXPECT_NE(s.message().find("more than one task"), std::string::npos) << s;

  StepPlan bad_group;
  bad_group.samples = {0};
  bad_group.tasks.push_back({{0, 1, 2}, {0}, {}, 0.0});
  EXPECT_NE(replay(bad_group).message().find("group size 3"),
            std::string::npos);

  StepPlan bad_rank;
  bad_rank.samples = {0};
  bad_rank.tasks.push_back({{9}, {0}, {}, 0.0});
  EXPECT_NE(replay(bad_rank).message().find("rank 9"), std::string::npos);

  StepPlan foreign;
  foreign.samples = {0};
  foreign.tasks.push_back({{0}, {0, 2}, {}, 0.0});
  EXPECT_NE(replay(foreign).message().find("not one of the step's samples"),
            std::string::npos);

  StepPlan bad_r;
  bad_r.samples = {0};
  bad_r.tasks.push_back({{0}, {0}, {}, 1.5});
  EXPECT_NE(replay(bad_r).message().find("recompute"), std::string::npos);

  std::vector<int32_t> huge = {1000000};
  StepPlan oom;
  oom.samples = {0};
  oom.tasks.push_back({{0}, {0}, {}, 0.0});
  absl::Status m = ReplayStep(cluster, oom, LengthView(huge, 1 << 30)).status();
  EXPECT_NE(m.message().find("GB per GPU"), std::string::npos) << m;
}

}  // namespace
}  // namespace dcp
