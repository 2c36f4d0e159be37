// The step window when ranks fail (--rank_timeout, --on_rank_failure):
// hold and shrink, driven by a fake clock, with hand-made plans.

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/control/step_window.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kWorld = 4;
constexpr absl::Duration kTimeout = absl::Seconds(10);

/// Step `step` of `epoch`: one task per member alone; sample k (of
/// `samples`, or 2 a member numbered 100 * step + k) on member k mod n.
v1::StepPlan PlanFor(int64_t step, int64_t epoch,
                     const std::vector<int>& members,
                     std::vector<int64_t> samples = {}) {
  v1::StepPlan plan;
  plan.set_step(step);
  plan.set_epoch(epoch);
  const size_t n = members.size();
  if (samples.empty()) {
    for (size_t i = 0; i < 2 * n; ++i) {
      samples.push_back(100 * step + static_cast<int64_t>(i));
    }
  }
  for (size_t m = 0; m < n; ++m) {
    v1::Task* task = plan.add_tasks();
    task->set_task_index(static_cast<int>(m));
    task->add_ranks(members[m]);
    for (size_t k = m; k < samples.size(); k += n) {
      task->add_samples(samples[k]);
      task->add_lengths(10);
      plan.add_samples(samples[k]);
      plan.set_total_tokens(plan.total_tokens() + 10);
    }
  }
  plan.set_predicted_makespan_s(1);
  return plan;
}

std::vector<int64_t> Sorted(const v1::StepPlan& plan) {
  std::vector<int64_t> out(plan.samples().begin(), plan.samples().end());
  std::sort(out.begin(), out.end());
  return out;
}

v1::TimingReport ReportOf(const v1::StepPlan& plan, int rank) {
  v1::TimingReport report;
  report.set_epoch(plan.epoch());
  report.set_step(plan.step());
  report.set_rank(rank);
  report.set_sync_seconds(0.01);
  for (const v1::Task& task : plan.tasks()) {
    if (task.ranks(0) != rank) continue;
    v1::TaskTiming* t = report.add_tasks();
    t->set_task_index(task.task_index());
    t->set_micro_step(report.tasks_size() - 1);
    t->set_group_size(1);
    t->set_tokens(10 * task.samples_size());
    for (int i = 0; i < task.samples_size(); ++i) t->add_sample_lengths(10);
    t->set_seconds(0.1);
  }
  return report;
}

class StepWindowFailureTest : public ::testing::Test {
 protected:
  /// A window of `kWorld` ranks detecting failures under `policy`.
  StepWindowOptions Options(RankFailurePolicy policy, int64_t max_steps = 0) {
    StepWindowOptions o;
    o.session_id = "sess";
    o.world_size = kWorld;
    o.gpus_per_node = 2;
    o.model_name = "tiny";
    o.lookahead_steps = 3;
    o.max_steps = max_steps;
    o.max_task_seconds = 100;
    o.clock = &clock_;
    o.rank_timeout = kTimeout;
    o.on_rank_failure = policy;
    return o;
  }

