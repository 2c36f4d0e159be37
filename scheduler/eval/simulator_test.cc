#include "scheduler/eval/simulator.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
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

// The hybrid-group task of docs/COST_MODEL.md ("Hybrid groups"), written out
// from its formulas: `u`-way Ulysses inside a `c`-way ring over `ranks`, at
// recompute `r`, on the round cluster (2 GPUs a node): its time and parts.
struct HybridExpected {
  double linear, attention, all_to_all, ring, total;
};
HybridExpected ExpectedHybrid(const ModelSpec& m, const std::vector<int>& ranks,
                              const std::vector<int64_t>& seqs, double r,
                              int u) {
  const ClusterSpec cl = RoundCluster();
  const double p = ranks.size(), c = p / u, d = m.hidden, L = m.layers;
  double T = 0;
  for (int64_t s : seqs) T += s;
  const double t = T / p;
  HybridExpected e{};
  e.linear = 2 * m.ParamsPerLayer() * L * T / p * (3 + r) /
             (cl.peak_flops * cl.gemm_eff_max * t / (t + 100));
  for (int64_t s : seqs) {
    const double chunk = s / c;
    e.attention += 4.0 * s * s * d * L * (m.causal ? 0.5 : 1.0) / p *
                   (3.5 + r) /
                   (cl.peak_flops * cl.attn_eff_max * chunk / (chunk + 100));
  }
  auto node = [](int rank) { return rank / 2; };
  const double kvr = std::max<double>(m.kv_heads, u) / m.heads;
  if (u > 1) {
    bool intra = true;
    for (size_t k = 0; k < ranks.size(); ++k) {
      intra &= node(ranks[k]) == node(ranks[k - k % u]);
    }
    const double bw = intra ? 1e9 : 1e8, lat = intra ? 1e-6 : 2e-6;
    const double vol = 2 * t * d * (2 + 2 * kvr) * (u - 1) / u;
    e.all_to_all = (vol / bw + 4 * lat) * L * (2 + r);
  }
  if (c > 1) {
    bool intra = true;
    for (int rank : ranks) intra &= node(rank) == node(ranks[0]);
    const double bw = intra ? 1e9 : 1e8, lat = intra ? 1e-6 : 2e-6;
    const double b = 2 * 2 * t * d * kvr;
    e.ring = L * (3 + r) * (c - 1) * (b / bw + lat);
  }
  e.total = e.linear + std::max(e.attention, e.ring) + e.all_to_all + 1e-3 * L;
  return e;
}

void ExpectCostIs(const ReferenceCluster::TaskCost& got,
                  const HybridExpected& want) {
  EXPECT_NEAR(got.linear_s, want.linear, 1e-12 * want.linear);
  EXPECT_NEAR(got.attention_s, want.attention, 1e-12 * want.attention);
  EXPECT_NEAR(got.all_to_all_s, want.all_to_all, 1e-12 * want.all_to_all);
  EXPECT_NEAR(got.ring_s, want.ring, 1e-12 * want.ring);
  EXPECT_NEAR(got.total_s, want.total, 1e-12 * want.total);
}

TEST(ReferenceClusterTest, RingOfFourWithoutUlysses) {
  // u = 1, c = 4 on two nodes: no all-to-all, the ring at inter-node
  // figures; the chunks are 1/4 of each sequence.
  const ReferenceCluster cluster(RoundCluster(), TinyModel(), 8);
  const std::vector<int> ranks = {2, 3, 4, 5};
  const std::vector<int64_t> seqs = {4000, 400};
  const ReferenceCluster::TaskCost c = cluster.Cost(ranks, seqs, 0.25, 1);
  const HybridExpected want = ExpectedHybrid(TinyModel(), ranks, seqs, 0.25, 1);
  ExpectCostIs(c, want);
  EXPECT_EQ(c.all_to_all_s, 0.0);
  // By hand: t = 1100, b = 2*2*1100*100*(2/4) = 220000 bytes, 3 passes of
  // 3.25 a layer over 2 layers at 1e8 B/s plus 2e-6 s latency each.
  EXPECT_NEAR(c.ring_s, 2 * 3.25 * 3 * (220000 / 1e8 + 2e-6), 1e-12);
  // The memory is that of 1100 tokens a GPU.
  EXPECT_DOUBLE_EQ(c.memory_bytes, cluster.MemoryBytes(1100, 0.25));
}

TEST(ReferenceClusterTest, TwoUlyssesPairsInARingOfTwo) {
  // u = 2, c = 2: each pair on one node (intra-node all-to-all), the ring
  // across two nodes (inter-node passes).
  const ReferenceCluster cluster(RoundCluster(), TinyModel(), 8);
  const std::vector<int> ranks = {0, 1, 6, 7};
  const std::vector<int64_t> seqs = {3000, 1000, 200};
  const ReferenceCluster::TaskCost c = cluster.Cost(ranks, seqs, 0.5, 2);
  ExpectCostIs(c, ExpectedHybrid(TinyModel(), ranks, seqs, 0.5, 2));
  EXPECT_GT(c.all_to_all_s, 0.0);
  EXPECT_GT(c.ring_s, 0.0);
  // Pairs that straddle nodes pay the inter-node all-to-all.
  const std::vector<int> straddling = {1, 2, 3, 4};
  const ReferenceCluster::TaskCost s = cluster.Cost(straddling, seqs, 0.5, 2);
  ExpectCostIs(s, ExpectedHybrid(TinyModel(), straddling, seqs, 0.5, 2));
  EXPECT_GT(s.all_to_all_s, c.all_to_all_s);
}

