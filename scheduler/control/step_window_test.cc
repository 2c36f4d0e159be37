#include "scheduler/control/step_window.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "scheduler/control/test_plan.h"
#include "scheduler/planner/plan_proto.h"

namespace dcp {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;
using testing_plan::kGpusPerNode;
using testing_plan::kPredictedSeconds;
using testing_plan::kWorld;
using testing_plan::SmallPlan;
using testing_plan::TimingsOf;

class StepWindowTest : public ::testing::Test {
 protected:
  StepWindowOptions Options() {
    StepWindowOptions o;
    o.session_id = "sess";
    o.world_size = kWorld;
    o.gpus_per_node = kGpusPerNode;
    o.model_name = "tiny";
    o.max_message_bytes = 12345;
    o.lookahead_steps = 3;
    o.max_task_seconds = 100;
    o.clock = &clock_;
    return o;
  }

  static v1::RegisterRequest Hello(int rank, const std::string& host = "h") {
    v1::RegisterRequest r;
    r.set_rank(rank);
    r.set_host(host);
    r.set_gpu(rank);
    r.set_pid(1000 + rank);
    r.set_world_size(kWorld);
    return r;
  }

  static void RegisterAll(StepWindow& window) {
    for (int r = 0; r < kWorld; ++r) {
      ASSERT_TRUE(window.Register(Hello(r)).ok());
    }
  }

  /// Plans every step the window allows now, each a `SmallPlan`.
  static int PlanAll(StepWindow& window) {
    int planned = 0;
    while (std::optional<StepToPlan> next = window.NextStepToPlan()) {
      if (!window.AddPlannedStep(SmallPlan(next->step), next->step,
                                 next->epoch)) {
        break;
      }
      ++planned;
    }
    return planned;
  }

  /// Everything stream `id` has to send right now; `ask_profile` for every
  /// rank in `askers`.
  static std::vector<StreamNext> Pull(StepWindow& window, int64_t id,
                                      std::vector<int> askers = {}) {
    auto profile = std::make_shared<v1::PlanUpdate>();
    profile->mutable_profile()->set_repetitions(7);
    std::vector<StreamNext> out;
    while (true) {
      StreamNext next = window.NextForStream(
          id,
          [&](int rank) {
            return std::find(askers.begin(), askers.end(), rank) !=
                   askers.end();
          },
          profile);
      if (next.kind == StreamNext::Kind::kWait) return out;
      out.push_back(next);
      if (next.kind == StreamNext::Kind::kEnd) return out;
    }
  }

  static v1::StatusResponse Status(const StepWindow& window) {
    v1::StatusResponse status;
    window.FillStatus(&status);
    return status;
  }

  FakeClock clock_{absl::FromUnixSeconds(1000)};
};

TEST_F(StepWindowTest, RegisterValidatesAndReplaces) {
  StepWindow window(Options());
  absl::Status bad = window.Register(Hello(kWorld)).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("rank 4"));
  v1::RegisterRequest wrong_world = Hello(1);
  wrong_world.set_world_size(8);
  bad = window.Register(wrong_world).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("world of 8 ranks"));

  absl::StatusOr<v1::RegisterResponse> hello = window.Register(Hello(1, "a"));
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_EQ(hello->session_id(), "sess");
  EXPECT_EQ(hello->epoch(), 0);
  EXPECT_EQ(hello->world_size(), kWorld);
  EXPECT_EQ(hello->gpus_per_node(), kGpusPerNode);
  EXPECT_EQ(hello->model(), "tiny");
  EXPECT_EQ(hello->next_step(), 0);
  EXPECT_EQ(hello->max_message_bytes(), 12345);

  std::atomic<int> wakes{0};
  const int64_t stream = *window.OpenStream(1, "sess", 0, [&] { ++wakes; });
  v1::RegisterRequest again = Hello(1, "b");
  again.set_world_size(0);  // accept the scheduler's
  ASSERT_TRUE(window.Register(again).ok());
  EXPECT_EQ(wakes.load(), 1);
  std::vector<StreamNext> sent = Pull(window, stream);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].end_status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(sent[0].end_status.message(), HasSubstr("registered again"));
  const v1::StatusResponse status = Status(window);
  EXPECT_EQ(status.ranks(1).host(), "b");
  EXPECT_TRUE(status.ranks(1).registered());
  EXPECT_FALSE(status.ranks(1).connected());
  EXPECT_FALSE(status.ranks(0).registered());
}

