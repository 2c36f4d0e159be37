// A dead rank costs no sample: the real dcp-scheduler with a short
// --rank_timeout and four real dcp-agent processes in simulate mode (each
// task takes a few milliseconds and is logged and reported as execute mode
// does, without training: the scheduler cannot tell). One agent is
// SIGKILLed mid-run.
//   - hold: the scheduler declares the rank failed (its log, dcp-ctl), plans
//     nothing new and no step completes while the others ran all they had;
//     the agent is started again, the job runs to its end.
//   - shrink: the scheduler moves to epoch 1 on the three others, abandons
//     the steps not completed and plans their samples again for the smaller
//     world; the job ends on the three.
//   - an agent killed and started again before the timeout: no failure is
//     declared and it rejoins at a step boundary.
//   - hung (SIGSTOPped, its stream open) under hold: declared failed once
//     the others reported a step it did not, for the timeout; its stream is
//     ended, and woken (SIGCONT) it registers again and the job ends.
//   - hung under shrink: failed the same way, the world shrinks and the
//     three others train on; woken, the rank finishes the step it was in
//     (an abandoned one: its report is discarded and counts for nothing),
//     finds its stream ended, registers again and is admitted back at a
//     step boundary (a grow, epoch 2 on all four); the job ends there.
//
// What "trained exactly once" means: a step is trained when every rank of
// its world reported it (what a real job's gradient sync needs). A rank
// that dies after logging a step but before reporting it, and runs it
// again after its restart, ran the same tasks twice, not the samples: the
// step counts once. Steps a shrink abandoned were never completed (the
// dead rank never reported them), and their samples are those of the
// steps that re-serve them. So the check is, from the agents' logs and the
// scheduler's step builder over the same trace: the tasks of every trained
// step (de-duplicated by task) hold exactly the samples the builder drew
// for the job step it trains, none missing, none twice.

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"
#include "tests/elastic_job.h"
#include "tests/execution_log.h"
#include "tests/job_inputs.h"

namespace dcp {
namespace {

using testing_process::Binary;
using testing_process::CtlStatus;
using testing_process::ElasticJob;
using testing_process::ElasticJobTest;
using testing_process::JsonNumber;
using testing_process::ReadFile;
using testing_process::RunToEnd;
using testing_process::StartSchedulerIncarnation;
using testing_process::TmpPath;
using Stop = ElasticJobTest::Stop;
using Line = testing_process::ExecutionLine;

constexpr int kWorld = 4;
constexpr int kSteps = 24;
/// The rank the tests kill, and the step some rank has run before.
constexpr int kVictim = 1;
constexpr int64_t kKillAfter = 3;
/// The world after `kVictim` failed.
constexpr char kShrunk[] = "[0,2,3]";

/// The job of `steps` steps.
ElasticJob SimulatedJob(int steps) {
  ElasticJob job = testing_process::FourRankJob(steps);
  job.agent_flags = testing_process::SimulateModeFlags();
  return job;
}

class RankFailureTest : public ElasticJobTest {
 protected:
  explicit RankFailureTest(int steps = kSteps)
      : ElasticJobTest(SimulatedJob(steps)) {}

  void KillAgent(int rank) { testing_process::KillAndReap(agents_[rank]); }

