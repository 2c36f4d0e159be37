#include "worker_agent/step_mailbox.h"

#include <atomic>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "proto/plan.pb.h"

namespace dcp {
namespace {

/// Bounds every real wait of a test: a hang fails instead of blocking.
constexpr absl::Duration kGuard = absl::Seconds(30);

v1::RankStep StepOf(int64_t epoch, int64_t step) {
  v1::RankStep s;
  s.set_epoch(epoch);
  s.set_step(step);
  return s;
}

class StepMailboxTest : public ::testing::Test {
 protected:
  StepMailboxOptions Options(int capacity = 4) {
    StepMailboxOptions options;
    options.rank = 0;
    options.capacity = capacity;
    options.clock = &clock_;
    return options;
  }

  FakeClock clock_;
};

TEST_F(StepMailboxTest, HandsOutInOrderAndDropsStaleSteps) {
  StepMailbox mailbox(Options());
  EXPECT_TRUE(mailbox.Put(StepOf(0, 0)));
  EXPECT_TRUE(mailbox.Put(StepOf(0, 1)));
  EXPECT_FALSE(mailbox.Put(StepOf(0, 1)));  // Not newer.
  EXPECT_EQ(mailbox.last_step(), 1);
  absl::StatusOr<NextStepResult> first = mailbox.NextStep(-1, kGuard);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->step.step(), 0);
  // Asked again: the same step.
  EXPECT_EQ(mailbox.NextStep(-1, kGuard)->step.step(), 0);
  EXPECT_EQ(mailbox.NextStep(0, kGuard)->step.step(), 1);
  EXPECT_EQ(*mailbox.DeliveredEpoch().value(), 0);
  const StepMailbox::Stats stats = mailbox.stats();
  EXPECT_EQ(stats.steps_received, 2);
  EXPECT_EQ(stats.steps_delivered, 2);
  EXPECT_EQ(stats.stale_dropped, 1);
}

TEST_F(StepMailboxTest, NextStepTimesOutWhenTheClockReachesItsDeadline) {
  StepMailbox mailbox(Options());
  absl::StatusOr<NextStepResult> result = absl::UnknownError("not yet");
  absl::Notification returned;
  std::thread consumer([&] {
    result = mailbox.NextStep(-1, absl::Seconds(10));
    returned.Notify();
  });
  // EXPECT, not ASSERT: the thread is joined either way.
  EXPECT_TRUE(clock_.AwaitSleepers(1, kGuard));
  EXPECT_EQ(clock_.NextDeadline(), absl::UnixEpoch() + absl::Seconds(10));
  clock_.Advance(absl::Seconds(9));
  EXPECT_FALSE(returned.HasBeenNotified());
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(returned.WaitForNotificationWithTimeout(kGuard));
  consumer.join();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(StepMailboxTest, NextStepWakesWhenAStepArrives) {
  StepMailbox mailbox(Options());
  absl::StatusOr<NextStepResult> result = absl::UnknownError("not yet");
  std::thread consumer([&] { result = mailbox.NextStep(-1, absl::Hours(1)); });
  EXPECT_TRUE(clock_.AwaitSleepers(1, kGuard));
  mailbox.Put(StepOf(0, 0));
  consumer.join();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->step.step(), 0);
}

TEST_F(StepMailboxTest, AsyncWaitIsAnsweredByItsDeadlineOnTheClock) {
  StepMailbox mailbox(Options());
  absl::Notification answered;
  absl::Status status;
  const int64_t id =
      mailbox.NextStepAsync(-1, clock_.Now() + absl::Seconds(5),
                            [&](absl::StatusOr<NextStepResult> r) {
                              status = r.status();
                              answered.Notify();
                            });
  EXPECT_NE(id, 0);
  // The mailbox's thread waits for the deadline; until the clock gets
  // there, nothing answers.
  ASSERT_TRUE(clock_.AwaitSleepers(1, kGuard));
  EXPECT_FALSE(answered.HasBeenNotified());
  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(kGuard));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(mailbox.CancelNextStep(id));
}

TEST_F(StepMailboxTest, AsyncWaitIsAnsweredByAStepAndCancelledOnes) {
  StepMailbox mailbox(Options());
  absl::Notification answered;
  absl::StatusOr<NextStepResult> answer = absl::UnknownError("none");
  mailbox.NextStepAsync(-1, absl::InfiniteFuture(),
                        [&](absl::StatusOr<NextStepResult> r) {
                          answer = std::move(r);
                          answered.Notify();
                        });
  std::atomic<bool> ran{false};
  const int64_t cancelled = mailbox.NextStepAsync(
      -1, absl::InfiniteFuture(),
      [&](absl::StatusOr<NextStepResult>) { ran = true; });
  EXPECT_TRUE(mailbox.CancelNextStep(cancelled));
  mailbox.Put(StepOf(0, 0));
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(kGuard));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->step.step(), 0);
  mailbox.Close();
  mailbox.Join();
  EXPECT_FALSE(ran.load());
}

TEST_F(StepMailboxTest, CloseAnswersPendingAndLaterCallsUnavailable) {
  StepMailbox mailbox(Options());
  absl::Notification answered;
  absl::Status status;
  mailbox.NextStepAsync(-1, absl::InfiniteFuture(),
                        [&](absl::StatusOr<NextStepResult> r) {
                          status = r.status();
                          answered.Notify();
                        });
  mailbox.Close();
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(kGuard));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(mailbox.NextStep(-1, kGuard).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(mailbox.AwaitRoom());
  EXPECT_EQ(mailbox.DeliveredEpoch().status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(StepMailboxTest, DrainComesAfterTheQueuedStepsFailureToo) {
  StepMailbox drained(Options());
  drained.Put(StepOf(0, 0));
  drained.Drain();
  EXPECT_EQ(drained.NextStep(-1, kGuard)->step.step(), 0);
  EXPECT_EQ(drained.WaitForDrainDelivered(absl::ZeroDuration()).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(drained.NextStep(0, kGuard)->drained);
  EXPECT_TRUE(drained.WaitForDrainDelivered(absl::ZeroDuration()).ok());

  StepMailbox failed(Options());
  failed.Put(StepOf(0, 0));
  failed.Fail(absl::UnavailableError("lost"));
  failed.Fail(absl::InternalError("later"));  // The first one wins.
  EXPECT_EQ(failed.NextStep(-1, kGuard)->step.step(), 0);
  EXPECT_EQ(failed.NextStep(0, kGuard).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(failed.WaitForDrainDelivered(kGuard).code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(StepMailboxTest, AFullMailboxHoldsTheProducerBack) {
  StepMailbox mailbox(Options(/*capacity=*/1));
  mailbox.Put(StepOf(0, 0));
  absl::Notification room;
  std::thread producer([&] {
    if (mailbox.AwaitRoom()) room.Notify();
  });
  EXPECT_FALSE(room.HasBeenNotified());
  ASSERT_TRUE(mailbox.NextStep(-1, kGuard).ok());  // Frees the slot.
  EXPECT_TRUE(room.WaitForNotificationWithTimeout(kGuard));
  producer.join();
}

}  // namespace
}  // namespace dcp
