#include "scheduler/planner/step_builder.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "scheduler/planner/test_data.h"

namespace dcp {
namespace {

std::vector<int64_t> DrawAll(ShuffledOrder& order) {
  std::vector<int64_t> ids;
  do {
    ids.push_back(order.Next());
  } while (!order.Done());
  return ids;
}

bool IsPermutation(std::vector<int64_t> ids, int64_t n) {
  if (static_cast<int64_t>(ids.size()) != n) return false;
  std::sort(ids.begin(), ids.end());
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] != i) return false;
  }
  return true;
}

TEST(ShuffledOrderTest, EveryEpochIsAPermutation) {
  for (int64_t n : {1, 2, 3, 7, 1000}) {
    ShuffledOrder order(n, 12345);
    for (int epoch = 0; epoch < 3; ++epoch) {
      std::vector<int64_t> ids = DrawAll(order);
      EXPECT_EQ(order.epoch(), epoch);
      EXPECT_TRUE(IsPermutation(ids, n)) << "n=" << n << " epoch=" << epoch;
    }
  }
}

TEST(ShuffledOrderTest, EpochsAreShuffledDifferently) {
  ShuffledOrder order(1000, 5);
  std::vector<int64_t> first = DrawAll(order);
  std::vector<int64_t> second = DrawAll(order);
  EXPECT_NE(first, second);
  EXPECT_EQ(order.epoch(), 1);
  EXPECT_EQ(ShuffledOrder::EpochSeed(5, 0), 5u);
  EXPECT_NE(ShuffledOrder::EpochSeed(5, 1), ShuffledOrder::EpochSeed(5, 2));
}

TEST(ShuffledOrderTest, SameSeedSameOrderDifferentSeedDifferentOrder) {
  ShuffledOrder a(10000, 99), b(10000, 99), c(10000, 100);
  std::vector<int64_t> ia, ib, ic;
  for (int i = 0; i < 100; ++i) {
    ia.push_back(a.Next());
    ib.push_back(b.Next());
    ic.push_back(c.Next());
  }
  EXPECT_EQ(ia, ib);
  EXPECT_NE(ia, ic);
}

// The order is part of the experiment's definition: it must not change with
// the platform, the compiler or a refactoring. These ids were computed by an
// independent Python transcription of splitmix64 + xoshiro256** + Lemire's
// bounded draw + the lazy Fisher-Yates.
TEST(ShuffledOrderTest, OrderIsPinned) {
  ShuffledOrder order(1000000, 2024);
  std::vector<int64_t> ids;
  for (int i = 0; i < 8; ++i) ids.push_back(order.Next());
  EXPECT_EQ(ids, (std::vector<int64_t>{55792, 782103, 72056, 159718, 773651,
                                       244875, 394339, 257012}));
}

TEST(ShuffledOrderTest, MemoryIsProportionalToIdsDrawn) {
  const int64_t n = 100'000'000;
  ShuffledOrder order(n, 1);
  absl::flat_hash_set<int64_t> seen;
  for (int i = 0; i < 10000; ++i) {
    const int64_t id = order.Next();
    ASSERT_GE(id, 0);
    ASSERT_LT(id, n);
    ASSERT_TRUE(seen.insert(id).second) << "id " << id << " drawn twice";
  }
  EXPECT_LE(order.stored_positions(), 10000);
  EXPECT_FALSE(order.Done());
}

TEST(ShuffledOrderTest, ArrayAndMapDrawTheSameIds) {
  // The array is only a faster store of the same shuffle: switching to it at
  // any point must not change a single id, in any epoch.
  for (int64_t n : {1, 2, 7, 1000, 100000}) {
    for (int64_t dense_after : {int64_t{0}, int64_t{1}, n / 32, n / 3}) {
      ShuffledOrder map(n, 77, std::numeric_limits<int64_t>::max());
      ShuffledOrder mixed(n, 77, dense_after);
      for (int64_t k = 0; k < 3 * n + 5; ++k) {
        ASSERT_EQ(map.Next(), mixed.Next())
            << "n=" << n << " dense_after=" << dense_after << " draw " << k;
        ASSERT_EQ(map.epoch(), mixed.epoch());
      }
      EXPECT_LE(mixed.stored_positions(), n);
    }
  }
}

