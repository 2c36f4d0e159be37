#include "scheduler/eval/baselines.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
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

TEST(MemoryLimitsTest, ValidGroupSizes) {
  EXPECT_EQ(ValidGroupSizes(Small()), (std::vector<int>{1, 2, 4}));
  ReferenceCluster llama(ClusterSpec::H200(), *BuiltinModel("llama3-8b"), 32);
  EXPECT_EQ(ValidGroupSizes(llama), (std::vector<int>{1, 2, 4, 8, 16, 32}));
  ReferenceCluster dit(ClusterSpec::H200(), *BuiltinModel("dit-video-1.3b"),
                       32);
  EXPECT_EQ(ValidGroupSizes(dit), (std::vector<int>{1, 2, 4}));
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
    // against brute force over every feasible (p, r).
    int feasible = 0;
    for (int p : {1, 2, 4}) {
      for (double r : {0.0, 0.5, 1.0}) {
        if (MaxTokensPerTask(cluster, p, r) < 1000) continue;
        ++feasible;
        double total = 0;
        for (size_t i = 0; i < steps->size(); ++i) {
          auto plan =
              PlanStatic(cluster, lengths, i, (*steps)[i], {p, r}, balanced);
          ASSERT_TRUE(plan.ok()) << plan.status();
          total += Replay(cluster, *plan, lengths);
        }
        EXPECT_LE(tuned->total_makespan_s, total + 1e-12)
            << "p=" << p << " r=" << r;
        if (p == tuned->config.group_size && r == tuned->config.recompute) {
          EXPECT_NEAR(tuned->total_makespan_s, total, 1e-12);
        }
      }
    }
    // p=1 needs r >= 0.5; p=2 and p=4 fit at r=0.
    EXPECT_EQ(feasible, 8);
    EXPECT_EQ(tuned->configs_tried, feasible);
  }
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

TEST(DynamicCpTest, GroupSizes) {
  ReferenceCluster cluster = Small();
  EXPECT_EQ(*DynamicCpGroupSize(cluster, 300, 870), 1);
  EXPECT_EQ(*DynamicCpGroupSize(cluster, 870, 870), 1);
  EXPECT_EQ(*DynamicCpGroupSize(cluster, 871, 870), 2);
  EXPECT_EQ(*DynamicCpGroupSize(cluster, 3000, 870), 4);
  absl::Status too_long = DynamicCpGroupSize(cluster, 4000, 870).status();
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_long.message(), HasSubstr("group of 8"));
  EXPECT_FALSE(DynamicCpGroupSize(cluster, 10, 0).ok());

  // 12 heads on 24 GPUs: 5x the cap needs 8, which does not divide 12, so
  // the next valid size above it, 12.
  ModelSpec twelve = TinyModel();
  twelve.heads = 12;
  ReferenceCluster odd(SmallCluster(), twelve, 24);
  EXPECT_EQ(*DynamicCpGroupSize(odd, 5 * 100, 100), 12);
  EXPECT_EQ(*DynamicCpGroupSize(odd, 3 * 100, 100), 4);
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
  for (int p : ValidGroupSizes(cluster_)) {
    for (double r : {0.5, 0.75, 1.0}) {
      if (MaxTokensPerTask(cluster_, p, r) < kWindow) continue;
      for (size_t i = 0; i < steps_.size(); ++i) {
        auto in_order =
            PlanStatic(cluster_, lengths_, i, steps_[i], {p, r}, false);
        auto even = PlanStatic(cluster_, lengths_, i, steps_[i], {p, r}, true);
        ASSERT_TRUE(in_order.ok() && even.ok());
        const double a = Replay(cluster_, *in_order, lengths_);
        const double b = Replay(cluster_, *even, lengths_);
        EXPECT_LE(b, a * (1 + 1e-12))
            << "p=" << p << " r=" << r << " step " << i;
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
