#include "scheduler/eval/baselines.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/eval/simulator.h"
#include "scheduler/planner/step_builder.h"
#include "scheduler/planner/test_data.h"

namespace dcp {
namespace {

using testing_data::TinyModel;

using ::testing::HasSubstr;

// 4 GPUs, 2 a node, 1e7 bytes each: the sharded states take 16*280000/4 =
// 1.12e6 bytes, a token 10200 (r=0), 7000 (r=0.5) or 3800 (r=1) bytes.
ClusterSpec SmallCluster() { return testing_data::RoundCluster(1e7); }

ReferenceCluster Small() {
  return ReferenceCluster(SmallCluster(), TinyModel(), 4);
}

std::vector<int> RanksOfSample(const StepPlan& plan, int64_t id) {
  for (const TaskPlan& task : plan.tasks) {
    if (std::find(task.samples.begin(), task.samples.end(), id) !=
        task.samples.end()) {
      return task.ranks;
    }
  }
  return {};
}

double Replay(const ReferenceCluster& cluster, const StepPlan& plan,
              const LengthView& lengths) {
  absl::StatusOr<StepReport> report = ReplayStep(cluster, plan, lengths);
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? report->makespan_s : 0.0;
}

std::vector<int32_t> UniformLengths(int n, int lo, int hi, uint64_t seed) {
  return testing_data::UniformTrace(n, lo, hi, seed);
}

TEST(MemoryLimitsTest, MatchHandComputation) {
  ReferenceCluster cluster = Small();
  // (1e7 - 1.12e6) / 10200 = 870.6; / 7000 = 1268.6; / 3800 = 2336.8.
  EXPECT_EQ(MaxTokensPerGpu(cluster, 0.0), 870);
  EXPECT_EQ(MaxTokensPerGpu(cluster, 0.5), 1268);
  EXPECT_EQ(MaxTokensPerGpu(cluster, 1.0), 2336);
  // floor(p * 870.6), not p * floor(870.6).
  EXPECT_EQ(MaxTokensPerTask(cluster, 2, 0.0), 1741);
  EXPECT_EQ(MaxTokensPerTask(cluster, 4, 1.0), 9347);
  const double cap = cluster.cluster().MemoryCap();
  EXPECT_LE(cluster.MemoryBytes(1741 / 2.0, 0.0), cap);
  EXPECT_GT(cluster.MemoryBytes(1742 / 2.0, 0.0), cap);

  ClusterSpec tiny_memory = SmallCluster();
  tiny_memory.hbm_bytes = 1e6;  // less than the sharded states
  EXPECT_EQ(MaxTokensPerGpu(ReferenceCluster(tiny_memory, TinyModel(), 4), 0),
            0);
}

// (p, u) of each shape, for comparisons.
std::vector<std::pair<int, int>> Shapes(const ReferenceCluster& cluster) {
  std::vector<std::pair<int, int>> out;
  for (const StaticConfig& c : StaticShapes(cluster)) {
    EXPECT_EQ(c.recompute, 0.0);
    out.emplace_back(c.group_size, c.ulysses);
  }
  return out;
}

TEST(GroupShapesTest, StaticShapesAreEveryUlyssesDegreeOfEveryWorldDivisor) {
  // 4 GPUs, 4 heads: every divisor u of every p in {1, 2, 4}, p ascending,
  // u descending.
  EXPECT_EQ(Shapes(Small()), (std::vector<std::pair<int, int>>{
                                 {1, 1}, {2, 2}, {2, 1}, {4, 4}, {4, 2},
                                 {4, 1}}));
  // dit-video-1.3b has 12 heads: on 32 GPUs p runs over the powers of two
  // and u over the divisors of gcd(p, 12), so p = 8, 16, 32 (which do not
  // divide the heads) still come, as u = 4, 2 or 1 inside a ring.
  ReferenceCluster dit(ClusterSpec::H200(), *BuiltinModel("dit-video-1.3b"),
                       32);
  std::vector<std::pair<int, int>> want = {{1, 1}, {2, 2}, {2, 1}};
  for (int p : {4, 8, 16, 32}) {
    for (int u : {4, 2, 1}) want.emplace_back(p, u);
  }
  EXPECT_EQ(Shapes(dit), want);
  // 6 GPUs, 4 heads: p = 3 and 6 only as rings or 2-way Ulysses.
  ReferenceCluster six(SmallCluster(), TinyModel(), 6);
  EXPECT_EQ(Shapes(six), (std::vector<std::pair<int, int>>{
                             {1, 1}, {2, 2}, {2, 1}, {3, 1}, {6, 2}, {6, 1}}));
  for (const StaticConfig& c : StaticShapes(six)) {
    EXPECT_EQ(c.UlyssesDegree() * c.RingDegree(), c.group_size);
  }
}

TEST(GroupShapesTest, StaticConfigDefaultsToPlainUlysses) {
  const StaticConfig plain{8, 0.5};
  EXPECT_EQ(plain.UlyssesDegree(), 8);
  EXPECT_EQ(plain.RingDegree(), 1);
  const StaticConfig hybrid{8, 0.5, 2};
  EXPECT_EQ(hybrid.UlyssesDegree(), 2);
  EXPECT_EQ(hybrid.RingDegree(), 4);
}

TEST(GroupShapesTest, DynamicCpRingsArePowersOfTwoWithinTheWorld) {
  EXPECT_EQ(DynamicCpGroupSizes(Small()), (std::vector<int>{1, 2, 4}));
  ReferenceCluster dit(ClusterSpec::H200(), *BuiltinModel("dit-video-1.3b"),
                       32);
  EXPECT_EQ(DynamicCpGroupSizes(dit), (std::vector<int>{1, 2, 4, 8, 16, 32}));
  ReferenceCluster six(SmallCluster(), TinyModel(), 6);
  EXPECT_EQ(DynamicCpGroupSizes(six), (std::vector<int>{1, 2, 4}));
}

TEST(PlanStaticTest, PackedIsNextFitDealtRoundRobin) {
  ReferenceCluster cluster = Small();
  std::vector<int32_t> raw = {600, 600, 500, 300, 900};
  LengthView lengths(raw, 1000);
  const std::vector<int64_t> samples = {0, 1, 2, 3, 4};
  // r = 0.5: packs of at most 1268 tokens on one GPU.
  absl::StatusOr<StepPlan> plan =
      PlanStatic(cluster, lengths, 3, samples, {1, 0.5}, false);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->step, 3);
  EXPECT_EQ(plan->samples, samples);
  ASSERT_EQ(plan->tasks.size(), 3u);
  EXPECT_EQ(plan->tasks[0].samples, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(plan->tasks[1].samples, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(plan->tasks[2].samples, (std::vector<int64_t>{4}));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(plan->tasks[i].ranks, std::vector<int>{i});
    EXPECT_EQ(plan->tasks[i].recompute, 0.5);
  }
  Replay(cluster, *plan, lengths);
}

TEST(PlanStaticTest, PacksBeyondTheGroupsWrapAround) {
  ReferenceCluster cluster = Small();
  std::vector<int32_t> raw(10, 1000);
  LengthView lengths(raw, 1000);
  const std::vector<int64_t> samples = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  // p = 2, r = 0: 1741 tokens a pack, so one sample a pack; 2 groups.
  absl::StatusOr<StepPlan> plan =
      PlanStatic(cluster, lengths, 0, samples, {2, 0.0}, false);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->tasks.size(), 10u);
  // Group-major: group 0 runs packs 0, 2, 4, ...; group 1 packs 1, 3, ...
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(plan->tasks[i].ranks, (std::vector<int>{0, 1}));
    EXPECT_EQ(plan->tasks[i].samples, std::vector<int64_t>{2 * i});
    EXPECT_EQ(plan->tasks[5 + i].ranks, (std::vector<int>{2, 3}));
    EXPECT_EQ(plan->tasks[5 + i].samples, std::vector<int64_t>{2 * i + 1});
  }
  Replay(cluster, *plan, lengths);
}