TEST(ShuffledOrderTest, LongEpochsGoOnInTheArray) {
  const int64_t n = 100000;
  ShuffledOrder order(n, 3);
  for (int i = 0; i < 100; ++i) order.Next();
  EXPECT_LT(order.stored_positions(), n);  // Still the map.
  for (int64_t i = 0; i < n / 2; ++i) order.Next();
  EXPECT_EQ(order.stored_positions(), n);  // The array.
  while (!order.Done()) order.Next();
  order.Next();  // A new epoch starts in the map again: one swap at most.
  EXPECT_LE(order.stored_positions(), 1);
}

TEST(ShuffledOrderTest, FirstIdIsRoughlyUniform) {
  // Over 8000 seeds each of 4 ids should come first about 2000 times; a
  // biased draw (e.g. modulo of a narrow range) or a broken swap shows here.
  std::vector<int> counts(4, 0);
  for (uint64_t seed = 0; seed < 8000; ++seed) {
    ShuffledOrder order(4, seed);
    ++counts[order.Next()];
  }
  for (int c : counts) {
    EXPECT_GT(c, 1800);
    EXPECT_LT(c, 2200);
  }
}

std::vector<int32_t> SkewedLengths(int n, uint64_t seed) {
  return testing_data::HeavyTailTrace(n, seed);
}

// Checks that the steps cover whole epochs: no sample twice in an epoch, no
// step spanning two epochs. Returns the number of complete epochs.
int CheckEpochs(const std::vector<std::vector<int64_t>>& steps, int64_t n) {
  absl::flat_hash_set<int64_t> epoch;
  int complete = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    EXPECT_FALSE(steps[s].empty()) << "step " << s;
    for (int64_t id : steps[s]) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, n);
      EXPECT_TRUE(epoch.insert(id).second)
          << "sample " << id << " repeated in an epoch (step " << s << ")";
    }
    EXPECT_LE(static_cast<int64_t>(epoch.size()), n);
    if (static_cast<int64_t>(epoch.size()) == n) {
      ++complete;
      epoch.clear();
    }
  }
  return complete;
}

TEST(StepBuilderTest, StepsFillTheBudgetInShuffledOrder) {
  std::vector<int32_t> raw = SkewedLengths(5000, 3);
  LengthView lengths(raw, 16384);
  StepBuilderOptions options;
  options.tokens_per_step = 65536;
  options.seed = 11;
  absl::StatusOr<std::vector<std::vector<int64_t>>> steps =
      BuildSteps(lengths, options, 40);
  ASSERT_TRUE(steps.ok()) << steps.status();

  ShuffledOrder order(5000, 11);
  for (size_t s = 0; s < steps->size(); ++s) {
    const std::vector<int64_t>& step = (*steps)[s];
    int64_t tokens = 0;
    for (int64_t id : step) {
      EXPECT_EQ(id, order.Next()) << "step " << s;
      tokens += lengths[id];
    }
    EXPECT_LE(tokens, options.tokens_per_step);
    // Greedy: the first sample of the next step did not fit.
    if (s + 1 < steps->size()) {
      EXPECT_GT(tokens + lengths[(*steps)[s + 1][0]], options.tokens_per_step)
          << "step " << s;
    }
  }
}