  /// `Options` as a window every rank registered with and streams from.
  std::unique_ptr<StepWindow> Make(RankFailurePolicy policy,
                                   int64_t max_steps = 0) {
    auto window = std::make_unique<StepWindow>(Options(policy, max_steps));
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_TRUE(window->Register(Hello(r)).ok());
      absl::StatusOr<int64_t> id = window->OpenStream(r, "sess", 0, [] {});
      EXPECT_TRUE(id.ok());
      streams_.push_back(*id);
    }
    return window;
  }

  static v1::RegisterRequest Hello(int rank) {
    v1::RegisterRequest r;
    r.set_rank(rank);
    r.set_world_size(kWorld);
    return r;
  }

  /// Plans what the window allows, each step for its world (re-served
  /// steps with their samples); returns the plans.
  std::vector<v1::StepPlan> PlanAll(StepWindow& window) {
    std::vector<v1::StepPlan> planned;
    while (std::optional<StepToPlan> next = window.NextStepToPlan()) {
      std::vector<int64_t> samples = next->samples;
      v1::StepPlan plan =
          PlanFor(next->step, next->epoch, next->members, std::move(samples));
      if (!window.AddPlannedStep(plan, *next)) break;
      planned.push_back(std::move(plan));
    }
    return planned;
  }

  /// Kills rank `rank`'s stream and lets the timeout pass.
  void Lose(StepWindow& window, int rank) {
    window.CloseStream(streams_[rank]);
    clock_.Advance(kTimeout);
  }

  /// What rank `rank`'s first stream does next.
  StreamNext NextOf(StepWindow& window, int rank) {
    return window.NextForStream(
        streams_[rank], [](int) { return false; }, nullptr);
  }

  /// Every rank of `ranks` reports `plan`.
  void ReportAll(StepWindow& window, const v1::StepPlan& plan,
                 const std::vector<int>& ranks) {
    for (int r : ranks) {
      ASSERT_TRUE(window.RecordTimings(ReportOf(plan, r)).ok()) << r;
    }
  }

  FakeClock clock_;
  std::vector<int64_t> streams_;
};

/// Its stream, told to end, ends with UNAVAILABLE (the agent registers
/// again) saying why.
void ExpectEndedAsFailed(const StreamNext& next, int64_t step) {
  EXPECT_EQ(next.kind, StreamNext::Kind::kEnd);
  EXPECT_TRUE(absl::IsUnavailable(next.end_status)) << next.end_status;
  EXPECT_THAT(next.end_status.message(),
              HasSubstr(absl::StrCat("did not report step ", step)));
  EXPECT_THAT(next.end_status.message(), HasSubstr("register again"));
}

TEST_F(StepWindowFailureTest, ASlowRankOrALongStepIsNoFailure) {
  std::unique_ptr<StepWindow> window = Make(RankFailurePolicy::kHold);
  std::vector<v1::StepPlan> plans = PlanAll(*window);
  ReportAll(*window, plans[0], {0, 1, 2});
  clock_.Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_FALSE(window->CheckLiveness().has_value());
  ReportAll(*window, plans[0], {3});  // Slow, but in time.
  // Step 1 takes long for everyone: no rank is behind the others.
  clock_.Advance(10 * kTimeout);
  EXPECT_FALSE(window->CheckLiveness().has_value());
  EXPECT_EQ(NextOf(*window, 3).kind, StreamNext::Kind::kSend);
}

TEST_F(StepWindowFailureTest, HoldFailsAHungRankAndEndsItsStream) {
  std::unique_ptr<StepWindow> window = Make(RankFailurePolicy::kHold);
  std::vector<v1::StepPlan> plans = PlanAll(*window);
  ReportAll(*window, plans[0], {0, 1, 2});
  clock_.Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_FALSE(window->CheckLiveness().has_value());
  clock_.Advance(absl::Milliseconds(1));
  std::optional<RankFailureEvent> failed = window->CheckLiveness();
  ASSERT_TRUE(failed.has_value());
  EXPECT_THAT(failed->failed, ElementsAre(3));
  ASSERT_EQ(failed->reasons.size(), 1u);
  EXPECT_THAT(failed->reasons[0], HasSubstr("did not report step 0"));
  EXPECT_TRUE(failed->holding);
  EXPECT_EQ(failed->live_ranks, 3);
  ExpectEndedAsFailed(NextOf(*window, 3), 0);
  window->CloseStream(streams_[3]);
  v1::StatusResponse status;
  window->FillStatus(&status);
  EXPECT_TRUE(status.holding());
  EXPECT_TRUE(status.ranks(3).failed());
  EXPECT_FALSE(status.ranks(3).connected());
  EXPECT_EQ(status.rank_failures(), 1);

  // Its stale report, sent as it wakes up, is taken as for any failed rank
  // under hold: the step completes, the hold goes on until it registers.
  ASSERT_TRUE(window->RecordTimings(ReportOf(plans[0], 3)).ok());
  EXPECT_FALSE(window->NextStepToPlan().has_value());
  std::optional<RankFailureEvent> back;
  absl::StatusOr<v1::RegisterResponse> hello =
      window->Register(Hello(3), &back);
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(hello->next_step(), 1);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->returned, 3);
  EXPECT_FALSE(back->holding);
  EXPECT_TRUE(window->NextStepToPlan().has_value());
}