TEST_F(StepWindowTest, StreamsSendEachStepOnceInOrder) {
  StepWindow window(Options());
  EXPECT_EQ(window.OpenStream(2, "sess", 0, [] {}).status().code(),
            absl::StatusCode::kFailedPrecondition);  // not registered
  RegisterAll(window);
  EXPECT_EQ(window.OpenStream(2, "other", 0, [] {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(window.OpenStream(2, "sess", -1, [] {}).status().code(),
            absl::StatusCode::kInvalidArgument);

  const int64_t s2 = *window.OpenStream(2, "sess", 0, [] {});
  EXPECT_TRUE(Pull(window, s2).empty());
  ASSERT_EQ(PlanAll(window), 3);  // the look-ahead
  std::vector<StreamNext> sent = Pull(window, s2);
  ASSERT_EQ(sent.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sent[i].kind, StreamNext::Kind::kSend);
    EXPECT_TRUE(MessageDifferencer::Equals(
        sent[i].update->step(), RankView(*window.PlannedStep(i), /*rank=*/2)));
  }
  EXPECT_TRUE(Pull(window, s2).empty());  // nothing twice
  EXPECT_EQ(Status(window).ranks(2).last_sent_step(), 2);
  EXPECT_TRUE(Status(window).ranks(2).connected());

  // A stream from step 1; a newer stream of a rank replaces the older.
  const int64_t s3 = *window.OpenStream(3, "sess", 1, [] {});
  EXPECT_EQ(Pull(window, s3).size(), 2u);
  const int64_t s2b = *window.OpenStream(2, "sess", 2, [] {});
  sent = Pull(window, s2);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].end_status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Pull(window, s2b).size(), 1u);
  window.CloseStream(s2);
  EXPECT_TRUE(Status(window).ranks(2).connected());  // s2b is open
  window.CloseStream(s2b);
  EXPECT_FALSE(Status(window).ranks(2).connected());
  window.CloseStream(s2b);  // harmless
}

TEST_F(StepWindowTest, KeptPlansCarryRendezvousPrefixes) {
  StepWindow window(Options());
  ASSERT_EQ(PlanAll(window), 3);
  const v1::StepPlan plan = *window.PlannedStep(1);
  ASSERT_EQ(plan.groups_size(), 2);
  EXPECT_EQ(plan.groups(0).rendezvous_prefix(), "sess/e0/g0-1");
  EXPECT_EQ(plan.groups(1).rendezvous_prefix(), "sess/e0/g1-2");
  const absl::Status missing = window.PlannedStep(3).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("holds steps [0, 3)"));
}

TEST_F(StepWindowTest, AProfileRequestGoesFirstAndOnce) {
  StepWindow window(Options());
  RegisterAll(window);
  ASSERT_EQ(PlanAll(window), 3);
  const int64_t s0 = *window.OpenStream(0, "sess", 0, [] {});
  const int64_t s1 = *window.OpenStream(1, "sess", 0, [] {});
  std::vector<StreamNext> sent = Pull(window, s0, /*askers=*/{0});
  ASSERT_EQ(sent.size(), 4u);
  ASSERT_TRUE(sent[0].update->has_profile());
  EXPECT_EQ(sent[0].update->profile().repetitions(), 7);
  EXPECT_EQ(sent[1].update->step().step(), 0);
  // Once per stream, however long the rank is asked.
  EXPECT_TRUE(Pull(window, s0, {0}).empty());
  sent = Pull(window, s1, {0});
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_TRUE(sent[0].update->has_step());
}