TEST(PlanStaticTest, BalancedDealsLongestFirstToTheLeastLoadedGroup) {
  ReferenceCluster cluster = Small();
  std::vector<int32_t> raw = {600, 600, 500, 300, 900};
  LengthView lengths(raw, 1000);
  absl::StatusOr<StepPlan> plan =
      PlanStatic(cluster, lengths, 0, {0, 1, 2, 3, 4}, {1, 0.5}, true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // 900, 600, 600 and 500 each open a group; 300 joins the lightest (500).
  ASSERT_EQ(plan->tasks.size(), 4u);
  EXPECT_EQ(plan->tasks[0].samples, (std::vector<int64_t>{4}));
  EXPECT_EQ(plan->tasks[1].samples, (std::vector<int64_t>{0}));
  EXPECT_EQ(plan->tasks[2].samples, (std::vector<int64_t>{1}));
  EXPECT_EQ(plan->tasks[3].samples, (std::vector<int64_t>{2, 3}));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(plan->tasks[i].ranks, std::vector<int>{i});
  }
  auto packed =
      PlanStatic(cluster, lengths, 0, {0, 1, 2, 3, 4}, {1, 0.5}, false);
  ASSERT_TRUE(packed.ok());
  EXPECT_LT(Replay(cluster, *plan, lengths), Replay(cluster, *packed, lengths));
}

TEST(PlanStaticTest, BalancedFillsPacksWithinAGroup) {
  ReferenceCluster cluster = Small();
  // 40 samples of 300 tokens on 2 groups of 2 GPUs at r = 0 (1741 tokens a
  // pack, 5 samples): 20 samples a group in 4 full packs.
  std::vector<int32_t> raw(40, 300);
  LengthView lengths(raw, 1000);
  std::vector<int64_t> samples;
  for (int64_t i = 0; i < 40; ++i) samples.push_back(i);
  auto plan = PlanStatic(cluster, lengths, 0, samples, {2, 0.0}, true);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->tasks.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(plan->tasks[i].samples.size(), 5u);
    EXPECT_EQ(plan->tasks[i].ranks,
              (i < 4 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}));
  }
  Replay(cluster, *plan, lengths);
}