TEST_F(StepWindowFailureTest, ShrinkLeavesAHungRankOutOfANewEpoch) {
  std::unique_ptr<StepWindow> window = Make(RankFailurePolicy::kShrink);
  std::vector<v1::StepPlan> plans = PlanAll(*window);  // Steps 0..2.
  ReportAll(*window, plans[0], {0, 1, 3});
  clock_.Advance(kTimeout);
  std::optional<RankFailureEvent> e = window->CheckLiveness();
  ASSERT_TRUE(e.has_value());
  EXPECT_THAT(e->failed, ElementsAre(2));
  EXPECT_EQ(e->epoch, 1);
  EXPECT_THAT(e->members, ElementsAre(0, 1, 3));
  EXPECT_EQ(e->abandoned_from, 0);
  EXPECT_EQ(e->abandoned_to, 3);
  ExpectEndedAsFailed(NextOf(*window, 2), 0);
  window->CloseStream(streams_[2]);

  // Its stale report is of an abandoned step: taken and dropped.
  absl::StatusOr<RecordedTimings> late =
      window->RecordTimings(ReportOf(plans[0], 2));
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_TRUE(late->discarded);
  // A negative epoch is not stale but malformed: refused by name, by both
  // the durable check and the record.
  v1::TimingReport malformed = ReportOf(plans[1], 2);
  malformed.set_epoch(-1);
  for (const absl::Status& refused :
       {window->CheckTimings(malformed).status(),
        window->RecordTimings(malformed).status()}) {
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
    EXPECT_THAT(refused.message(), HasSubstr("epoch -1 is negative"));
  }
  std::vector<v1::StepPlan> shrunk = PlanAll(*window);  // Steps 3..5.
  ASSERT_EQ(shrunk.size(), 3u);
  EXPECT_EQ(Sorted(shrunk[0]), Sorted(plans[0]));
  // The abandoned steps are owed by no one: the others go on.
  ReportAll(*window, shrunk[0], {0, 1});
  clock_.Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_FALSE(window->CheckLiveness().has_value());

  // Back, it joins the next epoch at the next step planned.
  std::optional<RankFailureEvent> back;
  absl::StatusOr<v1::RegisterResponse> hello =
      window->Register(Hello(2), &back);
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(hello->next_step(), 6);
  ASSERT_TRUE(back.has_value());
  EXPECT_THAT(back->members, ElementsAre(0, 1, 2, 3));
}

TEST_F(StepWindowFailureTest, AShrinkForAHungRankIsDurableFirst) {
  std::unique_ptr<StepWindow> window = Make(RankFailurePolicy::kShrink);
  std::vector<v1::StepPlan> plans = PlanAll(*window);
  ReportAll(*window, plans[0], {0, 2, 3});
  clock_.Advance(kTimeout);
  std::vector<EpochChange> kept;
  std::optional<RankFailureEvent> e =
      window->CheckLiveness([&](const EpochChange& change) {
        kept.push_back(change);
        return absl::DataLossError("disk full");
      });
  ASSERT_TRUE(e.has_value());
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_THAT(kept[0].members, ElementsAre(0, 2, 3));
  // Not kept: the world stays as it was and the window drains.
  v1::StatusResponse status;
  window->FillStatus(&status);
  EXPECT_EQ(status.epoch(), 0);
  EXPECT_THAT(status.planner_error(), HasSubstr("disk full"));
}

