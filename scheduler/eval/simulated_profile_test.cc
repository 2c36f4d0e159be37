#include "scheduler/eval/simulated_profile.h"

#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "common/model_spec.h"
#include "gtest/gtest.h"
#include "scheduler/control/profile_stage.h"
#include "scheduler/eval/simulator.h"

namespace dcp {
namespace {

ReferenceCluster Llama8b(int world) {
  return ReferenceCluster(ClusterSpec::H200(), *BuiltinModel("llama3-8b"),
                          world);
}

CostModel Planner(const ReferenceCluster& cluster) {
  return CostModel::FromSpecs(cluster.cluster(), cluster.model(),
                              cluster.world_size());
}

SimulatedProfileOptions Window(int64_t window) {
  SimulatedProfileOptions o;
  o.window = window;
  return o;
}

// The shapes (group size, Ulysses degree) a model of many heads is profiled
// in on 8-GPU nodes: sizes up to a node and twice a node, each as plain
// Ulysses and as a ring of two.
const std::set<std::pair<int, int>> kShapes = {
    {1, 1}, {2, 2}, {2, 1}, {4, 4}, {4, 2}, {8, 8}, {8, 4}, {16, 16}, {16, 8}};

TEST(SimulatedProfileTest, NoiselessProfileIsTheReferenceOverTheAgentsGrid) {
  const ReferenceCluster cluster = Llama8b(32);
  const std::vector<TaskObservation> rows =
      SimulateProfile(cluster, Planner(cluster), Window(4096));
  // Every rank is in one group of each shape (32 heads, 32 ranks), and
  // reports each of 3 lengths (256, 1024, 4096: the default grid to a
  // window of 4096, all fitting one GPU) x 2 recompute ratios x 2
  // repetitions.
  ASSERT_EQ(rows.size(), kShapes.size() * 32 * 3 * 2 * 2);
  std::set<std::pair<int, int>> seen;
  for (const TaskObservation& o : rows) {
    seen.insert({o.group_size, o.UlyssesDegree()});
    ASSERT_EQ(o.lengths.size(), 1u);
    EXPECT_EQ(o.intra_node, o.group_size <= 8);
    std::vector<int> ranks(o.group_size);
    for (int r = 0; r < o.group_size; ++r) ranks[r] = r;
    const ReferenceCluster::TaskCost cost =
        cluster.Cost(ranks, o.lengths, o.recompute, o.ulysses);
    EXPECT_EQ(o.seconds, cost.total_s);
    EXPECT_EQ(o.memory_bytes, cost.memory_bytes);
  }
  EXPECT_EQ(seen, kShapes);
}

TEST(SimulatedProfileTest, NoiseIsLogNormalWithTheGivenSpread) {
  const ReferenceCluster cluster = Llama8b(32);
  const CostModel planner = Planner(cluster);
  SimulatedProfileOptions noisy = Window(4096);
  noisy.noise = 0.1;
  noisy.seed = 7;
  const std::vector<TaskObservation> exact =
      SimulateProfile(cluster, planner, Window(4096));
  const std::vector<TaskObservation> rows =
      SimulateProfile(cluster, planner, noisy);
  ASSERT_EQ(rows.size(), exact.size());
  double sum = 0, sum_sq = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const double z = std::log(rows[i].seconds / exact[i].seconds);
    sum += z;
    sum_sq += z * z;
  }
  const double n = static_cast<double>(rows.size());
  const double mean = sum / n;
  const double sd = std::sqrt(sum_sq / n - mean * mean);
  // Five standard errors: the mean's is sigma / sqrt(n), the standard
  // deviation's about sigma / sqrt(2n).
  EXPECT_LT(std::abs(mean), 5 * 0.1 / std::sqrt(n));
  EXPECT_LT(std::abs(sd - 0.1), 5 * 0.1 / std::sqrt(2 * n));

