#include "common/clock.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

TEST(FakeClockTest, MovesOnlyWhenTold) {
  FakeClock clock(absl::FromUnixSeconds(100));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(100));
  clock.Advance(absl::Milliseconds(1500));
  EXPECT_EQ(clock.Now(), absl::FromUnixMillis(101500));
  clock.Set(absl::FromUnixSeconds(7));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(7));
}

TEST(FakeClockTest, StartsAtTheUnixEpoch) {
  FakeClock clock;
  EXPECT_EQ(clock.Now(), absl::UnixEpoch());
}

TEST(RealClockTest, FollowsTheSystemClock) {
  RealClock clock;
  const absl::Time before = absl::Now();
  const absl::Time now = clock.Now();
  EXPECT_GE(now, before);
  EXPECT_LE(now, absl::Now());
}

}  // namespace
}  // namespace dcp
