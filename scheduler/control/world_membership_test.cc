#include "scheduler/control/world_membership.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int kWorld = 4;
constexpr absl::Duration kTimeout = absl::Seconds(10);
const absl::Time kStart = absl::UnixEpoch();

v1::RegisterRequest Hello(int rank) {
  v1::RegisterRequest request;
  request.set_rank(rank);
  request.set_host(rank < 2 ? "node-a" : "node-b");
  request.set_gpu(rank % 2);
  request.set_pid(100 + rank);
  return request;
}

WorldMembership World(RankFailurePolicy policy) {
  WorldMembershipOptions options;
  options.world_size = kWorld;
  options.rank_timeout = kTimeout;
  options.on_rank_failure = policy;
  return WorldMembership(options);
}

/// Every rank registered with an open stream at `kStart`.
WorldMembership Running(RankFailurePolicy policy) {
  WorldMembership world = World(policy);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_FALSE(world.Registered(Hello(r), kStart));
    world.StreamOpened(r, kStart);
  }
  return world;
}

TEST(WorldMembershipTest, KeepsEachRanksRegistrationAndProgress) {
  WorldMembership world = Running(RankFailurePolicy::kHold);
  world.StepSent(2, 0, kStart + absl::Seconds(1));
  world.StepSent(2, 1, kStart + absl::Seconds(2));
  world.Reported(2, 0, kStart + absl::Seconds(3));
  const RankRecord& r = world.rank(2);
  EXPECT_TRUE(r.registered);
  EXPECT_EQ(r.host, "node-b");
  EXPECT_EQ(r.gpu, 0);
  EXPECT_EQ(r.pid, 102);
  EXPECT_EQ(r.last_sent_step, 1);
  EXPECT_EQ(r.last_reported_step, 0);
  EXPECT_EQ(r.reported_steps, 1);
  EXPECT_EQ(r.last_seen, kStart + absl::Seconds(3));
  EXPECT_TRUE(world.rank(3).registered);

  v1::StatusResponse status;
  world.FillStatus(kStart + absl::Seconds(5), &status);
  ASSERT_EQ(status.ranks_size(), kWorld);
  EXPECT_EQ(status.ranks(2).last_sent_step(), 1);
  EXPECT_EQ(status.ranks(2).idle_seconds(), 2.0);
  EXPECT_EQ(status.ranks(0).idle_seconds(), 5.0);
  EXPECT_EQ(status.epoch_world_size(), kWorld);
  EXPECT_EQ(status.live_ranks(), kWorld);
  EXPECT_EQ(status.on_rank_failure(), "hold");
}

TEST(WorldMembershipTest, UnderHoldAFailureHoldsUntilTheRankReturns) {
  WorldMembership world = Running(RankFailurePolicy::kHold);
  world.StreamClosed(1, kStart);
  EXPECT_THAT(world.DeclareFailed(kStart + kTimeout / 2).failed, IsEmpty());
  const RankFailureEvent failure = world.DeclareFailed(kStart + kTimeout);
  EXPECT_THAT(failure.failed, ElementsAre(1));
  ASSERT_EQ(failure.reasons.size(), 1u);
  EXPECT_THAT(failure.reasons[0], HasSubstr("rank 1"));
  EXPECT_EQ(failure.policy, "hold");
  EXPECT_TRUE(world.holding());
  // Hold keeps the world as it is.
  EXPECT_EQ(world.NextMembers(), world.members());

  EXPECT_TRUE(world.Registered(Hello(1), kStart + 2 * kTimeout));
  const RankFailureEvent back = world.ReturnEvent(1);
  EXPECT_EQ(back.returned, 1);
  EXPECT_FALSE(back.holding);
  EXPECT_EQ(back.live_ranks, kWorld);
  EXPECT_THAT(back.members, ElementsAre(0, 1, 2, 3));
}

TEST(WorldMembershipTest, UnderShrinkTheNextWorldLeavesTheFailedOut) {
  WorldMembership world = Running(RankFailurePolicy::kShrink);
  EXPECT_TRUE(world.shrinks());
  world.StreamClosed(3, kStart);
  ASSERT_THAT(world.DeclareFailed(kStart + kTimeout).failed, ElementsAre(3));
  EXPECT_FALSE(world.holding());
  const std::vector<bool> next = world.NextMembers();
  EXPECT_THAT(RanksOf(next), ElementsAre(0, 1, 2));
  world.MoveTo(1, next);
  EXPECT_EQ(world.epoch(), 1);

  v1::StatusResponse status;
  world.FillStatus(kStart + kTimeout, &status);
  EXPECT_EQ(status.epoch(), 1);
  EXPECT_EQ(status.epoch_world_size(), 3);
  EXPECT_FALSE(status.ranks(3).member());
  EXPECT_TRUE(status.ranks(3).failed());
  EXPECT_EQ(status.rank_failures(), 1);

  // Back, it is in the world of the next epoch.
  EXPECT_TRUE(world.Registered(Hello(3), kStart + 2 * kTimeout));
  EXPECT_THAT(world.ReturnEvent(3).members, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(world.ReturnEvent(3).epoch, 1);
}

TEST(WorldMembershipTest, ARestoreKeepsTheLeftOutFailedAndTheMembersOwing) {
  WorldMembership world = World(RankFailurePolicy::kShrink);
  world.Restore(2, {true, true, false, true}, /*under_way=*/true, kStart);
  EXPECT_EQ(world.epoch(), 2);
  EXPECT_THAT(RanksOf(world.members()), ElementsAre(0, 1, 3));
  EXPECT_TRUE(world.liveness().failed(2));
  // The members owe their registrations: silent for the timeout, failed.
  EXPECT_THAT(world.DeclareFailed(kStart + kTimeout).failed,
              ElementsAre(0, 1, 3));
}

TEST(WorldMembershipTest, NoTimeoutDetectsNothing) {
  WorldMembership world(WorldMembershipOptions{kWorld});
  EXPECT_FALSE(world.detects_failures());
  EXPECT_FALSE(world.shrinks());
  v1::StatusResponse status;
  world.FillStatus(kStart, &status);
  EXPECT_EQ(status.on_rank_failure(), "");
}

TEST(WorldMembershipTest, WorldOfNamesARankOutsideTheWorld) {
  EXPECT_EQ(*WorldOf({}, 3), std::vector<bool>({true, true, true}));
  EXPECT_EQ(*WorldOf({0, 2}, 3), std::vector<bool>({true, false, true}));
  const absl::Status outside = WorldOf({0, 5}, 3).status();
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(outside.message(), HasSubstr("rank 5 is outside the world"));
}

}  // namespace
}  // namespace dcp
