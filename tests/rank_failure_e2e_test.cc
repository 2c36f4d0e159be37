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
#include <sys/wait.h>

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
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scheduler/planner/plan.h"
#include "scheduler/planner/step_builder.h"
#include "tests/child_process.h"
#include "tests/execution_log.h"
#include "tests/job_inputs.h"

namespace dcp {
namespace {

using testing_process::Binary;
using testing_process::Child;
using testing_process::ChildReaper;
using testing_process::CtlStatus;
using testing_process::AbandonedRange;
using testing_process::JsonNumber;
using testing_process::LcgTrace;
using testing_process::ParseTrace;
using testing_process::ReadFile;
using testing_process::RunToEnd;
using testing_process::SkewedLength;
using testing_process::Spawn;
using testing_process::StartSchedulerIncarnation;
using testing_process::StopScheduler;
using testing_process::TmpPath;
using testing_process::WriteFile;

constexpr int kWorld = 4;
constexpr int kGpusPerNode = 2;
constexpr int64_t kWindow = 32768;
constexpr int64_t kTokensPerStep = 65536;
constexpr uint64_t kJobSeed = 5;
constexpr int kSteps = 24;
/// The rank the tests kill, and the step some rank has run before.
constexpr int kVictim = 1;
constexpr int64_t kKillAfter = 3;
/// How long any one thing the test waits for may take.
constexpr absl::Duration kPatience = absl::Seconds(60);

using Line = testing_process::ExecutionLine;

class RankFailureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Each test's files apart: the tests share TEST_TMPDIR.
    prefix_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    trace_ = LcgTrace(300, 17, 100, SkewedLength);
    ASSERT_TRUE(WriteFile(TmpPath("trace.txt"), trace_));
    ASSERT_TRUE(WriteFile(TmpPath("model.json"),
                          testing_process::TinyModelJson("tiny-failure")));
  }

  /// Starts the scheduler with `extra` flags, then the agents.
  void StartJob(const std::vector<std::string>& extra) {
    const int port =
        StartSchedulerIncarnation(prefix_ + "-scheduler", Flags(extra), 0,
                                  scheduler_);
    ASSERT_GT(port, 0);
    address_ = absl::StrCat("127.0.0.1:", port);
    for (int r = 0; r < kWorld; ++r) agents_.push_back(StartAgent(r, ""));
  }

  /// The job's scheduler flags, then `extra`.
  std::vector<std::string> Flags(const std::vector<std::string>& extra) const {
    std::vector<std::string> flags = {
        "--lengths=" + TmpPath("trace.txt"),
        "--model_config=" + TmpPath("model.json"),
        absl::StrCat("--world_size=", kWorld),
        absl::StrCat("--gpus_per_node=", kGpusPerNode),
        absl::StrCat("--window=", kWindow),
        absl::StrCat("--tokens_per_step=", kTokensPerStep),
        absl::StrCat("--seed=", kJobSeed),
        absl::StrCat("--max_steps=", kSteps),
        "--lookahead_steps=4",
        "--metrics_listen="};
    flags.insert(flags.end(), extra.begin(), extra.end());
    return flags;
  }

  Child StartAgent(int rank, const std::string& suffix) {
    return Spawn(absl::StrCat(prefix_, "-agent-", rank, suffix),
                 {Binary("worker_agent/dcp-agent"), "--scheduler=" + address_,
                  absl::StrCat("--rank=", rank),
                  absl::StrCat("--world_size=", kWorld), "--mode=simulate",
                  "--simulate_task_time=5ms", "--log_file=" + LogPath(rank)});
  }

  static std::string LogPath(int rank) {
    return TmpPath(absl::StrCat(prefix_, "-agent-", rank, ".jsonl"));
  }

  static std::vector<Line> Logged(int rank) {
    return testing_process::ReadExecutionLog(LogPath(rank));
  }

  /// The steps rank `rank` logged, in order (repeats kept).
  static std::vector<int64_t> LoggedSteps(int rank) {
    return testing_process::LoggedSteps(LogPath(rank));
  }

  /// Whether rank `rank` has run step `step` or a later one (so it has
  /// registered and streams).
  static bool Ran(int rank, int64_t step) {
    for (int64_t s : LoggedSteps(rank)) {
      if (s >= step) return true;
    }
    return false;
  }

  /// Waits, on the children's output, until `done()`; false at the
  /// deadline.
  template <typename Done>
  bool AwaitOutput(Done done) {
    const absl::Time deadline = absl::Now() + kPatience;
    testing_process::FileActivity activity({TmpPath("")});
    while (!done()) {
      if (!activity.Await(deadline)) return done();
    }
    return true;
  }

  /// The first line of the scheduler's log that contains `text`; "" if none
  /// came in time.
  std::string AwaitSchedulerLine(const std::string& text) {
    return testing_process::AwaitLineContaining(
        scheduler_[0].err_path, text, TmpPath(""), absl::Now() + kPatience);
  }