TEST(StepBuilderTest, EverySampleOnceWithAndWithoutLookahead) {
  const int n = 3000;
  std::vector<int32_t> raw = SkewedLengths(n, 8);
  LengthView lengths(raw, 32768);
  for (int lookahead : {0, 1, 4}) {
    StepBuilderOptions options;
    options.tokens_per_step = 65536;
    options.seed = 4;
    options.lookahead_steps = lookahead;
    // Enough steps for two and a bit epochs.
    absl::StatusOr<std::vector<std::vector<int64_t>>> steps =
        BuildSteps(lengths, options, 300);
    ASSERT_TRUE(steps.ok()) << steps.status();
    EXPECT_GE(CheckEpochs(*steps, n), 2) << "lookahead " << lookahead;
    for (const std::vector<int64_t>& step : *steps) {
      int64_t tokens = 0;
      for (int64_t id : step) tokens += lengths[id];
      EXPECT_LE(tokens, options.tokens_per_step) << "lookahead " << lookahead;
    }
  }
}

TEST(StepBuilderTest, StepsNeverSpanEpochs) {
  // Every step would hold all samples, so each step is exactly one epoch.
  std::vector<int32_t> raw = {5, 6, 7, 8, 9};
  LengthView lengths(raw, 100);
  StepBuilderOptions options;
  options.tokens_per_step = 1000;
  absl::StatusOr<std::vector<std::vector<int64_t>>> steps =
      BuildSteps(lengths, options, 3);
  ASSERT_TRUE(steps.ok()) << steps.status();
  for (const std::vector<int64_t>& step : *steps) {
    EXPECT_TRUE(IsPermutation(step, 5));
  }
  EXPECT_NE((*steps)[0], (*steps)[1]);
}

TEST(StepBuilderTest, OverlongSampleIsAStepOfItsOwn) {
  std::vector<int32_t> raw = {100, 5000, 100, 100};
  LengthView lengths(raw, 8192);
  StepBuilderOptions options;
  options.tokens_per_step = 1000;
  absl::StatusOr<std::vector<std::vector<int64_t>>> steps =
      BuildSteps(lengths, options, 6);
  ASSERT_TRUE(steps.ok()) << steps.status();
  int own = 0;
  for (const std::vector<int64_t>& step : *steps) {
    ASSERT_FALSE(step.empty());
    if (std::find(step.begin(), step.end(), 1) != step.end()) {
      EXPECT_EQ(step.size(), 1u);
      ++own;
    }
  }
  EXPECT_GE(own, 1);
}

TEST(StepBuilderTest, WindowTruncatesLengths) {
  // Truncated to 1000, three samples fit a 3000-token step.
  std::vector<int32_t> raw = {50000, 50000, 50000};
  LengthView lengths(raw, 1000);
  StepBuilderOptions options;
  options.tokens_per_step = 3000;
  absl::StatusOr<std::vector<std::vector<int64_t>>> steps =
      BuildSteps(lengths, options, 1);
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_EQ((*steps)[0].size(), 3u);
}

TEST(StepBuilderTest, SameSeedSameStepsDifferentSeedDifferentSteps) {
  std::vector<int32_t> raw = SkewedLengths(4000, 21);
  LengthView lengths(raw, 32768);
  for (int lookahead : {0, 3}) {
    StepBuilderOptions options;
    options.tokens_per_step = 50000;
    options.lookahead_steps = lookahead;
    options.seed = 1;
    auto a = BuildSteps(lengths, options, 30);
    auto b = BuildSteps(lengths, options, 30);
    options.seed = 2;
    auto c = BuildSteps(lengths, options, 30);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    EXPECT_EQ(*a, *b);
    EXPECT_NE(*a, *c);
  }
}

struct Spread {
  double max_over_mean;
  double stddev_over_mean;
};

Spread CostSpread(const std::vector<std::vector<int64_t>>& steps,
                  const LengthView& lengths) {
  std::vector<double> costs;
  for (const std::vector<int64_t>& step : steps) {
    double c = 0;
    for (int64_t id : step) c += DefaultSampleCost(lengths[id]);
    costs.push_back(c);
  }
  double mean = 0;
  for (double c : costs) mean += c;
  mean /= costs.size();
  double var = 0;
  for (double c : costs) var += (c - mean) * (c - mean);
  var /= costs.size();
  return {*std::max_element(costs.begin(), costs.end()) / mean,
          std::sqrt(var) / mean};
}