TEST_F(StepWindowFailureTest, HoldPlansNothingUntilTheRankReturns) {
  std::unique_ptr<StepWindow> window = Make(RankFailurePolicy::kHold);
  std::vector<v1::StepPlan> plans = PlanAll(*window);
  ASSERT_EQ(plans.size(), 3u);
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(window->RecordTimings(ReportOf(plans[0], r)).ok());
  }
  EXPECT_EQ(PlanAll(*window).size(), 1u);  // Step 3.

  window->CloseStream(streams_[2]);
  clock_.Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_FALSE(window->CheckLiveness().has_value());
  clock_.Advance(absl::Milliseconds(1));
  std::optional<RankFailureEvent> failed = window->CheckLiveness();
  ASSERT_TRUE(failed.has_value());
  EXPECT_THAT(failed->failed, ElementsAre(2));
  EXPECT_EQ(failed->policy, "hold");
  EXPECT_TRUE(failed->holding);
  EXPECT_EQ(failed->live_ranks, 3);

  // The others report step 1: it cannot complete, nothing is planned.
  for (int r : {0, 1, 3}) {
    ASSERT_TRUE(window->RecordTimings(ReportOf(plans[1], r)).ok());
  }
  EXPECT_FALSE(window->NextStepToPlan().has_value());
  v1::StatusResponse status;
  window->FillStatus(&status);
  EXPECT_TRUE(status.holding());
  EXPECT_EQ(status.live_ranks(), 3);
  EXPECT_EQ(status.rank_failures(), 1);
  EXPECT_EQ(status.on_rank_failure(), "hold");
  EXPECT_TRUE(status.ranks(2).failed());
  EXPECT_EQ(status.completed_steps(), 1);

  // It returns where it left off; planning goes on once it reports.
  std::optional<RankFailureEvent> back;
  absl::StatusOr<v1::RegisterResponse> hello =
      window->Register(Hello(2), &back);
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(hello->next_step(), 1);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->returned, 2);
  EXPECT_FALSE(back->holding);
  ASSERT_TRUE(window->RecordTimings(ReportOf(plans[1], 2)).ok());
  EXPECT_EQ(PlanAll(*window).size(), 1u);  // Step 4.
  window->FillStatus(&status);
  EXPECT_FALSE(status.holding());
  EXPECT_EQ(status.epoch(), 0);
}

TEST_F(StepWindowFailureTest, ShrinkAbandonsAndReservesTheOpenSteps) {
  std::unique_ptr<StepWindow> window = Make(RankFailurePolicy::kShrink);
  std::vector<v1::StepPlan> plans = PlanAll(*window);  // Steps 0..2.
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(window->RecordTimings(ReportOf(plans[0], r)).ok());
  }
  std::vector<v1::StepPlan> more = PlanAll(*window);  // Step 3.
  ASSERT_EQ(more.size(), 1u);
  // Step 1 reported by all but rank 1, which dies.
  for (int r : {0, 2, 3}) {
    ASSERT_TRUE(window->RecordTimings(ReportOf(plans[1], r)).ok());
  }
  Lose(*window, 1);
  std::optional<RankFailureEvent> e = window->CheckLiveness();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->policy, "shrink");
  EXPECT_EQ(e->epoch, 1);
  EXPECT_THAT(e->members, ElementsAre(0, 2, 3));
  EXPECT_EQ(e->abandoned_from, 1);
  EXPECT_EQ(e->abandoned_to, 4);
  EXPECT_EQ(e->reserved_samples, 3 * 8);

  // A late report of an abandoned step is taken and dropped.
  absl::StatusOr<RecordedTimings> late =
      window->RecordTimings(ReportOf(plans[2], 0));
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_TRUE(late->discarded);
  absl::StatusOr<bool> check = window->CheckTimings(ReportOf(plans[2], 3));
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_FALSE(*check);
  // So is a stale one: step 0 (completed in epoch 0) reported again by the
  // failed rank, whose first answer was lost while it hung.
  const v1::TimingReport stale = ReportOf(plans[0], 1);
  check = window->CheckTimings(stale);
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_FALSE(*check);
  late = window->RecordTimings(stale);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_TRUE(late->discarded);
  // A report from an epoch not yet begun is refused, naming it.
  v1::TimingReport ahead = ReportOf(plans[0], 1);
  ahead.set_epoch(2);
  const absl::Status refused = window->RecordTimings(ahead).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("epoch 2 is not the current epoch 1"));

  // Steps 4..6 re-serve steps 1..3's samples for the three ranks.
  std::vector<v1::StepPlan> again = PlanAll(*window);
  ASSERT_EQ(again.size(), 3u);
  const std::vector<v1::StepPlan> abandoned = {plans[1], plans[2], more[0]};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(again[i].step(), 4 + i);
    EXPECT_EQ(again[i].epoch(), 1);
    EXPECT_EQ(Sorted(again[i]), Sorted(abandoned[i]))
        << "step " << again[i].step();
  }
  // The dead rank is not sent them and cannot report them; the others
  // complete them alone.
  EXPECT_THAT(window->RecordTimings(ReportOf(again[0], 1)).status().message(),
              HasSubstr("not in the world of step 4"));
  for (int r : {0, 2, 3}) {
    ASSERT_TRUE(window->RecordTimings(ReportOf(again[0], r)).ok());
  }
  v1::StatusResponse status;
  window->FillStatus(&status);
  EXPECT_EQ(status.completed_steps(), 2);  // Steps 0 and 4.
  EXPECT_EQ(status.abandoned_steps(), 3);
  EXPECT_EQ(status.epoch(), 1);
  EXPECT_EQ(status.epoch_world_size(), 3);
  EXPECT_FALSE(status.ranks(1).member());
  EXPECT_FALSE(status.holding());
}