  const std::vector<TaskObservation> again =
      SimulateProfile(cluster, planner, noisy);
  noisy.seed = 8;
  const std::vector<TaskObservation> other =
      SimulateProfile(cluster, planner, noisy);
  EXPECT_EQ(again[5].seconds, rows[5].seconds);
  EXPECT_NE(other[5].seconds, rows[5].seconds);
}

TEST(SimulatedProfileTest, LongLengthsAreMeasuredOnlyOnGroupsThatHoldThem) {
  // llama3-70b on 64 GPUs: at r = 1 a GPU holds fewer than 524288 / 4
  // tokens, and the window is measured on the largest groups (16) only, as
  // plain Ulysses.
  const ReferenceCluster cluster(ClusterSpec::H200(),
                                 *BuiltinModel("llama3-70b"), 64);
  const CostModel planner = Planner(cluster);
  const double cap[2] = {planner.MaxTokensPerGpu(0.0),
                         planner.MaxTokensPerGpu(1.0)};
  ASSERT_LT(cap[1], 524288 / 4);
  ASSERT_GE(cap[1], 524288 / 8);
  const std::vector<TaskObservation> rows =
      SimulateProfile(cluster, planner, Window(524288));
  std::set<int> window_sizes;
  double per_rank = 0;  // what rank 0 measures, times its repetitions
  for (const TaskObservation& o : rows) {
    const double tokens_per_gpu =
        static_cast<double>(o.lengths[0]) / o.group_size;
    EXPECT_LE(tokens_per_gpu, cap[o.recompute == 1.0])
        << o.lengths[0] << " on " << o.group_size << " at r " << o.recompute;
    EXPECT_LE(o.memory_bytes, cluster.cluster().MemoryCap());
    if (o.lengths[0] == 524288) {
      window_sizes.insert(o.group_size);
      EXPECT_EQ(o.UlyssesDegree(), o.group_size);
    }
  }
  EXPECT_EQ(window_sizes, std::set<int>{16});
  // The cost: rank 0 runs one group of each shape (64 heads: the same ones
  // as for 8b), every point it fits twice (two repetitions), one after
  // another; lengths above kProfileAllGroupsUpToLength on groups of 16 as
  // plain Ulysses only.
  for (const auto& [p, u] : kShapes) {
    std::vector<int> ranks(p);
    for (int r = 0; r < p; ++r) ranks[r] = r;
    for (int64_t length : {256, 1024, 4096, 16384, 65536, 262144, 524288}) {
      if (length > kProfileAllGroupsUpToLength && u != 16) continue;
      for (double r : {0.0, 1.0}) {
        if (length > cap[r == 1.0] * p) continue;
        const std::vector<int64_t> seq = {length};
        per_rank += 2 * cluster.Cost(ranks, seq, r, u).total_s;
      }
    }
  }
  EXPECT_NEAR(SimulatedProfileSeconds(cluster, planner, Window(524288)),
              per_rank, 1e-9 * per_rank);
}

TEST(SimulatedProfileTest, TaskTimingsAreTheReplaysTasks) {
  const ReferenceCluster cluster = Llama8b(16);
  const std::vector<int32_t> lengths = {1000, 5000, 300, 20000};
  const LengthView view(lengths, 16384);
  StepPlan plan;
  plan.samples = {0, 1, 2, 3};
  plan.tasks = {{{0, 1}, {0, 2}, {}, 0.0},
                {{8, 9, 10, 11}, {3}, {}, 0.5},
                {{2}, {1}, {}, 1.0}};
  TimingNoise none(0, 1);
  const std::vector<TaskObservation> obs =
      SimulateTaskTimings(cluster, plan, view, none);
  ASSERT_EQ(obs.size(), 3u);
  EXPECT_EQ(obs[1].lengths, std::vector<int64_t>{16384});
  EXPECT_EQ(obs[1].group_size, 4);
  for (size_t i = 0; i < obs.size(); ++i) {
    EXPECT_EQ(obs[i].seconds, cluster
                                  .Cost(plan.tasks[i].ranks, obs[i].lengths,
                                        plan.tasks[i].recompute)
                                  .total_s);
    EXPECT_TRUE(obs[i].intra_node);
  }
  plan.tasks[0].ranks = {7, 8};
  EXPECT_FALSE(SimulateTaskTimings(cluster, plan, view, none)[0].intra_node);
}

}  // namespace
}  // namespace dcp