TEST(StepBuilderTest, LookaheadEvensOutStepCosts) {
  std::vector<int32_t> raw = SkewedLengths(20000, 77);
  LengthView lengths(raw, 32768);
  StepBuilderOptions options;
  options.tokens_per_step = 131072;
  options.seed = 9;
  auto plain = BuildSteps(lengths, options, 200);
  options.lookahead_steps = 4;
  auto smoothed = BuildSteps(lengths, options, 200);
  ASSERT_TRUE(plain.ok() && smoothed.ok());
  const Spread before = CostSpread(*plain, lengths);
  const Spread after = CostSpread(*smoothed, lengths);
  EXPECT_LT(after.max_over_mean, before.max_over_mean);
  EXPECT_LT(after.stddev_over_mean, 0.5 * before.stddev_over_mean)
      << "before " << before.stddev_over_mean << " after "
      << after.stddev_over_mean;
}

double CountStddev(const std::vector<std::vector<int64_t>>& steps) {
  double mean = 0;
  for (const auto& step : steps) mean += step.size();
  mean /= steps.size();
  double var = 0;
  for (const auto& step : steps) {
    var += (step.size() - mean) * (step.size() - mean);
  }
  return std::sqrt(var / steps.size());
}

TEST(StepBuilderTest, LookaheadUsesTheGivenCost) {
  // With a cost of one per sample, the look-ahead evens out the number of
  // samples per step (here a per-sample overhead, not the length, matters).
  std::vector<int32_t> raw = SkewedLengths(20000, 5);
  LengthView lengths(raw, 32768);
  StepBuilderOptions options;
  options.tokens_per_step = 131072;
  options.seed = 3;
  auto plain = BuildSteps(lengths, options, 100);
  options.lookahead_steps = 4;
  auto by_length = BuildSteps(lengths, options, 100);
  options.sample_cost = [](int64_t) { return 1.0; };
  auto by_count = BuildSteps(lengths, options, 100);
  ASSERT_TRUE(plain.ok() && by_length.ok() && by_count.ok());
  EXPECT_NE(*by_count, *by_length);
  EXPECT_LT(CountStddev(*by_count), 0.5 * CountStddev(*plain))
      << CountStddev(*by_count) << " vs " << CountStddev(*plain);
  EXPECT_LT(CountStddev(*by_count), CountStddev(*by_length));
  CheckEpochs(*by_count, 20000);
}

TEST(StepBuilderTest, RejectsBadOptions) {
  std::vector<int32_t> raw = {10, 20};
  StepBuilderOptions options;
  options.tokens_per_step = 0;
  auto zero = StepBuilder::Create(LengthView(raw, 100), options);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("tokens_per_step"),
            absl::string_view::npos);

  options.tokens_per_step = 100;
  auto empty = StepBuilder::Create(LengthView({}, 100), options);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("empty"), absl::string_view::npos);

  options.lookahead_steps = -1;
  auto negative = StepBuilder::Create(LengthView(raw, 100), options);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);

  options.lookahead_steps = 0;
  EXPECT_FALSE(BuildSteps(LengthView(raw, 100), options, -1).ok());
}

TEST(StepBuilderTest, NonPositiveLengthIsAnError) {
  std::vector<int32_t> raw = {10, 0, 20};
  StepBuilderOptions options;
  options.tokens_per_step = 1000;
  auto steps = BuildSteps(LengthView(raw, 100), options, 1);
  ASSERT_FALSE(steps.ok());
  EXPECT_NE(steps.status().message().find("sample 1"), absl::string_view::npos)
      << steps.status();
}

}  // namespace
}  // namespace dcp