TEST_F(StepWindowFailureTest, AReturningRankJoinsTheNextEpochAtAStepBoundary) {
  std::unique_ptr<StepWindow> window = Make(RankFailurePolicy::kShrink);
  PlanAll(*window);  // Steps 0..2, abandoned below.
  Lose(*window, 3);
  ASSERT_TRUE(window->CheckLiveness().has_value());
  std::vector<v1::StepPlan> shrunk = PlanAll(*window);  // Steps 3..5.
  ASSERT_EQ(shrunk.size(), 3u);

  std::optional<RankFailureEvent> back;
  absl::StatusOr<v1::RegisterResponse> hello =
      window->Register(Hello(3), &back);
  ASSERT_TRUE(hello.ok());
  ASSERT_TRUE(back.has_value());
  EXPECT_THAT(back->members, ElementsAre(0, 1, 2, 3));
  // Nothing planned is its: it resumes at the next step planned.
  EXPECT_EQ(hello->next_step(), 6);
  for (int r : {0, 1, 2}) {
    ASSERT_TRUE(window->RecordTimings(ReportOf(shrunk[0], r)).ok());
  }
  std::vector<v1::StepPlan> grown = PlanAll(*window);
  ASSERT_EQ(grown.size(), 1u);
  EXPECT_EQ(grown[0].step(), 6);
  EXPECT_EQ(grown[0].epoch(), 2);
  EXPECT_EQ(grown[0].tasks_size(), kWorld);
  // Steps of epoch 1 still complete with their own world.
  for (int r : {0, 1, 2}) {
    ASSERT_TRUE(window->RecordTimings(ReportOf(shrunk[1], r)).ok());
  }
  v1::StatusResponse status;
  window->FillStatus(&status);
  EXPECT_EQ(status.completed_steps(), 2);
  EXPECT_EQ(status.epoch(), 2);
  EXPECT_EQ(status.epoch_world_size(), kWorld);
  EXPECT_TRUE(status.ranks(3).member());
}

TEST_F(StepWindowFailureTest, ShrinkDrainsOnlyOnceTheReservedStepsAreDone) {
  std::unique_ptr<StepWindow> window =
      Make(RankFailurePolicy::kShrink, /*max_steps=*/2);
  std::vector<v1::StepPlan> plans = PlanAll(*window);
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_FALSE(window->NextStepToPlan().has_value());
  Lose(*window, 0);
  ASSERT_TRUE(window->CheckLiveness().has_value());
  // max_steps counts the job's steps: the two abandoned ones come again.
  std::vector<v1::StepPlan> again = PlanAll(*window);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_FALSE(window->NextStepToPlan().has_value());
}

