#include "scheduler/control/rank_liveness.h"

#include <vector>

#include "absl/time/time.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr absl::Duration kTimeout = absl::Seconds(10);

class RankLivenessTest : public ::testing::Test {
 protected:
  RankLivenessTest() : live_({4, kTimeout}) {
    for (int r = 0; r < 4; ++r) {
      live_.OnRegistered(r, clock_.Now());
      live_.OnStreamOpened(r, clock_.Now());
    }
  }
  FakeClock clock_;
  RankLiveness live_;
};

TEST_F(RankLivenessTest, ConnectedRanksNeverFail) {
  clock_.Advance(100 * kTimeout);
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
  EXPECT_EQ(live_.live_ranks(), 4);
  EXPECT_EQ(live_.failures(), 0);
}

TEST_F(RankLivenessTest, AGoneStreamFailsAfterTheTimeoutOnce) {
  live_.OnStreamClosed(2, clock_.Now());
  clock_.Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
  EXPECT_FALSE(live_.failed(2));
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(2));
  EXPECT_TRUE(live_.failed(2));
  // Declared once, not at every check.
  clock_.Advance(kTimeout);
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
  EXPECT_EQ(live_.live_ranks(), 3);
  EXPECT_EQ(live_.failed_ranks(), 1);
  EXPECT_EQ(live_.failures(), 1);
}

TEST_F(RankLivenessTest, AReportAfterTheStreamEndedPostponesTheFailure) {
  live_.OnStreamClosed(1, clock_.Now());
  clock_.Advance(kTimeout / 2);
  live_.OnSeen(1, clock_.Now());
  clock_.Advance(kTimeout / 2);
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
  clock_.Advance(kTimeout / 2);
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(1));
}

TEST_F(RankLivenessTest, AStreamBackBeforeTheTimeoutIsNoFailure) {
  live_.OnStreamClosed(3, clock_.Now());
  clock_.Advance(kTimeout / 2);
  EXPECT_FALSE(live_.OnRegistered(3, clock_.Now()));
  live_.OnStreamOpened(3, clock_.Now());
  clock_.Advance(10 * kTimeout);
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
}

TEST_F(RankLivenessTest, ARegistrationEndsTheFailureAndItCanFailAgain) {
  live_.OnStreamClosed(0, clock_.Now());
  clock_.Advance(kTimeout);
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(0));
  EXPECT_TRUE(live_.OnRegistered(0, clock_.Now()));
  EXPECT_FALSE(live_.failed(0));
  EXPECT_EQ(live_.live_ranks(), 4);
  // Registered but never streaming: it fails again after the timeout.
  clock_.Advance(kTimeout);
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(0));
  EXPECT_EQ(live_.failures(), 2);
}

TEST_F(RankLivenessTest, SeveralRanksFailTogetherInOrder) {
  live_.OnStreamClosed(3, clock_.Now());
  live_.OnStreamClosed(1, clock_.Now());
  clock_.Advance(kTimeout);
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(1, 3));
  EXPECT_EQ(live_.live_ranks(), 2);
}

// Ranks 0..2 reported step 5 at the start; rank 3, streaming, did not.
class RankLivenessHungTest : public RankLivenessTest {
 protected:
  RankLivenessHungTest() {
    for (int r : {0, 1, 2}) live_.OnReported(r, 5, clock_.Now());
    live_.OnStepAwaiting(5, {3}, clock_.Now());
  }
};

TEST_F(RankLivenessHungTest, AStreamingRankThatOwesAStepFailsAtTheTimeout) {
  clock_.Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(3));
  EXPECT_TRUE(live_.failed(3));
  EXPECT_EQ(live_.failures(), 1);
  EXPECT_EQ(live_.FailureReason(3),
            "rank 3 did not report step 5 for 10s (--rank_timeout) after the "
            "rest of its world did");
  EXPECT_THAT(live_.Check(clock_.Now() + kTimeout), IsEmpty());
}

