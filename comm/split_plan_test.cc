#include "comm/split_plan.h"

#include <cstdint>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Groups = std::vector<std::vector<int>>;

// What an all-reduce over the world gives every rank.
std::vector<float> Sum(const std::vector<std::vector<float>>& parts) {
  std::vector<float> sum(parts[0].size(), 0.0f);
  for (const std::vector<float>& part : parts) {
    EXPECT_EQ(part.size(), sum.size());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  return sum;
}

// The whole exchange for a world whose rank r lists `mine[r]` at `step`.
absl::StatusOr<Groups> Exchange(const std::vector<Groups>& mine,
                                int64_t step) {
  const int world = static_cast<int>(mine.size());
  std::vector<std::vector<float>> headers;
  for (int r = 0; r < world; ++r) {
    headers.push_back(
        SplitHeader(world, r, step, static_cast<int>(mine[r].size())));
  }
  absl::StatusOr<std::vector<int>> counts =
      ReadSplitHeader(Sum(headers), world, step);
  if (!counts.ok()) return counts.status();
  std::vector<std::vector<float>> tables;
  for (int r = 0; r < world; ++r) {
    tables.push_back(SplitTable(world, r, *counts, mine[r]));
  }
  return ReadSplitTable(Sum(tables), world, *counts);
}

TEST(SplitPlanTest, EveryRankLearnsEveryNewGroupOfTheStep) {
  // World of 4: [0,1] and [2,3], and [1,2] that ranks 1 and 2 also run.
  const std::vector<Groups> mine = {
      {{0, 1}}, {{0, 1}, {1, 2}}, {{1, 2}, {2, 3}}, {{2, 3}}};
  absl::StatusOr<Groups> groups = Exchange(mine, 17);
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_EQ(*groups, (Groups{{0, 1}, {1, 2}, {2, 3}}));
}

TEST(SplitPlanTest, AStepWithoutNewGroupsHasNoTable) {
  const int world = 3;
  std::vector<std::vector<float>> headers;
  for (int r = 0; r < world; ++r) headers.push_back(SplitHeader(3, r, 4, 0));
  absl::StatusOr<std::vector<int>> counts = ReadSplitHeader(Sum(headers), 3, 4);
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_THAT(*counts, ElementsAre(0, 0, 0));
  EXPECT_TRUE(SplitTable(3, 1, *counts, {}).empty());
}

TEST(SplitPlanTest, RanksAtDifferentStepsCannotAgree) {
  const int world = 2;
  const std::vector<float> sum =
      Sum({SplitHeader(world, 0, 5, 0), SplitHeader(world, 1, 6, 0)});
  absl::Status status = ReadSplitHeader(sum, world, 5).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("rank 1 is not at step 5"));
  // A rank missing from the sum (a world that is not all there) too.
  EXPECT_FALSE(ReadSplitHeader(SplitHeader(world, 0, 5, 0), world, 5).ok());
  EXPECT_EQ(ReadSplitHeader(sum, 3, 5).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SplitPlanTest, AGroupListedByOnlySomeOfItsMembersIsAnError) {
  // Rank 1 thinks [0,1] is formed already; rank 0 does not.
  absl::Status status = Exchange({{{0, 1}}, {}}, 3).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("disagree about the group [0,1]"));
}

TEST(SplitPlanTest, AGroupListedByANonMemberIsAnError) {
  absl::Status status = Exchange({{{1, 2}}, {{1, 2}}, {{1, 2}}}, 3).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("rank 0 listed the group [1,2]"));
}

TEST(SplitPlanTest, LargeStepsAreTaggedExactly) {
  const int64_t step = (int64_t{1} << 40) + 12345;
  absl::StatusOr<Groups> groups = Exchange({{{0, 1}}, {{0, 1}}}, step);
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_EQ(*groups, (Groups{{0, 1}}));
}

TEST(SplitPlanTest, RoundsHoldDisjointGroupsAndEveryGroupOnce) {
  const Groups groups = {{0, 1}, {0, 1, 2, 3}, {1, 2}, {2, 3}, {4, 5}};
  const std::vector<Groups> rounds = SplitRounds(groups);
  ASSERT_EQ(rounds.size(), 3u);
  EXPECT_EQ(rounds[0], (Groups{{0, 1}, {2, 3}, {4, 5}}));
  EXPECT_EQ(rounds[1], (Groups{{0, 1, 2, 3}}));
  EXPECT_EQ(rounds[2], (Groups{{1, 2}}));
  std::multiset<std::vector<int>> seen;
  for (const Groups& round : rounds) {
    std::set<int> ranks;
    for (const std::vector<int>& g : round) {
      seen.insert(g);
      for (int r : g) EXPECT_TRUE(ranks.insert(r).second) << "rank " << r;
    }
  }
  EXPECT_EQ(seen, std::multiset<std::vector<int>>(groups.begin(), groups.end()));
  EXPECT_TRUE(SplitRounds({}).empty());
}

TEST(SplitPlanTest, AShrunkWorldExchangesItsGroupsInWorldIndices) {
  // Rank 1 failed: the world of [0, 2, 3] has ranks 0, 1, 2, and its
  // groups [0, 2] and [2, 3] are exchanged and split in those.
  const std::vector<int> members = {0, 2, 3};
  const std::vector<Groups> global = {{{0, 2}}, {{0, 2}, {2, 3}}, {{2, 3}}};
  std::vector<Groups> mine;
  for (const Groups& groups : global) {
    absl::StatusOr<Groups> indices = ToWorldIndices(groups, members);
    ASSERT_TRUE(indices.ok()) << indices.status();
    mine.push_back(*indices);
  }
  EXPECT_EQ(mine[1], (Groups{{0, 1}, {1, 2}}));
  absl::StatusOr<Groups> groups = Exchange(mine, 9);
  ASSERT_TRUE(groups.ok()) << groups.status();
  ASSERT_EQ(groups->size(), 2u);
  EXPECT_THAT(ToGlobalRanks((*groups)[0], members), ElementsAre(0, 2));
  EXPECT_THAT(ToGlobalRanks((*groups)[1], members), ElementsAre(2, 3));
}

TEST(SplitPlanTest, AGroupWithARankOutsideTheWorldIsAnError) {
  absl::Status status = ToWorldIndices({{0, 2}, {1, 2}}, {0, 2, 3}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("[1,2] holds rank 1"));
  EXPECT_THAT(status.message(), HasSubstr("world [0,2,3]"));
}

TEST(SplitPlanTest, ColorIsTheIndexOfTheRanksGroupInTheRound) {
  const Groups round = {{0, 1}, {3, 4}};
  EXPECT_EQ(SplitColor(round, 0), 0);
  EXPECT_EQ(SplitColor(round, 4), 1);
  EXPECT_EQ(SplitColor(round, 2), -1);
}

}  // namespace
}  // namespace dcp
