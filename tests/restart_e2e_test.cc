// A scheduler restart costs no sample: the real dcp-scheduler with
// --state_dir and four real dcp-agent processes in execute mode (training
// the tiny model of train/); the scheduler is SIGKILLed at seeded points of
// the run (right after it logged planning a step, right after a rank
// trained a step, right after a refit) several times, and restarted each
// time on the same directory and port. The agents ride it out: their plan
// streams reconnect with back-off and resume after the last step they
// received, their reports are retried until the scheduler is back.
//
// What "exactly once" means here, and what the test asserts. A step is
// completed when every rank's report of it is durable; a report is durable
// before it is acknowledged, a plan before any rank can receive it. So:
//   - every step of the job is planned once, by one scheduler incarnation:
//     a restart serves the steps it kept (planned, not completed) again as
//     they were, and never plans them anew (the schedulers' logs);
//   - every rank trains every step exactly once, in order: an agent that
//     survives the restart never runs a step twice (its log);
//   - the ranks that share a task ran the same samples in the same group,
//     whichever incarnation each received the step from, and every sample
//     of every step was trained exactly once in it, none skipped: the
//     step's samples are those the step builder draws (the agents' logs);
//   - the job ends with all its steps completed (dcp-ctl status).
// An agent process that dies and restarts would train again a step whose
// report it had not sent; that is not covered here.
//
// Seeded (kSeed, or DCP_RESTART_SEED to try another): the kinds and the
// distances of the kill points are drawn from it; when exactly the kill
// lands within the scheduler's work is up to the machine.

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
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
using testing_process::BuilderSteps;
using testing_process::Child;
using testing_process::ChildReaper;
using testing_process::CtlStatus;
using testing_process::JsonNumber;
using testing_process::LcgTrace;
using testing_process::Poll;
using testing_process::ReadFile;
using testing_process::SkewedLength;
using testing_process::Spawn;
using testing_process::StartSchedulerIncarnation;
using testing_process::StopScheduler;
using testing_process::TinyModelJson;
using testing_process::TmpPath;
using testing_process::WriteFile;

constexpr uint32_t kSeed = 20261201;
constexpr int kWorld = 4;
constexpr uint64_t kJobSeed = 3;
constexpr int kSteps = 30;
constexpr int kKills = 4;
constexpr int kTokenScale = 64;
/// How long any one thing the test waits for may take.
constexpr absl::Duration kPatience = absl::Seconds(60);

uint32_t Seed() {
  const char* env = std::getenv("DCP_RESTART_SEED");
  uint32_t seed = kSeed;
  if (env != nullptr && !absl::SimpleAtoi(env, &seed)) seed = kSeed;
  return seed;
}

/// The job: every scheduler incarnation gets the same flags.
constexpr testing_process::JobShape kShape = {
    /*world_size=*/kWorld, /*gpus_per_node=*/2,
    /*window=*/32768,      /*tokens_per_step=*/65536,
    /*max_steps=*/kSteps,  /*seed=*/kJobSeed,
    /*lookahead_steps=*/4};

struct Job {
  std::string trace_path;
  std::string model_path;
  std::string state_dir;
  std::vector<std::string> SchedulerFlags() const {
    std::vector<std::string> flags =
        testing_process::JobFlags(trace_path, model_path, kShape);
    for (const char* more : {"--refit_every=4", "--metrics_listen="}) {
      flags.push_back(more);
    }
    flags.push_back("--state_dir=" + state_dir);
    return flags;
  }
};

/// Rank `r`'s execution log.
std::string AgentLog(int r) {
  return TmpPath(absl::StrCat("agent-", r, ".jsonl"));
}

/// The step lines of rank `r`'s log, in order.
std::vector<int64_t> LoggedSteps(int r) {
  return testing_process::LoggedSteps(AgentLog(r));
}

/// The highest step some rank has trained (-1 before any).
int64_t MostTrained() {
  int64_t most = -1;
  for (int r = 0; r < kWorld; ++r) {
    for (int64_t s : LoggedSteps(r)) most = std::max(most, s);
  }
  return most;
}

/// The step numbers a scheduler's log says it planned, in order.
std::vector<int64_t> PlannedInLog(const std::string& log) {
  std::vector<int64_t> planned;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    const size_t at = line.find(" step ");
    if (at == absl::string_view::npos ||
        line.find(" (epoch ", at) == absl::string_view::npos) {
      continue;
    }
    const absl::string_view rest = line.substr(at + 6);
    int64_t step = 0;
    if (absl::SimpleAtoi(rest.substr(0, rest.find(' ')), &step)) {
      planned.push_back(step);
    }
  }
  return planned;
}