  void KillAgent(int rank) { Kill(agents_[rank]); }

  static void Kill(Child& child) {
    ASSERT_EQ(kill(child.pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(child.pid, &status, 0), child.pid);
    child.done = true;
    EXPECT_TRUE(WIFSIGNALED(status));
  }

  /// Waits for the agents still running to exit 0.
  void ExpectAgentsFinish() {
    std::vector<Child> running;
    for (const Child& a : agents_) {
      if (!a.done) running.push_back(a);
    }
    ASSERT_TRUE(testing_process::ExpectAllExit(running, absl::Now() + kPatience,
                                               "the agents did not finish"));
    for (const Child& a : running) {
      EXPECT_EQ(a.exit_code, 0) << a.name << "\n" << ReadFile(a.err_path);
    }
    for (Child& a : agents_) {
      for (const Child& r : running) {
        if (r.pid == a.pid) a = r;
      }
    }
  }

  /// What the builder draws for the job's steps, in order.
  std::vector<std::multiset<int64_t>> JobSteps() const {
    StepBuilderOptions options;
    options.tokens_per_step = kTokensPerStep;
    options.seed = kJobSeed;
    const std::vector<int32_t> lengths = ParseTrace(trace_);
    absl::StatusOr<std::vector<std::vector<int64_t>>> steps =
        BuildSteps(LengthView(lengths, kWindow), options, kSteps);
    EXPECT_TRUE(steps.ok()) << steps.status();
    std::vector<std::multiset<int64_t>> out;
    if (!steps.ok()) return out;
    for (const auto& s : *steps) out.emplace_back(s.begin(), s.end());
    return out;
  }

  /// Per step number: the samples of its tasks as the ranks logged them,
  /// each task once; checks that every rank that logged a task of a step
  /// logged the same samples and group for it, and that each task's group
  /// is the ranks that logged it.
  static std::map<int64_t, std::multiset<int64_t>> TrainedSamples(
      const std::set<int64_t>& skip) {
    struct Seen {
      std::vector<int> group;
      std::vector<int64_t> samples;
      std::set<int> ranks;
    };
    std::map<std::pair<int64_t, int>, Seen> tasks;
    for (int r = 0; r < kWorld; ++r) {
      for (const Line& l : Logged(r)) {
        if (l.kind != "task" || skip.count(l.step) > 0) continue;
        auto [it, fresh] = tasks.try_emplace({l.step, l.task_index});
        if (fresh) {
          it->second.group = l.group;
          it->second.samples = l.samples;
        }
        EXPECT_EQ(it->second.group, l.group) << "step " << l.step;
        EXPECT_EQ(it->second.samples, l.samples) << "step " << l.step;
        it->second.ranks.insert(r);
      }
    }
    std::map<int64_t, std::multiset<int64_t>> ran;
    for (const auto& [key, seen] : tasks) {
      EXPECT_EQ(std::set<int>(seen.group.begin(), seen.group.end()), seen.ranks)
          << "step " << key.first << " task " << key.second;
      ran[key.first].insert(seen.samples.begin(), seen.samples.end());
    }
    return ran;
  }

  /// Each rank's distinct steps are [0, kSteps), in order (a restarted
  /// rank may repeat the step it had not reported, never skip one).
  static void ExpectEveryRankRanEveryStep() {
    for (int r = 0; r < kWorld; ++r) {
      std::vector<int64_t> steps = LoggedSteps(r);
      steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
      std::vector<int64_t> all(kSteps);
      for (int s = 0; s < kSteps; ++s) all[s] = s;
      EXPECT_EQ(steps, all) << "rank " << r;
    }
  }

  void ExpectExactlyOnceWithoutShrink() {
    ExpectEveryRankRanEveryStep();
    const std::vector<std::multiset<int64_t>> expected = JobSteps();
    ASSERT_EQ(expected.size(), static_cast<size_t>(kSteps));
    std::map<int64_t, std::multiset<int64_t>> ran = TrainedSamples({});
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_EQ(ran[s], expected[s])
          << "step " << s << ": a sample skipped or trained twice";
    }
  }

  std::pair<int64_t, int64_t> KillVictimAndAwaitShrink();
  void ExpectShrunkJobTrainedOnce(int64_t from, int64_t to);

  void TearDown() override {
    if (!address_.empty() && !scheduler_.empty() && !scheduler_[0].done) {
      StopScheduler(address_, scheduler_);
    }
  }

  static std::string prefix_;
  std::string trace_;
  std::string address_;
  std::vector<Child> scheduler_;
  std::vector<Child> agents_;
  ChildReaper reaper_{{&scheduler_, &agents_}};
};

std::string RankFailureTest::prefix_;