TEST_F(StepWindowTest, TheLastReportCompletesTheStepAndMeasuresIt) {
  StepWindow window(Options());
  RegisterAll(window);
  ASSERT_EQ(PlanAll(window), 3);
  const v1::StepPlan plan = *window.PlannedStep(0);
  double measured = 0;
  double max_busy = 0;
  for (int r = 0; r < kWorld; ++r) {
    const v1::TimingReport report = TimingsOf(plan, r, 0.1 * (r + 1));
    double busy = 0;
    for (const v1::TaskTiming& t : report.tasks()) busy += t.seconds();
    max_busy = std::max(max_busy, busy);
    measured = std::max(measured, busy + report.sync_seconds());

    absl::StatusOr<RecordedTimings> recorded = window.RecordTimings(report);
    ASSERT_TRUE(recorded.ok()) << recorded.status();
    EXPECT_EQ(recorded->planned_steps, 3);
    // Rank 0 is the first rank of task 0, rank 1 of task 1, rank 3 of 2.
    EXPECT_EQ(recorded->observations.size(), r == 2 ? 0u : 1u) << r;
    if (r + 1 < kWorld) {
      EXPECT_FALSE(recorded->completed.has_value());
      EXPECT_EQ(recorded->completed_steps, 0);
      continue;
    }
    ASSERT_TRUE(recorded->completed.has_value());
    EXPECT_EQ(recorded->completed_steps, 1);
    EXPECT_DOUBLE_EQ(recorded->completed->predicted_seconds, kPredictedSeconds);
    EXPECT_DOUBLE_EQ(recorded->completed->measured_seconds, measured);
    EXPECT_DOUBLE_EQ(recorded->completed->max_busy_seconds, max_busy);
    EXPECT_TRUE(recorded->completed->sync_reported);
  }
  EXPECT_EQ(window.PlannedStep(0).status().code(), absl::StatusCode::kNotFound);
  const v1::StatusResponse status = Status(window);
  EXPECT_EQ(status.completed_steps(), 1);
  EXPECT_EQ(status.ranks(2).last_reported_step(), 0);
  EXPECT_EQ(status.ranks(2).lag_steps(), 3 - 1);
  // The next step opens in the look-ahead; a rank registering again
  // resumes at its first unreported step.
  EXPECT_EQ(PlanAll(window), 1);
  EXPECT_EQ(window.Register(Hello(0)).value().next_step(), 1);
}