int CountRefits(const std::string& log) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    n += absl::StrContains(line, " refit ") ? 1 : 0;
  }
  return n;
}

/// What one incarnation's log says about the job it resumed.
struct Resumed {
  std::string session;
  int64_t completed = 0;
  int64_t planned = 0;
};

std::optional<Resumed> ParseResumed(const std::string& log) {
  const size_t at = log.find("resumed session ");
  if (at == std::string::npos) return std::nullopt;
  Resumed r;
  const std::string rest = log.substr(at + 16);
  r.session = rest.substr(0, rest.find(' '));
  const size_t range = rest.find("served again");
  // "... [C, P) served again ..."
  const size_t open = rest.rfind('[', range);
  std::vector<std::string> bounds =
      absl::StrSplit(rest.substr(open + 1, range - open - 3), ", ");
  if (bounds.size() != 2 || !absl::SimpleAtoi(bounds[0], &r.completed) ||
      !absl::SimpleAtoi(bounds[1], &r.planned)) {
    ADD_FAILURE() << "cannot read the resume line: " << rest.substr(0, 200);
  }
  return r;
}

enum class KillPoint { kPlanned, kTrained, kRefit };

const char* Name(KillPoint p) {
  switch (p) {
    case KillPoint::kPlanned:
      return "after planning step";
    case KillPoint::kTrained:
      return "after a rank trained step";
    case KillPoint::kRefit:
      return "after a refit, past step";
  }
  return "?";
}

/// Waits for kill point `point` at distance `ahead` in the log of the
/// running incarnation `current`; returns the step it waited for.
int64_t AwaitKillPoint(KillPoint point, int ahead, Child& current,
                       const ChildReaper& reaper) {
  const absl::Time deadline = absl::Now() + kPatience;
  // Every log the kill points are read from (the scheduler's and the
  // agents') is under TEST_TMPDIR; the watch starts before the first look.
  testing_process::FileActivity activity({TmpPath("")});
  const std::string before = ReadFile(current.err_path);
  // The last step planned so far: in this incarnation's log, or before it.
  int64_t last_planned = -1;
  for (int64_t s : PlannedInLog(before))
    last_planned = std::max(last_planned, s);
  if (const std::optional<Resumed> resumed = ParseResumed(before)) {
    last_planned = std::max(last_planned, resumed->planned - 1);
  }
  const int64_t target = point == KillPoint::kPlanned ? last_planned + ahead
                                                      : MostTrained() + ahead;
  const int refits = CountRefits(before);
  while (absl::Now() < deadline && !Poll(current)) {
    const std::string log = ReadFile(current.err_path);
    const std::vector<int64_t> now = PlannedInLog(log);
    const bool due =
        point == KillPoint::kPlanned
            ? std::find(now.begin(), now.end(), target) != now.end()
        : point == KillPoint::kTrained
            ? MostTrained() >= target
            : MostTrained() >= target && CountRefits(log) > refits;
    if (due) return target;
    activity.Await(deadline);
  }
  ADD_FAILURE() << "no kill point " << Name(point) << " " << target
                << " came:\n"
                << reaper.Describe(4000);
  return -1;
}

std::string SessionOf(const std::string& log) {
  const size_t at = log.find("dcp-scheduler: session ");
  if (at == std::string::npos) return "";
  const std::string rest = log.substr(at + 23);
  return rest.substr(0, rest.find(','));
}

/// The agents' side: every rank trained every step once, in order; tasks
/// agree across their ranks; every step ran exactly the builder's samples.
void CheckTraining(const std::string& trace) {
  std::vector<int64_t> all(kSteps);
  for (int s = 0; s < kSteps; ++s) all[s] = s;
  std::vector<std::string> logs;
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(LoggedSteps(r), all) << "rank " << r;
    logs.push_back(AgentLog(r));
  }
  const auto tasks = testing_process::LoggedTasks(logs, {});
  for (const auto& [key, task] : tasks) {
    for (const auto& [r, runs] : task.runs) {
      EXPECT_EQ(runs, 1) << "rank " << r << " ran task " << key.second
                         << " of step " << key.first << " " << runs << " times";
    }
  }
  testing_process::ExpectEachJobStepOnce(testing_process::SamplesByStep(tasks),
                                         BuilderSteps(trace, kShape), {});
}