TEST_F(StepWindowFailureTest, ShrinkRefusesAgentsThatCannotFollowIt) {
  std::unique_ptr<StepWindow> window = Make(RankFailurePolicy::kShrink);
  v1::RegisterRequest fixed = Hello(0);
  fixed.set_fixed_world(true);
  const absl::Status refused = window->Register(fixed).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("--on_rank_failure=hold"));
  std::unique_ptr<StepWindow> hold = Make(RankFailurePolicy::kHold);
  EXPECT_TRUE(hold->Register(fixed).ok());
}

class StepWindowRestartTest : public StepWindowFailureTest {
 protected:
  /// The first incarnation plans what it can and hears step 0 from
  /// `reported`; it crashes, and a long outage later a second one restores
  /// its steps and replays its reports (no rank registered yet).
  std::unique_ptr<StepWindow> RestartAfterStep0(
      const std::vector<int>& reported) {
    std::unique_ptr<StepWindow> before = Make(RankFailurePolicy::kShrink);
    RestoredWindow restored;
    restored.members = {0, 1, 2, 3};
    const std::vector<v1::StepPlan> plans = PlanAll(*before);
    for (const v1::StepPlan& plan : plans) {
      restored.steps.push_back({plan, {0, 1, 2, 3}, -1});
    }
    clock_.Advance(100 * kTimeout);
    auto after =
        std::make_unique<StepWindow>(Options(RankFailurePolicy::kShrink));
    EXPECT_TRUE(after->Restore(std::move(restored)).ok());
    for (int r : reported) {
      EXPECT_TRUE(after->ReplayTimings(ReportOf(plans[0], r)).ok()) << r;
    }
    return after;
  }

  void RegisterAndStream(StepWindow& window, const std::vector<int>& ranks) {
    for (int r : ranks) {
      ASSERT_TRUE(window.Register(Hello(r)).ok());
      ASSERT_TRUE(window.OpenStream(r, "sess", 0, [] {}).ok());
    }
  }
};

TEST_F(StepWindowRestartTest, AMemberThatDoesNotRegisterAgainFails) {
  std::unique_ptr<StepWindow> window = RestartAfterStep0({0, 1, 2, 3});
  clock_.Advance(kTimeout / 2);
  RegisterAndStream(*window, {0, 1, 2});
  clock_.Advance(kTimeout / 2 - absl::Milliseconds(1));
  EXPECT_FALSE(window->CheckLiveness().has_value());
  clock_.Advance(absl::Milliseconds(1));
  std::optional<RankFailureEvent> e = window->CheckLiveness();
  ASSERT_TRUE(e.has_value());
  EXPECT_THAT(e->failed, ElementsAre(3));
  EXPECT_THAT(e->reasons[0], HasSubstr("did not register within 10s"));
  EXPECT_EQ(e->epoch, 1);
  EXPECT_THAT(e->members, ElementsAre(0, 1, 2));
}

TEST_F(StepWindowRestartTest, AReplayedStepIsOwedFromTheRankRegistering) {
  // Step 0 was reported by 0..2 a hundred timeouts ago: that time does not
  // count against rank 3, which owes it from its registration.
  std::unique_ptr<StepWindow> window = RestartAfterStep0({0, 1, 2});
  clock_.Advance(kTimeout / 2);
  RegisterAndStream(*window, {0, 1, 2, 3});
  clock_.Advance(kTimeout - absl::Milliseconds(1));
  EXPECT_FALSE(window->CheckLiveness().has_value());
  clock_.Advance(absl::Milliseconds(1));
  std::optional<RankFailureEvent> e = window->CheckLiveness();
  ASSERT_TRUE(e.has_value());
  EXPECT_THAT(e->failed, ElementsAre(3));
  EXPECT_THAT(e->reasons[0], HasSubstr("did not report step 0"));
}

}  // namespace
}  // namespace dcp