TEST_F(StepWindowTest, StepsCompleteInOrderAndRejectedReportsChangeNothing) {
  StepWindow window(Options());
  RegisterAll(window);
  ASSERT_EQ(PlanAll(window), 3);
  const v1::StepPlan step0 = *window.PlannedStep(0);
  const v1::StepPlan step1 = *window.PlannedStep(1);
  for (int r = 0; r < kWorld; ++r) {
    absl::StatusOr<RecordedTimings> recorded =
        window.RecordTimings(TimingsOf(step1, r, 0));
    ASSERT_TRUE(recorded.ok()) << recorded.status();
    // Step 1 is reported in full, but step 0 is not: nothing completes.
    EXPECT_EQ(recorded->completed_steps, 0);
    EXPECT_EQ(recorded->completed.has_value(), r + 1 == kWorld);
    EXPECT_FALSE(r + 1 == kWorld && recorded->completed->sync_reported);
  }
  for (int r = 0; r + 1 < kWorld; ++r) {
    ASSERT_TRUE(window.RecordTimings(TimingsOf(step0, r, 0)).ok());
  }
  const v1::StatusResponse before = Status(window);
  v1::TimingReport bad = TimingsOf(step0, kWorld - 1, 0);
  bad.mutable_tasks(0)->set_seconds(-1);
  EXPECT_EQ(window.RecordTimings(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(window.RecordTimings(TimingsOf(step0, 0, 0)).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(MessageDifferencer::Equals(Status(window), before));

  absl::StatusOr<RecordedTimings> last =
      window.RecordTimings(TimingsOf(step0, kWorld - 1, 0));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->completed_steps, 2);
  EXPECT_EQ(window.RecordTimings(TimingsOf(step1, 0, 0)).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST_F(StepWindowTest, ProfileSendersMustBeRegisteredAndCurrent) {
  StepWindow window(Options());
  EXPECT_THAT(window.CheckProfileSender(1, 0).message(),
              HasSubstr("profile of rank 1: rank 1 has not registered"));
  ASSERT_TRUE(window.Register(Hello(1)).ok());
  EXPECT_EQ(window.CheckProfileSender(1, 3).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(window.CheckProfileSender(9, 0).code(),
            absl::StatusCode::kInvalidArgument);
  clock_.Advance(absl::Seconds(4));
  EXPECT_DOUBLE_EQ(Status(window).ranks(1).idle_seconds(), 4.0);
  EXPECT_TRUE(window.CheckProfileSender(1, 0).ok());
  EXPECT_DOUBLE_EQ(Status(window).ranks(1).idle_seconds(), 0.0);
}

TEST_F(StepWindowTest, DrainEndsStreamsAfterTheLastPlannedStep) {
  StepWindow window(Options());
  RegisterAll(window);
  ASSERT_EQ(PlanAll(window), 3);
  const int64_t s0 = *window.OpenStream(0, "sess", 1, [] {});
  const std::optional<StepToPlan> next = window.NextStepToPlan();
  EXPECT_FALSE(next.has_value());  // the look-ahead is full

  EXPECT_EQ(window.Drain(/*stop=*/false), 2);
  EXPECT_TRUE(Status(window).draining());
  EXPECT_FALSE(Status(window).stopping());
  // A plan finished after the drain is discarded.
  EXPECT_FALSE(window.AddPlannedStep(SmallPlan(3), 3, 0));
  std::vector<StreamNext> sent = Pull(window, s0);
  ASSERT_EQ(sent.size(), 4u);  // 1, 2, drain, end
  EXPECT_EQ(sent[1].update->step().step(), 2);
  ASSERT_TRUE(sent[2].update->has_drain());
  EXPECT_EQ(sent[2].update->drain().last_step(), 2);
  EXPECT_EQ(sent[3].kind, StreamNext::Kind::kEnd);
  EXPECT_TRUE(sent[3].end_status.ok());
  EXPECT_FALSE(window.stopped());  // no stop was asked for
}

TEST_F(StepWindowTest, StopWaitsForOpenStreams) {
  StepWindow window(Options());
  RegisterAll(window);
  const int64_t s0 = *window.OpenStream(0, "sess", 0, [] {});
  EXPECT_EQ(window.Drain(/*stop=*/true), -1);
  EXPECT_TRUE(Status(window).stopping());
  EXPECT_FALSE(window.stopped());
  EXPECT_FALSE(window.WaitForStop(absl::ZeroDuration()));
  std::vector<StreamNext> sent = Pull(window, s0);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].update->drain().last_step(), -1);
  window.CloseStream(s0);
  EXPECT_TRUE(window.stopped());
  EXPECT_TRUE(window.WaitForStop(absl::Seconds(5)));
}

TEST_F(StepWindowTest, MaxStepsDrainsByItself) {
  StepWindowOptions o = Options();
  o.max_steps = 2;
  StepWindow window(o);
  RegisterAll(window);
  EXPECT_EQ(PlanAll(window), 2);
  EXPECT_TRUE(Status(window).draining());
  const int64_t s = *window.OpenStream(3, "sess", 0, [] {});
  std::vector<StreamNext> sent = Pull(window, s);
  ASSERT_EQ(sent.size(), 4u);
  EXPECT_EQ(sent[2].update->drain().last_step(), 1);
}

TEST_F(StepWindowTest, APlanningErrorDrainsAndIsShown) {
  StepWindow window(Options());
  RegisterAll(window);
  window.FailPlanning(absl::InternalError("planning step 0 failed: no fit"));
  EXPECT_FALSE(window.NextStepToPlan().has_value());
  const v1::StatusResponse status = Status(window);
  EXPECT_TRUE(status.draining());
  EXPECT_EQ(status.planner_error(), "planning step 0 failed: no fit");
  EXPECT_FALSE(window.AwaitPlanned(1, absl::Seconds(20)));  // at once
}

TEST_F(StepWindowTest, ShutdownEndsStreamsAndPlanning) {
  StepWindow window(Options());
  RegisterAll(window);
  std::atomic<int> wakes{0};
  const int64_t s = *window.OpenStream(0, "sess", 0, [&] { ++wakes; });
  ASSERT_EQ(PlanAll(window), 3);
  EXPECT_TRUE(window.AwaitPlanned(3, absl::ZeroDuration()));
  EXPECT_EQ(Pull(window, s).size(), 3u);
  window.Shutdown();
  EXPECT_TRUE(window.shut_down());
  EXPECT_EQ(wakes.load(), 1);
  std::vector<StreamNext> sent = Pull(window, s);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].end_status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(window.OpenStream(1, "sess", 0, [] {}).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(window.NextStepToPlan().has_value());
  EXPECT_FALSE(window.AwaitPlanned(4, absl::Seconds(20)));  // at once
  // A shutdown ends the wait for a stop at once, streams open or not.
  EXPECT_FALSE(window.WaitForStop(absl::Seconds(20)));
  window.CloseStream(s);
  EXPECT_TRUE(window.WaitForStop(absl::Seconds(20)));
}

}  // namespace
}  // namespace dcp