/// The schedulers' side: every incarnation after the first resumed the
/// first one's session with steps kept to serve again, and planned none of
/// them anew. Each step was planned by one incarnation: logged once, or
/// (killed between its durable plan and the log line) by none but kept by
/// the next.
void CheckSchedulerLogs(const std::vector<Child>& scheduler) {
  const std::string session = SessionOf(ReadFile(scheduler[0].err_path));
  ASSERT_FALSE(session.empty());
  std::map<int64_t, int> logged;
  std::set<int64_t> kept;
  for (size_t n = 0; n < scheduler.size(); ++n) {
    const std::string log = ReadFile(scheduler[n].err_path);
    const std::vector<int64_t> planned_here = PlannedInLog(log);
    for (int64_t s : planned_here) ++logged[s];
    EXPECT_EQ(SessionOf(log), session) << "incarnation " << n;
    const std::optional<Resumed> resumed = ParseResumed(log);
    EXPECT_EQ(resumed.has_value(), n > 0) << "incarnation " << n;
    if (!resumed.has_value()) continue;
    EXPECT_EQ(resumed->session, session);
    EXPECT_LE(resumed->completed, resumed->planned);
    for (int64_t s = resumed->completed; s < resumed->planned; ++s) {
      kept.insert(s);
    }
    for (int64_t s : planned_here) {
      EXPECT_GE(s, resumed->planned) << "incarnation " << n << " planned step "
                                     << s << " again after resuming it";
    }
  }
  EXPECT_FALSE(kept.empty()) << "no restart had steps to serve again";
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_LE(logged[s], 1)
        << "step " << s << " planned " << logged[s] << " times";
    if (logged[s] == 0) {
      EXPECT_EQ(kept.count(s), 1) << "step " << s << " was never planned";
    }
  }
  if (!logged.empty()) {
    EXPECT_LT(logged.rbegin()->first, kSteps) << "planned past --max_steps";
  }
}

std::vector<Child> StartAgents(const std::string& address, const Job& job) {
  std::vector<Child> agents;
  for (int r = 0; r < kWorld; ++r) {
    std::vector<std::string> argv =
        testing_process::AgentArgs(address, r, kWorld, AgentLog(r));
    for (const std::string& flag :
         {std::string("--mode=execute"), "--model_config=" + job.model_path,
          absl::StrCat("--token_scale=", kTokenScale),
          std::string("--rendezvous_timeout=60s")}) {
      argv.push_back(flag);
    }
    agents.push_back(Spawn(absl::StrCat("agent-", r), argv));
  }
  return agents;
}

TEST(RestartE2eTest, SchedulerKilledAndRestartedCostsNoSample) {
  const uint32_t seed = Seed();
  std::mt19937 rng(seed);
  const std::string trace = LcgTrace(300, seed, 100, SkewedLength);
  Job job{TmpPath("trace.txt"), TmpPath("model.json"), TmpPath("state")};
  ASSERT_TRUE(WriteFile(job.trace_path, trace));
  ASSERT_TRUE(WriteFile(job.model_path, TinyModelJson("tiny-restart")));

  std::vector<Child> scheduler;
  std::vector<Child> agents;
  ChildReaper reaper({&scheduler, &agents});
  const absl::Time started = absl::Now();
  const int port = StartSchedulerIncarnation(
      "scheduler-0", job.SchedulerFlags(), 0, scheduler);
  ASSERT_GT(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  agents = StartAgents(address, job);

  std::string points;
  for (int k = 0; k < kKills; ++k) {
    const KillPoint point = static_cast<KillPoint>(rng() % 3);
    const int ahead = 1 + static_cast<int>(rng() % 3);
    const int64_t at = AwaitKillPoint(point, ahead, scheduler.back(), reaper);
    ASSERT_GE(at, 0);
    testing_process::KillAndReap(scheduler.back());
    absl::StrAppend(&points, " [", Name(point), " ", at, "]");
    ASSERT_GT(StartSchedulerIncarnation(absl::StrCat("scheduler-", k + 1),
                                        job.SchedulerFlags(), port, scheduler),
              0);
  }
  std::fprintf(stderr, "seed %u: killed%s\n", seed, points.c_str());

  // The agents end with the job: the drain after its last step.
  ASSERT_TRUE(testing_process::ExpectAllExit(
      agents, absl::Now() + 2 * kPatience, "the agents did not finish"));
  for (const Child& a : agents) {
    EXPECT_EQ(a.exit_code, 0) << reaper.Describe(4000);
  }
  std::fprintf(stderr, "%d steps, %d kills, %.1f s\n", kSteps, kKills,
               absl::ToDoubleSeconds(absl::Now() - started));
  const nlohmann::json status = CtlStatus("ctl-status", address);
  EXPECT_EQ(JsonNumber(status["planned_steps"]), kSteps);
  EXPECT_EQ(JsonNumber(status["completed_steps"]), kSteps);
  {
    std::vector<Child> last = {scheduler.back()};
    StopScheduler(address, last);
    scheduler.back() = last.front();
  }

  CheckSchedulerLogs(scheduler);
  CheckTraining(trace);
}

}  // namespace
}  // namespace dcp