TEST_F(RankLivenessHungTest, ASlowRankThatReportsInTimeIsNotFailed) {
  clock_.Advance(kTimeout - absl::Milliseconds(1));
  live_.OnReported(3, 5, clock_.Now());
  clock_.Advance(100 * kTimeout);
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
  EXPECT_EQ(live_.failures(), 0);
}

TEST_F(RankLivenessHungTest, TheClockRestartsWhenAnotherMissingRankReports) {
  // Step 6: ranks 0 and 1 at once, rank 2 eight seconds later, rank 3
  // never. Its clock for step 6 starts with rank 2's report.
  live_.OnReported(3, 5, clock_.Now());
  for (int r : {0, 1}) live_.OnReported(r, 6, clock_.Now());
  live_.OnStepAwaiting(6, {2, 3}, clock_.Now());
  clock_.Advance(absl::Seconds(8));
  live_.OnReported(2, 6, clock_.Now());
  live_.OnStepAwaiting(6, {3}, clock_.Now());
  clock_.Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(3));
  EXPECT_THAT(live_.FailureReason(3), ::testing::HasSubstr("step 6"));
}

TEST_F(RankLivenessHungTest, AnyLaterReportOfTheStepRestartsTheClock) {
  // Step 6 as above, told the cheap way: its missing ranks named once, at
  // the first report, and rank 2's later report only stamps the step.
  live_.OnReported(3, 5, clock_.Now());
  for (int r : {0, 1}) live_.OnReported(r, 6, clock_.Now());
  live_.OnStepAwaiting(6, {2, 3}, clock_.Now());
  clock_.Advance(absl::Seconds(8));
  live_.OnReported(2, 6, clock_.Now());
  live_.OnStepReport(6, clock_.Now());
  clock_.Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(3));
  EXPECT_THAT(live_.FailureReason(3), ::testing::HasSubstr("step 6"));
}

TEST_F(RankLivenessHungTest, AReportOlderThanARegistrationDoesNotShortenIt) {
  // Rank 3 registers again 8 s after step 5's last report; a later stamp of
  // an earlier time (a report handled late) moves nothing back.
  clock_.Advance(absl::Seconds(8));
  live_.OnRegistered(3, clock_.Now());
  live_.OnStreamOpened(3, clock_.Now());
  live_.OnStepReport(5, clock_.Now() - absl::Seconds(8));
  clock_.Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(3));
}

TEST_F(RankLivenessHungTest, ACompletedStepIsOwedByNoOne) {
  live_.OnReported(3, 5, clock_.Now());
  live_.OnStepComplete(5);
  clock_.Advance(10 * kTimeout);
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
}

TEST_F(RankLivenessHungTest, SeveralHungRanksFailTogether) {
  live_.OnStepAwaiting(5, {1, 3}, clock_.Now());
  clock_.Advance(kTimeout);
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(1, 3));
}

TEST_F(RankLivenessHungTest, ARegistrationGivesItAWholeTimeoutAgain) {
  clock_.Advance(kTimeout / 2);
  EXPECT_FALSE(live_.OnRegistered(3, clock_.Now()));
  live_.OnStreamOpened(3, clock_.Now());
  clock_.Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(3));
  // Failed and back: it owes step 5 still, with a fresh clock.
  EXPECT_TRUE(live_.OnRegistered(3, clock_.Now()));
  clock_.Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
  live_.OnReported(3, 5, clock_.Now());
  clock_.Advance(10 * kTimeout);
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
  EXPECT_EQ(live_.failures(), 1);
}

TEST_F(RankLivenessHungTest, ForgottenStepsAreNotOwed) {
  live_.ForgetAwaited();
  clock_.Advance(10 * kTimeout);
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
}

TEST_F(RankLivenessTest, AGoneRankSaysSo) {
  live_.OnStreamClosed(1, clock_.Now());
  clock_.Advance(kTimeout);
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(1));
  EXPECT_EQ(live_.FailureReason(1),
            "rank 1 had no plan stream and was silent for 10s "
            "(--rank_timeout)");
  EXPECT_EQ(live_.FailureReason(0), "");
}

