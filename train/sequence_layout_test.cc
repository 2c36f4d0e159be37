#include "train/sequence_layout.h"

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "train/rank_plan.h"

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

// Uneven packs (several samples, totals not divisible by 2 c u).
const std::vector<std::vector<int64_t>> kPacks = {
    {0, 9, 20, 31}, {0, 1}, {0, 5, 6, 13}, {0, 3, 17, 18, 30, 37}};

TEST(PackLayoutTest, WithoutARingTheShardIsTodays) {
  for (const std::vector<int64_t>& cu : kPacks) {
    for (int p = 1; p <= 5; ++p) {
      absl::StatusOr<PackLayout> layout = PackLayout::Create(cu, p, 0, 1);
      ASSERT_TRUE(layout.ok()) << layout.status();
      EXPECT_EQ(layout->ring_size(), 1);
      EXPECT_EQ(layout->ulysses(), p);
      for (int m = 0; m < p; ++m) {
        // rank_plan's ShardOfPack is today's shard, computed on its own.
        const dcp::PackShard today = dcp::ShardOfPack(cu.back(), p, m);
        EXPECT_EQ(layout->shard_tokens(), today.count);
        EXPECT_EQ(layout->ShardBegin(m), today.begin);
        EXPECT_EQ(layout->RealTokensInShard(m), today.real_tokens);
        std::vector<int64_t> expected(today.count);
        for (int64_t t = 0; t < today.count; ++t) expected[t] = today.begin + t;
        EXPECT_EQ(layout->ShardGlobalPositions(m), expected);
      }
    }
  }
}

TEST(PackLayoutTest, ZigZagGivesRingPositionJChunksJAnd2cMinus1MinusJ) {
  // u = 1, c = 2, T = 10: k = ceil(10 / 4) = 3, chunks of C = 3 tokens,
  // padded to 12. Ring position 0 holds chunks 0 and 3, position 1 chunks 1
  // and 2.
  absl::StatusOr<PackLayout> layout = PackLayout::Create({0, 4, 10}, 2, 0, 2);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->shard_tokens(), 6);
  EXPECT_EQ(layout->padded_tokens(), 12);
  EXPECT_THAT(layout->ShardGlobalPositions(0), ElementsAre(0, 1, 2, 9, 10, 11));
  EXPECT_THAT(layout->ShardGlobalPositions(1), ElementsAre(3, 4, 5, 6, 7, 8));
  EXPECT_EQ(layout->RealTokensInShard(0), 4);
  EXPECT_THAT(layout->ShardSampleIds(0), ElementsAre(0, 0, 0, 1));
  EXPECT_THAT(layout->ShardPositions(0), ElementsAre(0, 1, 2, 5, 0, 0));
  EXPECT_THAT(layout->ShardPositions(1), ElementsAre(3, 0, 1, 2, 3, 4));
  // u = 2, c = 2, T = 10: k = ceil(10 / 8) = 2, C = 4, P = 16. Ring shard 0
  // is chunks 0 and 3: [0, 4) then [12, 16), members 0 and 1 take 4 each.
  layout = PackLayout::Create({0, 4, 10}, 4, 0, 2);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->ulysses(), 2);
  EXPECT_THAT(layout->RingShardPositions(1),
              ElementsAre(4, 5, 6, 7, 8, 9, 10, 11));
  EXPECT_THAT(layout->ShardGlobalPositions(0), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(layout->ShardGlobalPositions(1), ElementsAre(12, 13, 14, 15));
  EXPECT_THAT(layout->ShardGlobalPositions(3), ElementsAre(8, 9, 10, 11));
  EXPECT_EQ(layout->RealTokensInShard(1), 0);
  EXPECT_EQ(layout->RealTokensInShard(3), 2);
}

TEST(PackLayoutTest, EveryRealTokenIsHeldOnceInEveryHybridLayout) {
  for (const std::vector<int64_t>& cu : kPacks) {
    for (auto [u, c] : std::vector<std::pair<int, int>>{
             {1, 2}, {1, 4}, {2, 2}, {4, 1}, {3, 2}, {2, 3}}) {
      const int p = u * c;
      absl::StatusOr<PackLayout> layout = PackLayout::Create(cu, p, 0, c);
      ASSERT_TRUE(layout.ok()) << layout.status();
      const int64_t total = cu.back();
      std::vector<int> held(layout->padded_tokens(), 0);
      for (int m = 0; m < p; ++m) {
        const std::vector<int64_t> global = layout->ShardGlobalPositions(m);
        ASSERT_EQ(static_cast<int64_t>(global.size()), layout->shard_tokens());
        EXPECT_TRUE(std::is_sorted(global.begin(), global.end()));
        const int64_t real = layout->RealTokensInShard(m);
        const std::vector<int> ids = layout->ShardSampleIds(m);
        const std::vector<int64_t> positions = layout->ShardPositions(m);
        ASSERT_EQ(static_cast<int64_t>(ids.size()), real);
        for (int64_t t = 0; t < layout->shard_tokens(); ++t) {
          ASSERT_LT(global[t], layout->padded_tokens());
          ++held[global[t]];
          // Real tokens first, then padding.
          EXPECT_EQ(global[t] < total, t < real);
          if (t < real) {
            EXPECT_EQ(positions[t], global[t] - cu[ids[t]]);
            EXPECT_GE(positions[t], 0);
            EXPECT_LT(global[t], cu[ids[t] + 1]);
          }
        }
        // The members of a ring position hold its ring shard in order.
        if (c > 1 && m % u == u - 1) {
          std::vector<int64_t> joined;
          for (int i = 0; i < u; ++i) {
            const std::vector<int64_t> part =
                layout->ShardGlobalPositions(m - u + 1 + i);
            joined.insert(joined.end(), part.begin(), part.end());
          }
          EXPECT_EQ(joined, layout->RingShardPositions(m / u));
        }
      }
      for (int count : held) EXPECT_EQ(count, 1);
      if (c > 1) {
        EXPECT_EQ(layout->padded_tokens() % (2 * c * u), 0);
        EXPECT_LT(layout->padded_tokens() - total, 2 * c * u);
      }
    }
  }
}

TEST(PackLayoutTest, RefusesARingThatDoesNotDivideTheGroup) {
  absl::StatusOr<PackLayout> layout = PackLayout::Create({0, 9}, 6, 0, 4);
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(layout.status().message(), HasSubstr("c = 4"));
  EXPECT_THAT(layout.status().message(), HasSubstr("p = 6"));
  EXPECT_EQ(PackLayout::Create({0, 9}, 4, 3, 2).status().code(),
            absl::StatusCode::kInvalidArgument);  // odd shard with a ring
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