TEST(PlanStaticTest, BalancedEvensOutGroupLoads) {
  ReferenceCluster cluster = Small();
  // Four times a 1200-token sample then twelve 100-token ones. At r = 0.5
  // (1268 tokens a pack) next-fit makes heavy and light packs in turn, and
  // dealing them round-robin to 4 groups gives groups 0 and 2 both heavy
  // packs; balancing gives every group one of each.
  std::vector<int32_t> raw;
  std::vector<int64_t> samples;
  for (int i = 0; i < 4; ++i) {
    raw.push_back(1200);
    for (int j = 0; j < 12; ++j) raw.push_back(100);
  }
  for (int64_t i = 0; i < static_cast<int64_t>(raw.size()); ++i) {
    samples.push_back(i);
  }
  LengthView lengths(raw, 1200);
  auto packed = PlanStatic(cluster, lengths, 0, samples, {1, 0.5}, false);
  auto balanced = PlanStatic(cluster, lengths, 0, samples, {1, 0.5}, true);
  ASSERT_TRUE(packed.ok()) << packed.status();
  ASSERT_TRUE(balanced.ok()) << balanced.status();
  ASSERT_EQ(packed->tasks.size(), 8u);
  ASSERT_EQ(balanced->tasks.size(), 8u);
  std::vector<int> long_per_rank(4, 0);
  for (const TaskPlan& task : balanced->tasks) {
    for (int64_t id : task.samples)
      long_per_rank[task.ranks[0]] += raw[id] == 1200;
  }
  EXPECT_EQ(long_per_rank, (std::vector<int>{1, 1, 1, 1}));
  EXPECT_LT(Replay(cluster, *balanced, lengths),
            0.85 * Replay(cluster, *packed, lengths));
}

TEST(PlanStaticTest, RejectsInvalidConfigs) {
  ReferenceCluster cluster = Small();
  std::vector<int32_t> raw = {100, 200};
  LengthView lengths(raw, 1000);
  absl::Status bad_p =
      PlanStatic(cluster, lengths, 0, {0, 1}, {3, 0.0}, false).status();
  EXPECT_EQ(bad_p.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_p.message(), HasSubstr("group size 3"));
  absl::Status bad_r =
      PlanStatic(cluster, lengths, 0, {0, 1}, {1, 1.5}, false).status();
  EXPECT_THAT(bad_r.message(), HasSubstr("recompute 1.5"));
  // r = 0 on one GPU holds 870 tokens, short of the 1000-token window.
  absl::Status small =
      PlanStatic(cluster, lengths, 0, {0, 1}, {1, 0.0}, false).status();
  EXPECT_EQ(small.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(small.message(), HasSubstr("870"));
  EXPECT_THAT(small.message(), HasSubstr("window of 1000"));
  absl::Status unknown =
      PlanStatic(cluster, lengths, 0, {0, 5}, {4, 0.0}, false).status();
  EXPECT_THAT(unknown.message(), HasSubstr("sample 5"));
  absl::Status bad_u =
      PlanStatic(cluster, lengths, 0, {0, 1}, {4, 0.0, 3}, false).status();
  EXPECT_EQ(bad_u.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_u.message(), HasSubstr("Ulysses degree 3"));

  // On 8 GPUs a group of 8 exceeds the 4 heads: plain Ulysses is refused,
  // 4-way Ulysses in a ring of 2 is not; 8-way Ulysses never is.
  ReferenceCluster eight(SmallCluster(), TinyModel(), 8);
  absl::Status plain =
      PlanStatic(eight, lengths, 0, {0, 1}, {8, 0.5}, false).status();
  EXPECT_EQ(plain.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plain.message(), HasSubstr("head count (4)"));
  EXPECT_TRUE(PlanStatic(eight, lengths, 0, {0, 1}, {8, 0.5, 4}, false).ok());
  absl::Status too_wide =
      PlanStatic(eight, lengths, 0, {0, 1}, {8, 0.5, 8}, false).status();
  EXPECT_THAT(too_wide.message(), HasSubstr("Ulysses degree 8"));
}

TEST(PlanStaticTest, TasksCarryTheUlyssesDegree) {
  ReferenceCluster cluster = Small();
  std::vector<int32_t> raw = {600, 600, 500, 300, 900};
  LengthView lengths(raw, 1000);
  const std::vector<int64_t> samples = {0, 1, 2, 3, 4};
  for (bool balanced : {false, true}) {
    // 2 groups of 2 as rings (u = 1), and as plain Ulysses, spelled with
    // u = 0 or u = p: the same tasks, emitted as plain Ulysses (0).
    auto ring = PlanStatic(cluster, lengths, 0, samples, {2, 0.0, 1}, balanced);
    auto plain = PlanStatic(cluster, lengths, 0, samples, {2, 0.0}, balanced);
    auto named = PlanStatic(cluster, lengths, 0, samples, {2, 0.0, 2}, balanced);
    ASSERT_TRUE(ring.ok()) << ring.status();
    ASSERT_TRUE(plain.ok() && named.ok());
    ASSERT_FALSE(ring->tasks.empty());
    for (const TaskPlan& task : ring->tasks) {
      EXPECT_EQ(task.ulysses, 1);
      EXPECT_EQ(task.ranks.size(), 2u);
    }
    ASSERT_EQ(plain->tasks.size(), named->tasks.size());
    for (size_t i = 0; i < plain->tasks.size(); ++i) {
      EXPECT_EQ(plain->tasks[i].ulysses, 0);
      EXPECT_EQ(named->tasks[i].ulysses, 0);
      EXPECT_EQ(plain->tasks[i].samples, named->tasks[i].samples);
      EXPECT_EQ(plain->tasks[i].ranks, named->tasks[i].ranks);
    }
    // The replay prices the ring as a ring.
    absl::StatusOr<StepReport> report = ReplayStep(cluster, *ring, lengths);
    ASSERT_TRUE(report.ok()) << report.status();
    double busy0 = 0;
    for (const TaskPlan& task : ring->tasks) {
      if (task.ranks[0] != 0) continue;
      std::vector<int64_t> seq;
      for (int64_t id : task.samples) seq.push_back(raw[id]);
      busy0 += cluster.Cost(task.ranks, seq, 0.0, 1).total_s;
    }
    EXPECT_NEAR(report->rank_busy_s[0], busy0, 1e-12);
  }
}

TEST(TuneStaticTest, FindsTheBestFeasibleConfig) {
  ReferenceCluster cluster = Small();
  std::vector<int32_t> raw = UniformLengths(400, 20, 1000, 17);
  LengthView lengths(raw, 1000);
  StepBuilderOptions options;
  options.tokens_per_step = 6000;
  auto steps = BuildSteps(lengths, options, 8);
  ASSERT_TRUE(steps.ok()) << steps.status();
  for (bool balanced : {false, true}) {
    absl::StatusOr<TunedStatic> tuned =
        TuneStatic(cluster, lengths, *steps, balanced);
    ASSERT_TRUE(tuned.ok()) << tuned.status();
    // With 2 layers the tuner's candidates are the whole grid; check that
    // against brute force over every feasible (p, u, r).
    int feasible = 0;
    for (int p : {1, 2, 4}) {
      for (int u = p; u >= 1; --u) {
        if (p % u != 0) continue;
        for (double r : {0.0, 0.5, 1.0}) {
          if (MaxTokensPerTask(cluster, p, r) < 1000) continue;
          ++feasible;
          double total = 0;
          for (size_t i = 0; i < steps->size(); ++i) {
            auto plan = PlanStatic(cluster, lengths, i, (*steps)[i],
                                   {p, r, u}, balanced);
            ASSERT_TRUE(plan.ok()) << plan.status();
            total += Replay(cluster, *plan, lengths);
          }
          EXPECT_LE(tuned->total_makespan_s, total + 1e-12)
              << "p=" << p << " u=" << u << " r=" << r;
          if (p == tuned->config.group_size && u == tuned->config.ulysses &&
              r == tuned->config.recompute) {
            EXPECT_NEAR(tuned->total_makespan_s, total, 1e-12);
          }
        }
      }
    }
    // p=1 (u=1) needs r >= 0.5; p=2 (u=2, 1) and p=4 (u=4, 2, 1) fit at
    // r=0: 2 + 2*3 + 3*3.
    EXPECT_EQ(feasible, 17);
    EXPECT_EQ(tuned->configs_tried, feasible);
    EXPECT_GT(tuned->config.ulysses, 0);
  }
}

// A judge of the caller's own picks the configuration: one that calls
// every plan but those of plain Ulysses over 4 ranks at recompute 0.5 slow
// gets that one, and the total is the judge's, not the replay's.
TEST(TuneStaticTest, AJudgeOfTheCallersOwnDecides) {
  ReferenceCluster cluster = Small();
  std::vector<int32_t> raw = UniformLengths(400, 20, 1000, 17);
  LengthView lengths(raw, 1000);
  StepBuilderOptions options;
  options.tokens_per_step = 6000;
  auto steps = BuildSteps(lengths, options, 3);
  ASSERT_TRUE(steps.ok()) << steps.status();
  int judged = 0;
  const StepJudge judge = [&judged](const StepPlan& plan) {
    ++judged;
    const TaskPlan& task = plan.tasks.front();
    return task.ranks.size() == 4 && task.UlyssesDegree() == 4 &&
                   task.recompute == 0.5
               ? 1.0
               : 2.0;
  };
  absl::StatusOr<TunedStatic> tuned =
      TuneStatic(cluster, lengths, *steps, /*balanced=*/true,
                 StaticSearch::kUlyssesOnly, judge);
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  EXPECT_EQ(tuned->config.group_size, 4);
  EXPECT_EQ(tuned->config.UlyssesDegree(), 4);
  EXPECT_EQ(tuned->config.recompute, 0.5);
  EXPECT_EQ(tuned->total_makespan_s, 1.0 * steps->size());
  EXPECT_EQ(judged, tuned->configs_tried * static_cast<int>(steps->size()));
}

TEST(TuneStaticTest, InfeasibleWindowNamesIt) {
  ReferenceCluster cluster = Small();
  std::vector<int32_t> raw = {100, 10000};
  LengthView lengths(raw, 10000);
  std::vector<std::vector<int64_t>> steps = {{0, 1}};
  absl::Status s = TuneStatic(cluster, lengths, steps, true).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("context window of 10000"));
  EXPECT_THAT(s.message(), HasSubstr("9347"));
  EXPECT_FALSE(TuneStatic(cluster, lengths, {}, true).ok());
}