TEST(RankLivenessNoTimeoutTest, ZeroDisablesDetection) {
  FakeClock clock;
  RankLiveness live({2, absl::ZeroDuration()});
  EXPECT_FALSE(live.enabled());
  live.OnRegistered(0, clock.Now());
  live.OnStreamOpened(1, clock.Now());
  live.OnStepAwaiting(0, {1}, clock.Now());
  clock.Advance(absl::Hours(1));
  EXPECT_THAT(live.Check(clock.Now()), IsEmpty());
}

TEST(RankLivenessUnregisteredTest, ARankThatNeverRegisteredIsNotFailed) {
  FakeClock clock;
  RankLiveness live({2, absl::Seconds(1)});
  live.OnRegistered(0, clock.Now());
  clock.Advance(absl::Hours(1));
  // Rank 0 registered and never opened a stream; rank 1 never came.
  EXPECT_THAT(live.Check(clock.Now()), ElementsAre(0));
  EXPECT_EQ(live.live_ranks(), 0);
}

// A scheduler restarted at 1000 s on a world of 4 (no rank registered
// yet); the books of the crashed incarnation are gone.
class RankLivenessRestartTest : public ::testing::Test {
 protected:
  RankLivenessRestartTest() : live_({4, kTimeout}) {
    for (int r = 0; r < 4; ++r) live_.OnRestarted(r, clock_.Now());
  }
  FakeClock clock_{absl::FromUnixSeconds(1000)};
  RankLiveness live_;
};

TEST_F(RankLivenessRestartTest, ARankThatDoesNotComeBackFailsAtTheTimeout) {
  for (int r : {0, 1, 3}) {
    live_.OnRegistered(r, clock_.Now() + absl::Seconds(r));
    live_.OnStreamOpened(r, clock_.Now() + absl::Seconds(r));
  }
  EXPECT_EQ(live_.live_ranks(), 3);  // Owed, not live.
  clock_.Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(2));
  EXPECT_EQ(live_.FailureReason(2),
            "rank 2 did not register within 10s (--rank_timeout) of the "
            "scheduler's restart");
  EXPECT_EQ(live_.failures(), 1);
  // Late, it is a returning rank like any other.
  EXPECT_TRUE(live_.OnRegistered(2, clock_.Now()));
  EXPECT_EQ(live_.live_ranks(), 4);
}

TEST_F(RankLivenessRestartTest, AReplayedStepIsOwedFromTheRestart) {
  // Before the crash ranks 0..2 reported step 7 and rank 3 did not; the
  // replay records their reports at the restart.
  for (int r = 0; r < 4; ++r) {
    live_.OnRegistered(r, clock_.Now());
    live_.OnStreamOpened(r, clock_.Now());
  }
  for (int r : {0, 1, 2}) live_.OnReported(r, 7, clock_.Now());
  live_.OnStepAwaiting(7, {3}, clock_.Now());
  clock_.Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(3));
  EXPECT_THAT(live_.FailureReason(3), ::testing::HasSubstr("step 7"));
}

TEST_F(RankLivenessRestartTest, ARankBackLateAfterTheRestartGetsAWholeTimeout) {
  clock_.Advance(kTimeout / 2);
  // It registers half a timeout after the restart: its replayed debt's
  // clock starts again at its registration.
  live_.OnStepAwaiting(7, {1}, clock_.Now() - kTimeout / 2);
  EXPECT_FALSE(live_.OnRegistered(1, clock_.Now()));
  live_.OnStreamOpened(1, clock_.Now());
  clock_.Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(0, 2, 3));
  EXPECT_FALSE(live_.failed(1));
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(1));
}