TEST_F(RankFailureTest, HoldWaitsForTheRankAndLosesNothing) {
  StartJob({"--rank_timeout=2s", "--on_rank_failure=hold"});
  ASSERT_TRUE(AwaitOutput([] { return Ran(kVictim, kKillAfter); }))
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
  ExpectExactlyOnceWithoutShrink();
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
  std::map<int64_t, std::multiset<int64_t>> ran = TrainedSamples(skipped);
  const std::vector<std::multiset<int64_t>> expected = JobSteps();
  ASSERT_EQ(expected.size(), static_cast<size_t>(kSteps));
  // Trained step -> the job step whose samples it trains: the same before
  // the shrink; then the abandoned ones, re-served in order; then the rest.
  std::vector<int64_t> job_step;
  for (int64_t s = 0; s < from; ++s) job_step.push_back(s);
  for (int64_t s = from; s < to; ++s) job_step.push_back(s);
  for (int64_t s = to; s < kSteps; ++s) job_step.push_back(s);
  std::vector<int64_t> trained;
  for (int64_t s = 0; s < kSteps + abandoned; ++s) {
    if (s < from || s >= to) trained.push_back(s);
  }
  ASSERT_EQ(trained.size(), job_step.size());
  for (size_t i = 0; i < trained.size(); ++i) {
    EXPECT_EQ(ran[trained[i]], expected[job_step[i]])
        << "step " << trained[i] << " (job step " << job_step[i]
        << "): a sample skipped or trained twice";
  }
  EXPECT_EQ(ran.size(), trained.size()) << "a step ran that was not planned";
}

/// Kills the victim once it ran a few steps and waits for the scheduler's
/// shrink to epoch 1 on the others; the steps [from, to) it abandoned
/// ({-1, -1} and a failure when it did not come or abandoned none).
std::pair<int64_t, int64_t> RankFailureTest::KillVictimAndAwaitShrink() {
  const std::pair<int64_t, int64_t> none{-1, -1};
  if (!AwaitOutput([] { return Ran(kVictim, kKillAfter); })) {
    ADD_FAILURE() << "the victim ran no steps\n" << reaper_.Describe(4000);
    return none;
  }
  KillAgent(kVictim);
  const std::string line = AwaitSchedulerLine(
      absl::StrCat("rank failure: ranks [", kVictim, "] failed"));
  if (line.empty()) {
    ADD_FAILURE() << "no shrink\n" << reaper_.Describe(4000);
    return none;
  }
  EXPECT_TRUE(absl::StrContains(line, "shrink: epoch 1 on ranks [0,2,3]"))
      << line;
  std::fprintf(stderr, "%s\n", line.c_str());
  const std::pair<int64_t, int64_t> range = AbandonedRange(line);
  // The victim had steps planned that it never reported.
  if (range.first < 0 || range.second <= range.first) {
    ADD_FAILURE() << "no step abandoned: " << line;
    return none;
  }
  return range;
}

TEST_F(RankFailureTest, ShrinkFinishesOnTheRestAndLosesNothing) {
  StartJob({"--rank_timeout=2s", "--on_rank_failure=shrink"});
  const auto [from, to] = KillVictimAndAwaitShrink();
  ASSERT_GE(from, 0);
  ExpectAgentsFinish();
  ExpectShrunkJobTrainedOnce(from, to);
}

TEST_F(RankFailureTest, AShrinkSurvivesASchedulerRestart) {
  const std::vector<std::string> flags =
      Flags({"--rank_timeout=2s", "--on_rank_failure=shrink",
             "--state_dir=" + TmpPath(prefix_ + "-state")});
  const int port =
      StartSchedulerIncarnation(prefix_ + "-scheduler", flags, 0, scheduler_);
  ASSERT_GT(port, 0);
  address_ = absl::StrCat("127.0.0.1:", port);
  for (int r = 0; r < kWorld; ++r) agents_.push_back(StartAgent(r, ""));
  const auto [from, to] = KillVictimAndAwaitShrink();
  ASSERT_GE(from, 0);

  // Right after the shrink the scheduler dies too, and comes back on its
  // state: the same epoch, world and abandoned steps.
  Kill(scheduler_[0]);
  ASSERT_GT(StartSchedulerIncarnation(prefix_ + "-scheduler-again", flags,
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
  std::vector<Child> last = {scheduler_.back()};
  StopScheduler(address_, last);
  scheduler_.back() = last.front();
}

TEST_F(RankFailureTest, AHungAgentIsFailedUnderHoldAndRejoinsWhenItWakes) {
  StartJob({"--rank_timeout=2s", "--on_rank_failure=hold"});
  ASSERT_TRUE(AwaitOutput([] { return Ran(kVictim, kKillAfter); }))
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
  ExpectExactlyOnceWithoutShrink();
}

TEST_F(RankFailureTest, AnAgentBackBeforeTheTimeoutRejoinsAtAStepBoundary) {
  StartJob({"--rank_timeout=60s", "--on_rank_failure=hold"});
  ASSERT_TRUE(AwaitOutput([] { return Ran(kVictim, kKillAfter); }))
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
  ExpectExactlyOnceWithoutShrink();
}

}  // namespace
}  // namespace dcp