// 4 heads on 16 GPUs (2 a node) with the small memory: the sharded states
// take 16*280000/16 = 280000 bytes, leaving 9.72e6; a GPU holds
// 9.72e6/10200 = 952 tokens at r = 0, 9.72e6/7000 = 1388 at r = 0.5 and
// 9.72e6/3800 = 2557 at r = 1. A 20000-token window then needs 8 GPUs at
// r = 1 (2500 a GPU) or 16 at r = 0.5 (1250 a GPU; 8 at r = 0.5 hold only
// 11108): more than the 4 heads, so no plain Ulysses group holds it.
class FewHeadsTest : public ::testing::Test {
 protected:
  FewHeadsTest() : cluster_(SmallCluster(), TinyModel(), 16) {
    raw_ = UniformLengths(300, 20, kWindow, 3);
    raw_[7] = kWindow;  // one sequence as long as the window
    lengths_ = LengthView(raw_, kWindow);
    StepBuilderOptions options;
    options.tokens_per_step = 60000;
    steps_ = *BuildSteps(lengths_, options, 4);
  }

  // The total replayed makespan of `config` over the steps.
  double Total(const StaticConfig& config, bool balanced) {
    double total = 0;
    for (size_t i = 0; i < steps_.size(); ++i) {
      auto plan =
          PlanStatic(cluster_, lengths_, i, steps_[i], config, balanced);
      EXPECT_TRUE(plan.ok()) << plan.status();
      if (plan.ok()) total += Replay(cluster_, *plan, lengths_);
    }
    return total;
  }

