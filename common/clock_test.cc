#include "common/clock.h"

#include <cstdint>
#include <thread>

#include "absl/synchronization/mutex.h"
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

TEST(FakeClockTest, WaitEndsWhenTheTimeReachesItsDeadline) {
  FakeClock clock;
  absl::Mutex mu;
  bool never = false;
  bool held = true;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    held =
        clock.AwaitWithTimeout(&mu, absl::Condition(&never), absl::Seconds(10));
  });
  EXPECT_TRUE(clock.AwaitSleepers(1, absl::Seconds(30)));
  EXPECT_EQ(clock.NextDeadline(), absl::UnixEpoch() + absl::Seconds(10));
  EXPECT_TRUE(clock.AwaitSleeperUntil(absl::UnixEpoch() + absl::Seconds(10),
                                      absl::ZeroDuration()));
  EXPECT_FALSE(clock.AwaitSleeperUntil(absl::UnixEpoch() + absl::Seconds(9),
                                       absl::ZeroDuration()));
  clock.Advance(absl::Seconds(9));
  // Not reached: the wait is still under way.
  EXPECT_TRUE(clock.AwaitSleepers(1, absl::ZeroDuration()));
  clock.Advance(absl::Seconds(1));
  waiter.join();
  EXPECT_FALSE(held);
  EXPECT_FALSE(clock.AwaitSleepers(1, absl::ZeroDuration()));
}

TEST(FakeClockTest, WaitEndsWhenItsConditionHolds) {
  FakeClock clock;
  absl::Mutex mu;
  bool ready = false;
  bool held = false;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    held = clock.AwaitWithTimeout(&mu, absl::Condition(&ready), absl::Hours(1));
  });
  EXPECT_TRUE(clock.AwaitSleepers(1, absl::Seconds(30)));
  {
    absl::MutexLock lock(&mu);
    ready = true;
  }
  waiter.join();
  EXPECT_TRUE(held);
  EXPECT_EQ(clock.Now(), absl::UnixEpoch());
}

TEST(FakeClockTest, WaitPastItsDeadlineDoesNotBlock) {
  FakeClock clock(absl::FromUnixSeconds(100));
  absl::Mutex mu;
  bool never = false;
  absl::MutexLock lock(&mu);
  EXPECT_FALSE(clock.AwaitWithDeadline(&mu, absl::Condition(&never),
                                       absl::FromUnixSeconds(100)));
}

TEST(RealClockTest, WaitsInRealTime) {
  Clock* clock = RealClock::Default();
  absl::Mutex mu;
  bool never = false;
  absl::MutexLock lock(&mu);
  const absl::Time start = absl::Now();
  EXPECT_FALSE(clock->AwaitWithTimeout(&mu, absl::Condition(&never),
                                       absl::Milliseconds(20)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(20));
}

// Work counts, waiting does not: a thread blocked for 200 ms of real time
// uses almost no CPU, and spinning moves the clock.
TEST(ProcessCpuClockTest, CountsWorkNotWaiting) {
  ProcessCpuClock cpu;
  const absl::Time before_wait = cpu.Now();
  absl::Mutex mu;
  absl::MutexLock lock(&mu);
  const bool never = false;
  const absl::Time wall_before = absl::Now();
  mu.AwaitWithTimeout(absl::Condition(&never), absl::Milliseconds(200));
  const absl::Duration waited = absl::Now() - wall_before;
  const absl::Duration cpu_waiting = cpu.Now() - before_wait;
  EXPECT_GE(waited, absl::Milliseconds(200));
  EXPECT_LT(cpu_waiting, waited / 4);

  const absl::Time before_work = cpu.Now();
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  volatile uint64_t sink = 0;
  while (cpu.Now() - before_work < absl::Milliseconds(20) &&
         absl::Now() < give_up) {
    for (int i = 0; i < 100000; ++i) sink = sink + i;
  }
  EXPECT_GE(cpu.Now() - before_work, absl::Milliseconds(20));
}

}  // namespace
}  // namespace dcp