  std::pair<int64_t, int64_t> KillVictimAndAwaitShrink() {
    return StopAndAwaitShrink(kVictim, kKillAfter, Stop::kKill, 1, kShrunk);
  }
  void ExpectShrunkJobTrainedOnce(int64_t from, int64_t to);
};

TEST_F(RankFailureTest, HoldWaitsForTheRankAndLosesNothing) {
  StartJob({"--rank_timeout=10s", "--on_rank_failure=hold"});
  ASSERT_TRUE(AwaitOutput([this] { return Ran(kVictim, kKillAfter); }))
      << reaper_.Describe(4000);
  KillAgent(kVictim);
  const std::string failed = AwaitSchedulerLine(
      absl::StrCat("rank failure: ranks [", kVictim, "] failed"));
  ASSERT_FALSE(failed.empty()) << reaper_.Describe(4000);
  EXPECT_TRUE(absl::StrContains(failed, "holding")) << failed;
  std::fprintf(stderr, "%s\n", failed.c_str());

  nlohmann::json held = CtlStatus("ctl-held", address_);
  EXPECT_TRUE(held.value("holding", false));
  EXPECT_EQ(JsonNumber(held["live_ranks"]), kWorld - 1);
  EXPECT_EQ(JsonNumber(held["rank_failures"]), 1);
  EXPECT_EQ(held.value("on_rank_failure", ""), "hold");
  EXPECT_TRUE(held["ranks"][kVictim].value("failed", false));
  const double planned = JsonNumber(held["planned_steps"]);
  const double completed = JsonNumber(held["completed_steps"]);
  // The others run every step they were sent, then wait: nothing more is
  // planned, and no step completes without the failed rank.
  ASSERT_TRUE(AwaitOutput([&] {
    for (int r = 0; r < kWorld; ++r) {
      if (r == kVictim) continue;
      const std::vector<int64_t> steps = LoggedSteps(r);
      if (steps.empty() || steps.back() != planned - 1) return false;
    }
    return true;
  })) << reaper_.Describe(4000);
  const nlohmann::json still = CtlStatus("ctl-still", address_);
  EXPECT_EQ(JsonNumber(still["planned_steps"]), planned);
  EXPECT_EQ(JsonNumber(still["completed_steps"]), completed);
  EXPECT_LT(completed, planned);
  const std::string table =
      RunToEnd("ctl-table", {Binary("scheduler/server/dcp-ctl"),
                             "--scheduler=" + address_, "status"});
  EXPECT_TRUE(absl::StrContains(table, "HOLDING")) << table;
  EXPECT_TRUE(absl::StrContains(table, "FAILED")) << table;

  agents_[kVictim] = StartAgent(kVictim, "-again");
  EXPECT_FALSE(
      AwaitSchedulerLine(absl::StrCat("rank ", kVictim, " returned")).empty());
  ExpectAgentsFinish();
  const nlohmann::json done = CtlStatus("ctl-done", address_);
  EXPECT_EQ(JsonNumber(done["completed_steps"]), kSteps);
  EXPECT_FALSE(done.value("holding", false));
  EXPECT_EQ(JsonNumber(done["live_ranks"]), kWorld);
  ExpectEveryStepAndSampleOnce();
}

/// After a shrink that abandoned steps [from, to) and a finished job: the
/// scheduler's status says so, and every sample of every job step was
/// trained exactly once, the abandoned ones by the steps re-serving them.
void RankFailureTest::ExpectShrunkJobTrainedOnce(int64_t from, int64_t to) {
  const int64_t abandoned = to - from;
  const nlohmann::json done = CtlStatus("ctl-done", address_);
  EXPECT_EQ(JsonNumber(done["epoch"]), 1);
  EXPECT_EQ(JsonNumber(done["epoch_world_size"]), kWorld - 1);
  EXPECT_EQ(JsonNumber(done["completed_steps"]), kSteps);
  EXPECT_EQ(JsonNumber(done["planned_steps"]), kSteps + abandoned);
  EXPECT_EQ(JsonNumber(done["abandoned_steps"]), abandoned);
  EXPECT_TRUE(done["ranks"][kVictim].value("failed", false));
  EXPECT_FALSE(done["ranks"][kVictim].value("member", false));

  // The new world's steps are epoch 1's and leave the dead rank out; no
  // step number is used twice.
  for (int r = 0; r < kWorld; ++r) {
    for (const Line& l : Logged(r)) {
      EXPECT_EQ(l.epoch, l.step < to ? 0 : 1)
          << "rank " << r << " step " << l.step;
      if (r == kVictim) {
        EXPECT_LT(l.step, to);
      }
      if (l.kind == "task" && l.step >= to) {
        EXPECT_EQ(std::count(l.group.begin(), l.group.end(), kVictim), 0);
      }
    }
  }
  std::set<int64_t> skipped;
  for (int64_t s = from; s < to; ++s) skipped.insert(s);
  testing_process::ExpectEachJobStepOnce(
      testing_process::SamplesByStep(Tasks(skipped)), JobSteps(), {{from, to}});
}

TEST_F(RankFailureTest, ShrinkFinishesOnTheRestAndLosesNothing) {
  StartJob({"--rank_timeout=10s", "--on_rank_failure=shrink"});
  const auto [from, to] = KillVictimAndAwaitShrink();
  ASSERT_GE(from, 0);
  ExpectAgentsFinish();
  ExpectShrunkJobTrainedOnce(from, to);
}

TEST_F(RankFailureTest, AShrinkSurvivesASchedulerRestart) {
  const std::vector<std::string> flags =
      SchedulerFlags({"--rank_timeout=10s", "--on_rank_failure=shrink",
                      "--state_dir=" + TmpPath(prefix() + "-state")});
  const int port =
      StartSchedulerIncarnation(prefix() + "-scheduler", flags, 0, scheduler_);
  ASSERT_GT(port, 0);
  address_ = absl::StrCat("127.0.0.1:", port);
  for (int r = 0; r < kWorld; ++r) agents_.push_back(StartAgent(r, ""));
  const auto [from, to] = KillVictimAndAwaitShrink();
  ASSERT_GE(from, 0);

  // Right after the shrink the scheduler dies too, and comes back on its
  // state: the same epoch, world and abandoned steps.
  testing_process::KillAndReap(scheduler_[0]);
  ASSERT_GT(StartSchedulerIncarnation(prefix() + "-scheduler-again", flags,
                                      port, scheduler_),
            0);
  const nlohmann::json resumed = CtlStatus("ctl-resumed", address_);
  EXPECT_EQ(JsonNumber(resumed["epoch"]), 1);
  EXPECT_EQ(JsonNumber(resumed["epoch_world_size"]), kWorld - 1);
  EXPECT_EQ(JsonNumber(resumed["abandoned_steps"]), to - from);
  EXPECT_FALSE(resumed["ranks"][kVictim].value("member", true));
  const std::string log = ReadFile(scheduler_[1].err_path);
  EXPECT_TRUE(absl::StrContains(log, "resum")) << log;

  ExpectAgentsFinish();
  ExpectShrunkJobTrainedOnce(from, to);
}

TEST_F(RankFailureTest, AHungAgentIsFailedUnderHoldAndRejoinsWhenItWakes) {
  StartJob({"--rank_timeout=10s", "--on_rank_failure=hold"});
  ASSERT_TRUE(AwaitOutput([this] { return Ran(kVictim, kKillAfter); }))
      << reaper_.Describe(4000);
  // Stopped, not dead: its connection and plan stream stay open.
  ASSERT_EQ(kill(agents_[kVictim].pid, SIGSTOP), 0);
  const std::string failed = AwaitSchedulerLine(
      absl::StrCat("rank failure: ranks [", kVictim, "] failed"));
  const nlohmann::json held = CtlStatus("ctl-hung", address_);
  ASSERT_EQ(kill(agents_[kVictim].pid, SIGCONT), 0);
  ASSERT_FALSE(failed.empty()) << reaper_.Describe(4000);
  std::fprintf(stderr, "%s\n", failed.c_str());
  EXPECT_TRUE(absl::StrContains(
      failed, absl::StrCat("rank ", kVictim, " did not report step ")))
      << failed;
  EXPECT_TRUE(absl::StrContains(failed, "holding")) << failed;
  EXPECT_TRUE(held.value("holding", false));
  EXPECT_EQ(JsonNumber(held["rank_failures"]), 1);
  EXPECT_TRUE(held["ranks"][kVictim].value("failed", false));
  EXPECT_FALSE(held["ranks"][kVictim].value("connected", true));

  // Woken up, it finds its stream ended, registers again and is admitted
  // at its first unreported step; the job runs to its end.
  EXPECT_FALSE(
      AwaitSchedulerLine(absl::StrCat("rank ", kVictim, " returned")).empty())
      << reaper_.Describe(4000);
  ExpectAgentsFinish();
  const nlohmann::json done = CtlStatus("ctl-done", address_);
  EXPECT_EQ(JsonNumber(done["completed_steps"]), kSteps);
  EXPECT_EQ(JsonNumber(done["rank_failures"]), 1);
  EXPECT_EQ(JsonNumber(done["live_ranks"]), kWorld);
  ExpectEveryStepAndSampleOnce();
}

TEST_F(RankFailureTest, AnAgentBackBeforeTheTimeoutRejoinsAtAStepBoundary) {
  StartJob({"--rank_timeout=60s", "--on_rank_failure=hold"});
  ASSERT_TRUE(AwaitOutput([this] { return Ran(kVictim, kKillAfter); }))
      << reaper_.Describe(4000);
  KillAgent(kVictim);
  const std::vector<int64_t> before = LoggedSteps(kVictim);
  agents_[kVictim] = StartAgent(kVictim, "-again");
  ExpectAgentsFinish();

  const std::string log = ReadFile(scheduler_[0].err_path);
  EXPECT_FALSE(absl::StrContains(log, "rank failure")) << log;
  const nlohmann::json done = CtlStatus("ctl-done", address_);
  EXPECT_EQ(JsonNumber(done["completed_steps"]), kSteps);
  EXPECT_EQ(JsonNumber(done["rank_failures"]), 0);
  // It resumed at the first step it had not reported: at most one past the
  // last it ran, and it ran every step from there on, in order.
  const std::string again = ReadFile(agents_[kVictim].err_path);
  const size_t at = again.find("resuming at step ");
  ASSERT_NE(at, std::string::npos) << again;
  int64_t resumed = -1;
  ASSERT_TRUE(absl::SimpleAtoi(
      again.substr(at + 17, again.find(',', at) - at - 17), &resumed))
      << again;
  const int64_t last_before = before.empty() ? -1 : before.back();
  EXPECT_LE(resumed, last_before + 1);
  EXPECT_GE(resumed, 0);
  const std::vector<int64_t> all = LoggedSteps(kVictim);
  ASSERT_GE(all.size(), before.size());
  std::vector<int64_t> after(all.begin() + before.size(), all.end());
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after.front(), resumed);
  for (size_t i = 1; i < after.size(); ++i) {
    EXPECT_EQ(after[i], after[i - 1] + 1);
  }
  ExpectEveryStepAndSampleOnce();
}

/// A job long enough that the three survivors are still at it when the
/// woken rank is back: after a shrink they run a step in a few
/// milliseconds, and the woken rank first runs out the abandoned steps it
/// holds (some 200 ms in all on an idle machine; the rest of a job of
/// kSteps was planned by then).
class LongJobTest : public RankFailureTest {
 protected:
  LongJobTest() : RankFailureTest(/*steps=*/240) {}
};

TEST_F(LongJobTest, AHungAgentIsShrunkOutAndGrowsBackWhenItWakes) {
  const int64_t steps = job_.shape.max_steps;
  StartJob({"--rank_timeout=10s", "--on_rank_failure=shrink"});
  const auto [from, to] =
      StopAndAwaitShrink(kVictim, kKillAfter, Stop::kHang, 1, kShrunk);
  const nlohmann::json shrunk = CtlStatus("ctl-hung", address_);
  const size_t lines_before = Logged(kVictim).size();
  ASSERT_EQ(kill(agents_[kVictim].pid, SIGCONT), 0);
  ASSERT_GE(from, 0) << reaper_.Describe(4000);
  EXPECT_EQ(JsonNumber(shrunk["epoch"]), 1);
  EXPECT_TRUE(shrunk["ranks"][kVictim].value("failed", false));
  EXPECT_FALSE(shrunk["ranks"][kVictim].value("connected", true));
  EXPECT_TRUE(absl::StrContains(
      ReadFile(scheduler_[0].err_path),
      absl::StrCat("rank ", kVictim, " did not report step ")));

  // Woken, it registers again and the next step planned takes it back.
  EXPECT_FALSE(
      AwaitSchedulerLine(absl::StrCat("rank ", kVictim, " returned")).empty())
      << reaper_.Describe(4000);
  ExpectAgentsFinish();
  const nlohmann::json done = CtlStatus("ctl-done", address_);
  EXPECT_EQ(JsonNumber(done["epoch"]), 2);
  EXPECT_EQ(JsonNumber(done["epoch_world_size"]), kWorld);
  EXPECT_EQ(JsonNumber(done["completed_steps"]), steps);
  EXPECT_EQ(JsonNumber(done["planned_steps"]), steps + (to - from));
  EXPECT_EQ(JsonNumber(done["abandoned_steps"]), to - from);
  EXPECT_EQ(JsonNumber(done["rank_failures"]), 1);
  EXPECT_TRUE(done["ranks"][kVictim].value("member", false));

  // What it ran after waking: the rest of an abandoned epoch-0 step at
  // most (its report is discarded), then epoch 2 only, from the grow on.
  const std::vector<Line> victim = Logged(kVictim);
  int64_t grow = -1;
  for (size_t i = lines_before; i < victim.size(); ++i) {
    const Line& l = victim[i];
    if (l.epoch == 0) {
      EXPECT_GE(l.step, from);
      EXPECT_LT(l.step, to);
      continue;
    }
    EXPECT_EQ(l.epoch, 2) << "step " << l.step;
    if (grow < 0) grow = l.step;
  }
  ASSERT_GE(grow, to) << "the woken rank trained no step of the grown world";
  // Every rank's lines: epoch 0 before the shrink, 1 on the three up to
  // the grow, 2 on the four from it.
  for (int r = 0; r < kWorld; ++r) {
    for (const Line& l : Logged(r)) {
      const int64_t epoch = l.step < to ? 0 : l.step < grow ? 1 : 2;
      EXPECT_EQ(l.epoch, epoch) << "rank " << r << " step " << l.step;
      if (l.kind == "task" && epoch == 1) {
        EXPECT_EQ(std::count(l.group.begin(), l.group.end(), kVictim), 0);
      }
    }
  }
  std::set<int64_t> skipped;
  for (int64_t s = from; s < to; ++s) skipped.insert(s);
  testing_process::ExpectEachJobStepOnce(
      testing_process::SamplesByStep(Tasks(skipped)), JobSteps(), {{from, to}});
}

}  // namespace
}  // namespace dcp