  static constexpr int kWindow = 20000;
  ReferenceCluster cluster_;
  std::vector<int32_t> raw_;
  LengthView lengths_;
  std::vector<std::vector<int64_t>> steps_;
};

TEST_F(FewHeadsTest, MemoryFiguresAreThoseOfTheComment) {
  EXPECT_EQ(MaxTokensPerGpu(cluster_, 0.0), 952);
  EXPECT_EQ(MaxTokensPerGpu(cluster_, 0.5), 1388);
  EXPECT_EQ(MaxTokensPerGpu(cluster_, 1.0), 2557);
  EXPECT_LT(MaxTokensPerTask(cluster_, 4, 1.0), kWindow);
  EXPECT_GE(MaxTokensPerTask(cluster_, 8, 1.0), kWindow);
  EXPECT_LT(MaxTokensPerTask(cluster_, 8, 0.5), kWindow);
  EXPECT_GE(MaxTokensPerTask(cluster_, 16, 0.5), kWindow);
  EXPECT_LT(MaxTokensPerTask(cluster_, 16, 0.0), kWindow);
}

TEST_F(FewHeadsTest, TunedStaticIsUlyssesInsideARing) {
  for (bool balanced : {false, true}) {
    absl::StatusOr<TunedStatic> tuned =
        TuneStatic(cluster_, lengths_, steps_, balanced);
    ASSERT_TRUE(tuned.ok()) << tuned.status();
    const StaticConfig& best = tuned->config;
    EXPECT_GE(best.group_size, 8);
    EXPECT_GT(best.RingDegree(), 1);
    EXPECT_EQ(4 % best.UlyssesDegree(), 0);
    // The feasible configurations, by hand: p = 8 at r = 1 and p = 16 at
    // r = 0.5 and 1, each with u = 4, 2 and 1.
    EXPECT_EQ(tuned->configs_tried, 3 + 2 * 3);
    for (int p : {8, 16}) {
      for (int u : {4, 2, 1}) {
        for (double r : {0.5, 1.0}) {
          if (p == 8 && r == 0.5) continue;
          EXPECT_LE(tuned->total_makespan_s,
                    Total({p, r, u}, balanced) + 1e-12)
              << "p=" << p << " u=" << u << " r=" << r;
        }
      }
    }
    EXPECT_NEAR(tuned->total_makespan_s, Total(best, balanced), 1e-12);
    // Every plan of the tuned configuration passes the simulator's checks
    // (Total replays them) and names its Ulysses degree.
    auto plan =
        PlanStatic(cluster_, lengths_, 0, steps_[0], best, balanced);
    ASSERT_TRUE(plan.ok()) << plan.status();
    for (const TaskPlan& task : plan->tasks) {
      EXPECT_EQ(task.ulysses, best.UlyssesDegree());
      EXPECT_EQ(task.ranks.size(), static_cast<size_t>(best.group_size));
      EXPECT_EQ(task.ranks[0] % best.group_size, 0);
    }

    // Plain Ulysses alone cannot hold the window.
    absl::Status plain = TuneStatic(cluster_, lengths_, steps_, balanced,
                                    StaticSearch::kUlyssesOnly)
                             .status();
    EXPECT_EQ(plain.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(plain.message(), HasSubstr("context window of 20000"));
    EXPECT_THAT(plain.message(),
                HasSubstr(absl::StrCat(MaxTokensPerTask(cluster_, 4, 1.0))));
  }
}

TEST_F(FewHeadsTest, DynamicCpGivesTheWindowARingOfEight) {
  // At r = 1: ceil(20000 / 2557) = 8, a power of two, over twice the heads.
  ASSERT_EQ(*DynamicCpGroupSize(cluster_, kWindow, 2557), 8);
  for (size_t i = 0; i < steps_.size(); ++i) {
    auto plan = PlanDynamicCp(cluster_, lengths_, i, steps_[i], {1.0, 0});
    ASSERT_TRUE(plan.ok()) << plan.status();
    for (const TaskPlan& task : plan->tasks) {
      const int p = static_cast<int>(task.ranks.size());
      // A ring of power-of-two size on an aligned block.
      EXPECT_EQ(p & (p - 1), 0) << p;
      EXPECT_EQ(task.ranks[0] % p, 0);
      EXPECT_EQ(task.ulysses, p == 1 ? 0 : 1);
      int64_t longest = 0;
      for (int64_t id : task.samples) {
        longest = std::max<int64_t>(longest, lengths_[id]);
      }
      if (p > 1) {
        ASSERT_EQ(task.samples.size(), 1u);
        EXPECT_EQ(p, *DynamicCpGroupSize(cluster_, longest, 2557));
      }
    }
    absl::StatusOr<StepReport> report = ReplayStep(cluster_, *plan, lengths_);
    EXPECT_TRUE(report.ok()) << report.status();
    if (std::find(steps_[i].begin(), steps_[i].end(), 7) != steps_[i].end()) {
      EXPECT_EQ(RanksOfSample(*plan, 7).size(), 8u);
    }
  }
  // At r = 0.5 the window needs ceil(20000 / 1388) = 15 -> 16, the world.
  EXPECT_EQ(*DynamicCpGroupSize(cluster_, kWindow, 1388), 16);
  absl::StatusOr<TunedDynamicCp> tuned =
      TuneDynamicCp(cluster_, lengths_, steps_);
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  EXPECT_GE(tuned->options.recompute, 0.5);
}

TEST_F(FewHeadsTest, TiesGoToTheLargerUlyssesDegree) {
  // Free communication and an attention efficiency that does not depend on
  // the chunk length: at a given p every u costs the same, so every shape
  // of one size ties and the largest u must win.
  ClusterSpec free_links = SmallCluster();
  free_links.intra_node_bw = std::numeric_limits<double>::infinity();
  free_links.inter_node_bw = std::numeric_limits<double>::infinity();
  free_links.intra_node_latency_s = 0;
  free_links.inter_node_latency_s = 0;
  free_links.attn_eff_half_tokens = 0;
  const ReferenceCluster cluster(free_links, TinyModel(), 16);
  absl::StatusOr<TunedStatic> tuned =
      TuneStatic(cluster, lengths_, steps_, /*balanced=*/true);
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  const StaticConfig& best = tuned->config;
  // The largest u dividing the 4 heads and p >= 8.
  EXPECT_EQ(best.UlyssesDegree(), 4);
  for (int u : {2, 1}) {
    double total = 0;
    for (size_t i = 0; i < steps_.size(); ++i) {
      auto plan = PlanStatic(cluster, lengths_, i, steps_[i],
                             {best.group_size, best.recompute, u}, true);
      ASSERT_TRUE(plan.ok()) << plan.status();
      total += Replay(cluster, *plan, lengths_);
    }
    EXPECT_EQ(total, tuned->total_makespan_s) << "u=" << u << " must tie";
  }
}

TEST_F(FewHeadsTest, ASequenceTheWholeWorldCannotHoldIsRefused) {
  // 16 GPUs at r = 1 hold floor(16 * 2557.9) tokens.
  const int64_t world_holds = MaxTokensPerTask(cluster_, 16, 1.0);
  ASSERT_GT(world_holds, 40000);
  ASSERT_LT(world_holds, 50000);
  std::vector<int32_t> raw = {100, 50000};
  LengthView lengths(raw, 50000);
  std::vector<std::vector<int64_t>> steps = {{0, 1}};
  absl::Status tuned = TuneStatic(cluster_, lengths, steps, true).status();
  EXPECT_EQ(tuned.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tuned.message(), HasSubstr("context window of 50000"));
  EXPECT_THAT(tuned.message(), HasSubstr(absl::StrCat(world_holds)));
  absl::Status planned =
      PlanStatic(cluster_, lengths, 0, {0, 1}, {16, 1.0, 1}, true).status();
  EXPECT_EQ(planned.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(planned.message(), HasSubstr("window of 50000"));
  // Dynamic CP: 50000 / 2557 needs a ring of 32 in a world of 16.
  absl::Status cp = PlanDynamicCp(cluster_, lengths, 0, {0, 1}, {1.0, 0})
                        .status();
  EXPECT_EQ(cp.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cp.message(), HasSubstr("50000 tokens"));
  EXPECT_THAT(cp.message(), HasSubstr("ring of 32"));
  absl::Status cp_tuned = TuneDynamicCp(cluster_, lengths, steps).status();
  EXPECT_EQ(cp_tuned.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cp_tuned.message(), HasSubstr("context window of 50000"));
}

TEST(DynamicCpTest, GroupSizes) {
  ReferenceCluster cluster = Small();
  EXPECT_EQ(*DynamicCpGroupSize(cluster, 300, 870), 1);
  EXPECT_EQ(*DynamicCpGroupSize(cluster, 870, 870), 1);
  EXPECT_EQ(*DynamicCpGroupSize(cluster, 871, 870), 2);
  EXPECT_EQ(*DynamicCpGroupSize(cluster, 3000, 870), 4);
  absl::Status too_long = DynamicCpGroupSize(cluster, 4000, 870).status();
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.message(), HasSubstr("4000 tokens"));
  EXPECT_THAT(too_long.message(), HasSubstr("ring of 8"));
  EXPECT_FALSE(DynamicCpGroupSize(cluster, 10, 0).ok());

  // 12 heads on 24 GPUs: 5x the cap needs 8, which does not divide 12 but
  // is a ring; 16x needs 16, the largest power of two within 24; 17x
  // would need 32.
  ModelSpec twelve = TinyModel();
  twelve.heads = 12;
  ReferenceCluster odd(SmallCluster(), twelve, 24);
  EXPECT_EQ(*DynamicCpGroupSize(odd, 5 * 100, 100), 8);
  EXPECT_EQ(*DynamicCpGroupSize(odd, 3 * 100, 100), 4);
  EXPECT_EQ(*DynamicCpGroupSize(odd, 16 * 100, 100), 16);
  absl::Status beyond = DynamicCpGroupSize(odd, 17 * 100, 100).status();
  EXPECT_EQ(beyond.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(beyond.message(), HasSubstr("1700 tokens"));
  EXPECT_THAT(beyond.message(), HasSubstr("ring of 32"));
}

TEST(DynamicCpTest, LongSequencesGetGroupsShortOnesArePacked) {
  ReferenceCluster cluster = Small();
  std::vector<int32_t> raw = {300, 1000, 3000, 200};
  LengthView lengths(raw, 3000);
  absl::StatusOr<StepPlan> plan =
      PlanDynamicCp(cluster, lengths, 5, {0, 1, 2, 3}, {0.0, 0});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->step, 5);
  ASSERT_EQ(plan->tasks.size(), 3u);
  EXPECT_EQ(RanksOfSample(*plan, 2), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(RanksOfSample(*plan, 1).size(), 2u);
  EXPECT_EQ(RanksOfSample(*plan, 0).size(), 1u);
  EXPECT_EQ(RanksOfSample(*plan, 0), RanksOfSample(*plan, 3));
  // Costliest first: the 4-GPU task, then the 2-GPU one on block 0, then
  // the pack on the first rank free after the 4-GPU task (rank 2).
  EXPECT_EQ(plan->tasks[0].samples, std::vector<int64_t>{2});
  EXPECT_EQ(plan->tasks[1].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(plan->tasks[2].ranks, std::vector<int>{2});
  EXPECT_EQ(plan->tasks[2].samples, (std::vector<int64_t>{0, 3}));
  Replay(cluster, *plan, lengths);

  // A smaller cap spreads a sequence wider and packs less.
  std::vector<int32_t> raw2 = {300, 1000, 200};
  LengthView lengths2(raw2, 1000);
  auto uncapped = PlanDynamicCp(cluster, lengths2, 0, {0, 1, 2}, {0.0, 0});
  auto capped = PlanDynamicCp(cluster, lengths2, 0, {0, 1, 2}, {0.0, 400});
  ASSERT_TRUE(uncapped.ok()) << uncapped.status();
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_EQ(RanksOfSample(*uncapped, 1).size(), 2u);
  EXPECT_EQ(RanksOfSample(*capped, 1).size(), 4u);  // ceil(1000/400) -> 4
  EXPECT_EQ(uncapped->tasks.size(), 2u);            // [1000], [300, 200]
  EXPECT_EQ(capped->tasks.size(), 3u);              // [1000], [300], [200]
  Replay(cluster, *uncapped, lengths2);
  Replay(cluster, *capped, lengths2);
}

TEST(DynamicCpTest, GreedyFillsTheEarliestFreeBlock) {
  ReferenceCluster cluster = Small();
  // Eight equal single-GPU packs: two per rank, in placement order.
  std::vector<int32_t> raw(8, 800);
  LengthView lengths(raw, 800);
  auto plan =
      PlanDynamicCp(cluster, lengths, 0, {0, 1, 2, 3, 4, 5, 6, 7}, {0.0, 0});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->tasks.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(plan->tasks[i].ranks, std::vector<int>{i % 4});
  }
  const double one = cluster.Cost({0}, {800}, 0.0).total_s;
  EXPECT_NEAR(Replay(cluster, *plan, lengths), 2 * one + cluster.SyncSeconds(),
              1e-12);
}

TEST(DynamicCpTest, InfeasibleWindowIsAClearError) {
  ReferenceCluster cluster = Small();
  std::vector<int32_t> raw = {100};
  LengthView lengths(raw, 10000);
  absl::Status plan =
      PlanDynamicCp(cluster, lengths, 0, {0}, {1.0, 0}).status();
  EXPECT_EQ(plan.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.message(), HasSubstr("10000"));
  std::vector<std::vector<int64_t>> steps = {{0}};
  absl::Status tune = TuneDynamicCp(cluster, lengths, steps).status();
  EXPECT_EQ(tune.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tune.message(), HasSubstr("context window of 10000"));
}

TEST(DynamicCpTest, TuneStartsAtTheSmallestFeasibleRecompute) {
  ReferenceCluster cluster = Small();
  std::vector<int32_t> raw = UniformLengths(200, 50, 4000, 5);
  // At r=0 a 4000-token window needs 8 GPUs (cap 870); at r=0.5, 4.
  LengthView lengths(raw, 4000);
  StepBuilderOptions options;
  options.tokens_per_step = 12000;
  auto steps = BuildSteps(lengths, options, 6);
  ASSERT_TRUE(steps.ok()) << steps.status();
  absl::StatusOr<TunedDynamicCp> tuned =
      TuneDynamicCp(cluster, lengths, *steps);
  ASSERT_TRUE(tuned.ok()) << tuned.status();
  // r = 0.5 and r = 1, each with the memory cap and the smaller caps at
  // which the window still fits.
  EXPECT_GE(tuned->configs_tried, 2);
  EXPECT_LE(tuned->configs_tried, 6);
  EXPECT_GE(tuned->options.recompute, 0.5);
  for (double r : {0.5, 1.0}) {
    double total = 0;
    for (size_t i = 0; i < steps->size(); ++i) {
      auto plan = PlanDynamicCp(cluster, lengths, i, (*steps)[i], {r, 0});
      ASSERT_TRUE(plan.ok()) << plan.status();
      total += Replay(cluster, *plan, lengths);
    }
    EXPECT_LE(tuned->total_makespan_s, total + 1e-12);
  }
}

// A skewed trace on the reference cluster: mostly short documents with a
// long tail up to the 64K window.
class Llama8bTest : public ::testing::Test {
 protected:
  Llama8bTest()
      : cluster_(ClusterSpec::H200(), *BuiltinModel("llama3-8b"), 32) {
    uint64_t s = 99;
    for (int i = 0; i < 6000; ++i) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      const uint64_t r = s >> 33;
      if (r % 20 == 0) {
        raw_.push_back(static_cast<int32_t>(16384 + (r / 20) % 65536));
      } else if (r % 20 < 4) {
        raw_.push_back(static_cast<int32_t>(2048 + (r / 20) % 8192));
      } else {
        raw_.push_back(static_cast<int32_t>(64 + (r / 20) % 2000));
      }
    }
    lengths_ = LengthView(raw_, kWindow);
    StepBuilderOptions options;
    options.tokens_per_step = 32 * 16384;
    options.seed = 1;
    steps_ = *BuildSteps(lengths_, options, 6);
  }

  static constexpr int64_t kWindow = 65536;
  ReferenceCluster cluster_;
  std::vector<int32_t> raw_;
  LengthView lengths_;
  std::vector<std::vector<int64_t>> steps_;
};

TEST_F(Llama8bTest, TunedBaselinesReplayAndBalancedNeverLoses) {
  absl::StatusOr<TunedStatic> packed =
      TuneStatic(cluster_, lengths_, steps_, false);
  absl::StatusOr<TunedStatic> balanced =
      TuneStatic(cluster_, lengths_, steps_, true);
  absl::StatusOr<TunedDynamicCp> dynamic =
      TuneDynamicCp(cluster_, lengths_, steps_);
  ASSERT_TRUE(packed.ok()) << packed.status();
  ASSERT_TRUE(balanced.ok()) << balanced.status();
  ASSERT_TRUE(dynamic.ok()) << dynamic.status();
  EXPECT_LT(balanced->total_makespan_s, packed->total_makespan_s);

  // Whatever the configuration, balancing never loses a step.
  int compared = 0;
  for (StaticConfig config : StaticShapes(cluster_)) {
    for (double r : {0.5, 0.75, 1.0}) {
      config.recompute = r;
      if (MaxTokensPerTask(cluster_, config.group_size, r) < kWindow) continue;
      for (size_t i = 0; i < steps_.size(); ++i) {
        auto in_order =
            PlanStatic(cluster_, lengths_, i, steps_[i], config, false);
        auto even = PlanStatic(cluster_, lengths_, i, steps_[i], config, true);
        ASSERT_TRUE(in_order.ok() && even.ok());
        const double a = Replay(cluster_, *in_order, lengths_);
        const double b = Replay(cluster_, *even, lengths_);
        EXPECT_LE(b, a * (1 + 1e-12))
            << "p=" << config.group_size << " u=" << config.ulysses
            << " r=" << r << " step " << i;
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 6 * 10);

  // The tuned configurations replay to the totals the tuners report, and
  // no plan beats the lower bound.
  double total_packed = 0, total_balanced = 0, total_cp = 0, lower_bound = 0;
  for (size_t i = 0; i < steps_.size(); ++i) {
    auto a =
        PlanStatic(cluster_, lengths_, i, steps_[i], packed->config, false);
    auto b =
        PlanStatic(cluster_, lengths_, i, steps_[i], balanced->config, true);
    auto c = PlanDynamicCp(cluster_, lengths_, i, steps_[i], dynamic->options);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    auto report = ReplayStep(cluster_, *c, lengths_);
    ASSERT_TRUE(report.ok()) << report.status();
    total_packed += Replay(cluster_, *a, lengths_);
    total_balanced += Replay(cluster_, *b, lengths_);
    total_cp += report->makespan_s;
    lower_bound += report->lower_bound_s;
  }
  EXPECT_NEAR(total_packed, packed->total_makespan_s, 1e-9);
  EXPECT_NEAR(total_balanced, balanced->total_makespan_s, 1e-9);
  EXPECT_NEAR(total_cp, dynamic->total_makespan_s, 1e-9);
  EXPECT_GT(balanced->total_makespan_s, lower_bound);
  EXPECT_GT(dynamic->total_makespan_s, lower_bound);
}

TEST_F(Llama8bTest, DynamicCpSplitsOnlyLongSequences) {
  // At r = 0 a GPU holds about 26.8K tokens: the window needs 4 GPUs.
  const int64_t cap = MaxTokensPerGpu(cluster_, 0.0);
  EXPECT_GT(cap, 20000);
  EXPECT_LT(cap, 32768);
  // Find a step with a sample longer than the cap and one short one.
  bool checked = false;
  for (size_t i = 0; i < steps_.size() && !checked; ++i) {
    int64_t long_id = -1, short_id = -1;
    for (int64_t id : steps_[i]) {
      if (lengths_[id] > 2 * cap) long_id = id;
      if (lengths_[id] < 1000) short_id = id;
    }
    if (long_id < 0 || short_id < 0) continue;
    auto plan = PlanDynamicCp(cluster_, lengths_, i, steps_[i], {0.0, 0});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(RanksOfSample(*plan, long_id).size(), 4u);
    EXPECT_EQ(RanksOfSample(*plan, short_id).size(), 1u);
    Replay(cluster_, *plan, lengths_);
    checked = true;
  }
  EXPECT_TRUE(checked) << "the trace has no step with both kinds";
}

TEST_F(Llama8bTest, StaticWindowTooLongForAnyConfig) {
  // 32 GPUs at r = 1 hold ~9.8M tokens; a 16M-token window does not fit.
  std::vector<int32_t> raw = {1000, 16'000'000};
  LengthView lengths(raw, 16'000'000);
  std::vector<std::vector<int64_t>> steps = {{0, 1}};
  absl::Status s = TuneStatic(cluster_, lengths, steps, false).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("16000000"));
}

}  // namespace
}  // namespace dcp