TEST(ReferenceClusterTest, RingHiddenBehindAttentionOrNot) {
  // One long sequence: attention (quadratic) hides the ring; many short
  // ones: the ring (linear in tokens) is what the task waits for.
  const ReferenceCluster cluster(RoundCluster(), TinyModel(), 8);
  const std::vector<int> ranks = {0, 1, 2, 3};
  const std::vector<int64_t> one_long = {40000};
  const ReferenceCluster::TaskCost a = cluster.Cost(ranks, one_long, 0, 1);
  ASSERT_GT(a.attention_s, a.ring_s);
  EXPECT_NEAR(a.total_s, a.linear_s + a.attention_s + a.overhead_s,
              1e-12 * a.total_s);
  const std::vector<int64_t> short_ones(40, 100);
  const ReferenceCluster::TaskCost b = cluster.Cost(ranks, short_ones, 0, 1);
  ASSERT_GT(b.ring_s, b.attention_s);
  EXPECT_NEAR(b.total_s, b.linear_s + b.ring_s + b.overhead_s,
              1e-12 * b.total_s);
}

TEST(ReferenceClusterTest, UlyssesOfTheWholeGroupIsPlainUlysses) {
  // u = 4, c = 1 is today's task, whether the degree is given or not.
  const ReferenceCluster cluster(RoundCluster(), TinyModel(), 8);
  const std::vector<int> ranks = {0, 1, 2, 3};
  const std::vector<int64_t> seqs = {2500, 700};
  const ReferenceCluster::TaskCost given = cluster.Cost(ranks, seqs, 0.5, 4);
  const ReferenceCluster::TaskCost plain = cluster.Cost(ranks, seqs, 0.5);
  ExpectCostIs(given, ExpectedHybrid(TinyModel(), ranks, seqs, 0.5, 4));
  EXPECT_EQ(given.total_s, plain.total_s);
  EXPECT_EQ(given.all_to_all_s, plain.all_to_all_s);
  EXPECT_EQ(plain.ring_s, 0.0);
  // And matches "A task" of the model: vol = 2*800*100*(2 + 2*4/4)*3/4.
  const double vol = 2.0 * 800 * 100 * 4 * 0.75;
  EXPECT_NEAR(plain.all_to_all_s, (vol / 1e8 + 8e-6) * 2 * 2.5, 1e-12);
}

TEST(ReferenceClusterTest, RingOverAModelOfTwoHeads) {
  // Two heads: groups of 4 and 6 only as rings (u = 1 or 2).
  ModelSpec m = TinyModel();
  m.heads = 2;
  m.kv_heads = 1;
  const ReferenceCluster cluster(RoundCluster(), m, 8);
  const std::vector<int> six = {0, 1, 2, 3, 4, 5};
  const std::vector<int64_t> seqs = {6000};
  for (int u : {1, 2}) {
    SCOPED_TRACE(testing::Message() << "u " << u);
    ExpectCostIs(cluster.Cost(six, seqs, 0.0, u),
                 ExpectedHybrid(m, six, seqs, 0.0, u));
  }
  // kvr = max(1, 2)/2 = 1 for u = 2: b = 2*2*1000*100 bytes.
  EXPECT_NEAR(cluster.Cost(six, seqs, 0.0, 2).ring_s,
              2 * 3 * 2 * (400000 / 1e8 + 2e-6), 1e-12);
}

