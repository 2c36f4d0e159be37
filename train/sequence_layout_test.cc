#include "train/sequence_layout.h"

#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp::train {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(PackLayoutTest, PadsAtTheEndToAMultipleOfTheGroup) {
  // 9 + 11 + 11 = 31 tokens over 4 ranks: 8 per rank, 1 padding token.
  absl::StatusOr<PackLayout> layout = PackLayout::Create({0, 9, 20, 31}, 4);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->total_tokens(), 31);
  EXPECT_EQ(layout->shard_tokens(), 8);
  EXPECT_EQ(layout->padded_tokens(), 32);
  EXPECT_EQ(layout->RealTokensInShard(0), 8);
  EXPECT_EQ(layout->RealTokensInShard(3), 7);
  EXPECT_EQ(layout->ShardBegin(2), 16);
  // Rank 1 holds tokens 8..15: the last of sample 0, then sample 1's first 7.
  EXPECT_THAT(layout->ShardSampleIds(1), ElementsAre(0, 1, 1, 1, 1, 1, 1, 1));
  EXPECT_THAT(layout->ShardPositions(1), ElementsAre(8, 0, 1, 2, 3, 4, 5, 6));
  // Rank 3 holds tokens 24..30 of sample 2 (positions 4..10) and padding.
  EXPECT_THAT(layout->ShardPositions(3), ElementsAre(4, 5, 6, 7, 8, 9, 10, 0));
  EXPECT_EQ(layout->ShardSampleIds(3).size(), 7u);
}

TEST(PackLayoutTest, ExtraPaddingCanLeaveARankWithOnlyPadding) {
  absl::StatusOr<PackLayout> layout = PackLayout::Create({0, 5}, 2, 8);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->RealTokensInShard(0), 5);
  EXPECT_EQ(layout->RealTokensInShard(1), 0);
  EXPECT_TRUE(layout->ShardSampleIds(1).empty());
  EXPECT_THAT(layout->ShardPositions(1), ElementsAre(0, 0, 0, 0, 0, 0, 0, 0));
}

TEST(PackLayoutTest, RefusesMalformedPacks) {
  EXPECT_EQ(PackLayout::Create({}, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PackLayout::Create({1, 4}, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PackLayout::Create({0, 4, 4}, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PackLayout::Create({0, 4}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  // 3 shards of 2 cannot hold 7 tokens.
  EXPECT_EQ(PackLayout::Create({0, 7}, 3, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HeadLayoutTest, SplitsHeadsWithoutReplicationWhenKvHeadsDivide) {
  absl::StatusOr<HeadLayout> layout = HeadLayout::Create(8, 4, 2);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->kv_replication, 1);
  EXPECT_EQ(layout->local_heads(), 4);
  EXPECT_EQ(layout->local_kv_heads(), 2);
}

TEST(HeadLayoutTest, ReplicatesKvHeadsForMoreRanksThanKvHeads) {
  // 2 kv heads over 4 ranks: each sent twice, one per rank.
  absl::StatusOr<HeadLayout> layout = HeadLayout::Create(4, 2, 4);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->kv_replication, 2);
  EXPECT_EQ(layout->local_kv_heads(), 1);
  // 6 heads, 2 kv heads, 3 ranks: rank 1's query heads 2, 3 read kv heads 0
  // and 1, so every query head gets its own copy.
  layout = HeadLayout::Create(6, 2, 3);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->kv_replication, 3);
  EXPECT_EQ(layout->local_kv_heads(), 2);
  EXPECT_EQ(layout->local_heads(), 2);
}

TEST(HeadLayoutTest, RefusesAGroupThatDoesNotDivideHeads) {
  absl::StatusOr<HeadLayout> layout = HeadLayout::Create(4, 2, 3);
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(layout.status().message(), HasSubstr("p = 3"));
  EXPECT_THAT(layout.status().message(), HasSubstr("heads = 4"));
  EXPECT_EQ(HeadLayout::Create(6, 4, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dcp::train