TEST(RankLivenessRestoredFailedTest, AFailedRankIsNotOwedARegistration) {
  FakeClock clock;
  RankLiveness live({2, absl::Seconds(1)});
  live.RestoreFailed(1);
  live.OnRestarted(1, clock.Now());
  live.OnRestarted(0, clock.Now());
  clock.Advance(absl::Hours(1));
  EXPECT_THAT(live.Check(clock.Now()), ElementsAre(0));
  EXPECT_EQ(live.failures(), 1);
  EXPECT_TRUE(live.failed(1));
}

TEST(RankFailurePolicyTest, Names) {
  EXPECT_EQ(RankFailurePolicyName(RankFailurePolicy::kHold), "hold");
  EXPECT_EQ(RankFailurePolicyName(RankFailurePolicy::kShrink), "shrink");
}

constexpr absl::Duration kStepTimeout = absl::Seconds(30);

class RankStallTest : public ::testing::Test {
 protected:
  RankStallTest() : live_({4, kTimeout, kStepTimeout}) {
    for (int r = 0; r < 4; ++r) {
      live_.OnRegistered(r, clock_.Now());
      live_.OnStreamOpened(r, clock_.Now());
    }
  }
  FakeClock clock_;
  RankLiveness live_;
};

TEST_F(RankStallTest, AWholeWorldStuckInAStepFailsAtTheStepTimeout) {
  // Every rank got step 0 and none reports it: no rank is behind the
  // others (the hung rule never fires), but the step never ends.
  for (int r = 0; r < 4; ++r) live_.OnStepSent(r, 0, clock_.Now());
  clock_.Advance(kStepTimeout - absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(live_.FailureReason(2),
            "rank 2 made no progress on step 0 for 30s (--step_timeout): its "
            "plan stream is open but it reported nothing");
  // Back by registering, with nothing owed until a step is sent again.
  EXPECT_TRUE(live_.OnRegistered(2, clock_.Now()));
  live_.OnStreamOpened(2, clock_.Now());
  clock_.Advance(10 * kStepTimeout);
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
}

TEST_F(RankStallTest, TheClockRunsFromTheLastReportNotFromTheSending) {
  // Steps 0 and 1 sent at once (look-ahead); a report of 0 at 20 s restarts
  // the clock for 1.
  live_.OnStepSent(1, 0, clock_.Now());
  live_.OnStepSent(1, 1, clock_.Now());
  clock_.Advance(absl::Seconds(20));
  live_.OnReported(1, 0, clock_.Now());
  clock_.Advance(kStepTimeout - absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(1));
  EXPECT_THAT(live_.FailureReason(1), ::testing::HasSubstr("on step 1"));
}

TEST_F(RankStallTest, ARankOwingNothingOrWithoutAStreamIsNotStalled) {
  // Rank 0 waits for a plan (nothing sent): never stalled. Rank 3 was sent
  // a step but its stream ended: the gone rule (`timeout`) applies, not
  // this one.
  live_.OnStepSent(3, 0, clock_.Now());
  live_.OnStreamClosed(3, clock_.Now());
  clock_.Advance(kTimeout);
  EXPECT_THAT(live_.Check(clock_.Now()), ElementsAre(3));
  EXPECT_THAT(live_.FailureReason(3), ::testing::HasSubstr("--rank_timeout"));
  clock_.Advance(10 * kStepTimeout);
  EXPECT_THAT(live_.Check(clock_.Now()), IsEmpty());
}

TEST(RankStallOnlyTest, TheStepTimeoutAloneDetectsStallsNotGoneRanks) {
  FakeClock clock;
  RankLiveness live({2, absl::ZeroDuration(), kStepTimeout});
  EXPECT_TRUE(live.enabled());
  for (int r = 0; r < 2; ++r) {
    live.OnRegistered(r, clock.Now());
    live.OnStreamOpened(r, clock.Now());
  }
  live.OnStreamClosed(0, clock.Now());
  live.OnStepSent(1, 0, clock.Now());
  clock.Advance(kStepTimeout);
  EXPECT_THAT(live.Check(clock.Now()), ElementsAre(1));
  EXPECT_FALSE(live.failed(0));
}

}  // namespace
}  // namespace dcp