TEST(ReplayStepTest, ReplaysHybridTasksOnGroupsNotDividingTheWorld) {
  // A world of 8 with 2 heads: a ring of 3 (u = 1) and a group of 4 with
  // u = 2 run side by side, then a ring of 5 over ranks of both.
  ModelSpec m = TinyModel();
  m.heads = 2;
  m.kv_heads = 1;
  const ReferenceCluster cluster(RoundCluster(), m, 8);
  std::vector<int32_t> lens = {3000, 900, 4000, 5000};
  const LengthView view(lens, 1 << 20);
  StepPlan plan;
  plan.samples = {0, 1, 2, 3};
  plan.tasks.push_back({{0, 1, 2}, {0, 1}, {}, 0.0, 1});
  plan.tasks.push_back({{3, 4, 5, 6}, {2}, {}, 0.5, 2});
  plan.tasks.push_back({{2, 3, 4, 5, 7}, {3}, {}, 0.25, 1});
  absl::StatusOr<StepReport> r = ReplayStep(cluster, plan, view);
  ASSERT_TRUE(r.ok()) << r.status();
  const double t0 = ExpectedHybrid(m, {0, 1, 2}, {3000, 900}, 0.0, 1).total;
  const double t1 = ExpectedHybrid(m, {3, 4, 5, 6}, {4000}, 0.5, 2).total;
  const double t2 = ExpectedHybrid(m, {2, 3, 4, 5, 7}, {5000}, 0.25, 1).total;
  const double sync = 2.0 * 7 / 8 * 2 * m.TotalParams() / 1e9;
  EXPECT_NEAR(r->makespan_s, std::max(t0, t1) + t2 + sync, 1e-12);
  EXPECT_NEAR(r->rank_busy_s[0], t0, 1e-12);
  EXPECT_NEAR(r->rank_busy_s[3], t1 + t2, 1e-12);
  EXPECT_NEAR(r->rank_busy_s[7], t2, 1e-12);
  EXPECT_LE(r->memory_bound_s, r->makespan_s);

  // Without the bounds (a baseline's tuning): the same replay, no bounds.
  absl::StatusOr<StepReport> bare =
      ReplayStep(cluster, plan, view, StepBounds::kWithout);
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->makespan_s, r->makespan_s);
  EXPECT_EQ(bare->rank_busy_s, r->rank_busy_s);
  EXPECT_EQ(bare->tokens, r->tokens);
  EXPECT_GT(r->lower_bound_s, 0.0);
  EXPECT_EQ(bare->lower_bound_s, 0.0);
  EXPECT_EQ(bare->memory_bound_s, 0.0);
}

TEST(ReferenceClusterTest, LinksOfAGroupPriceItsTasksAsItsRanksDo) {
  // The links of a group decide a task's cost: pairs inside nodes in a
  // ring across them, pairs straddling nodes, a ring inside one node.
  const ReferenceCluster cluster(RoundCluster(), TinyModel(), 8);
  const std::vector<int64_t> seqs = {3000, 1000, 200};
  for (const std::vector<int>& ranks : std::vector<std::vector<int>>{
           {0, 1, 6, 7}, {1, 2, 3, 4}, {0, 1, 2, 3}}) {
    const ReferenceCluster::GroupLinks links = cluster.LinksOf(ranks, 2);
    EXPECT_EQ(links.size, 4);
    EXPECT_EQ(links.intra_node, cluster.IntraNode(ranks));
    EXPECT_EQ(links.ulysses_intra_node, cluster.UlyssesIntraNode(ranks, 2));
    ExpectCostIs(cluster.CostOn(links, seqs, 0.5, 2),
                 ExpectedHybrid(TinyModel(), ranks, seqs, 0.5, 2));
  }
}

TEST(ReplayStepTest, RejectsBadUlyssesDegreesNamingTheTask) {
  const ReferenceCluster cluster(RoundCluster(), TinyModel(), 8);
  std::vector<int32_t> lens = {100, 200};
  const LengthView view(lens, 1000);
  auto replay = [&](std::vector<int> ranks, int u) {
    StepPlan plan;
    plan.step = 3;
    plan.samples = {0, 1};
    plan.tasks.push_back({{7}, {0}, {}, 0.0});
    plan.tasks.push_back({std::move(ranks), {1}, {}, 0.0, u});
    return ReplayStep(cluster, plan, view).status();
  };
  using testing::HasSubstr;
  // 8 GPUs as plain Ulysses: more than the 4 heads.
  absl::Status plain = replay({0, 1, 2, 3, 4, 5, 6, 7}, 0);
  EXPECT_THAT(plain.message(), HasSubstr("step 3, task 1: group size 8"));
  EXPECT_THAT(plain.message(), HasSubstr("head count (4)"));
  // u = 8 over 8 GPUs: a whole group of Ulysses still needs 8 | heads.
  absl::Status heads = replay({0, 1, 2, 3, 4, 5, 6, 7}, 8);
  EXPECT_THAT(heads.message(), HasSubstr("step 3, task 1: Ulysses degree 8"));
  EXPECT_THAT(heads.message(), HasSubstr("head count (4)"));
  // u = 2 over 3 GPUs: no whole ring c with u * c = 3.
  absl::Status ring = replay({0, 1, 2}, 2);
  EXPECT_THAT(ring.message(), HasSubstr("step 3, task 1: Ulysses degree 2"));
  EXPECT_THAT(ring.message(), HasSubstr("divide the group size 3"));
  // u = 4 over 2 GPUs: u larger than p.
  absl::Status larger = replay({0, 1}, 4);
  EXPECT_THAT(larger.message(), HasSubstr("divide the group size 2"));
  absl::Status negative = replay({0, 1}, -1);
  EXPECT_THAT(negative.message(), HasSubstr("Ulysses degree -1"));
  // The same groups with a fitting degree are fine.
  EXPECT_TRUE(replay({0, 1, 2, 3, 4, 5, 6, 7}, 4).ok());
  EXPECT_TRUE(replay({0, 1, 2}, 1).ok());
  EXPECT_TRUE(replay({0, 1, 2, 3, 4, 5}, 2).ok());
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
