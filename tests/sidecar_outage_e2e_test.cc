// A scheduler outage longer than the agent's reconnect back-off cap is only
// a pause to a sidecar trainer. Real processes: dcp-scheduler with
// --state_dir, one serve-mode dcp-agent with a small back-off cap
// (--max_backoff=200ms), and a trainer on client_lib's sidecar mode (in this
// process). The trainer runs two steps; the scheduler is SIGKILLed; the
// trainer reports the second step (answered OK: the agent keeps it) and
// goes on: a step the agent already has comes at once (its report is kept
// too), then NextStep waits. The test waits, on the agent's log (no
// sleeps), until the agent has failed more reconnections than its
// max_reconnect_attempts (8) with the scheduler down for more than the
// back-off cap, checks the trainer got no error and no step the scheduler
// could not have planned, and restarts the scheduler on the same port and
// directory. The trainer then runs the job to its end: every step once, in
// order, and every step completed at the scheduler, the one reported during
// the outage included (without it the scheduler could not plan past its
// look-ahead).
//
// The second test makes that report outlive the agent: the agent has
// --report_spool_dir; with the scheduler SIGKILLed the trainer reports a
// step (kept, and written to the spool before the trainer is answered),
// then the agent is SIGKILLed too. The scheduler and the agent start
// again (same port, state and spool); the agent says it has one spooled
// report, delivers it, and the same trainer runs the job to its end: every
// step once, every step completed at the scheduler, none counted twice,
// and the spool back to its bare header.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client_lib/client.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"
#include "tests/job_inputs.h"

namespace dcp {
namespace {

using testing_process::Binary;
using testing_process::Child;
using testing_process::ChildReaper;
using testing_process::CtlStatus;
using testing_process::Describe;
using testing_process::FileActivity;
using testing_process::JsonNumber;
using testing_process::LcgTrace;
using testing_process::Poll;
using testing_process::ReadFile;
using testing_process::ServingAgents;
using testing_process::Spawn;
using testing_process::StartSchedulerIncarnation;
using testing_process::StartServingAgents;
using testing_process::StopScheduler;
using testing_process::TmpPath;
using testing_process::WriteJob;

constexpr int kSteps = 6;
/// The agent's default max_reconnect_attempts: failing more than this many
/// made it give up before it had an outage deadline.
constexpr int kAttempts = 8;
constexpr absl::Duration kBackoffCap = absl::Milliseconds(200);
constexpr absl::Duration kPatience = absl::Seconds(60);

/// dcp-scheduler's flags for a job of one rank and kSteps steps whose
/// inputs and --state_dir are under TEST_TMPDIR, named after `name`: every
/// incarnation of the job's scheduler gets the same.
std::vector<std::string> SchedulerFlags(const std::string& name) {
  std::vector<std::string> flags =
      WriteJob(name, LcgTrace(400, 11, 100, [](int d) { return 64 + 30 * d; }),
               name + "-tiny",
               {/*world_size=*/1, /*gpus_per_node=*/1, /*window=*/4096,
                /*tokens_per_step=*/8192, /*max_steps=*/kSteps});
  flags.insert(flags.end(), {"--lookahead_steps=2", "--metrics_listen=",
                             "--state_dir=" + TmpPath(name + "-state")});
  return flags;
}

/// The agent flags both tests share: reconnections at most kBackoffCap
/// apart, and an outage long enough never to give up in them.
std::vector<std::string> AgentFlags() {
  return {absl::StrCat("--max_backoff=", absl::FormatDuration(kBackoffCap)),
          "--max_outage=10m"};
}

/// A sidecar trainer of rank 0 on `socket`; null and a failure when it
/// cannot connect.
std::unique_ptr<Client> ConnectTrainer(const std::string& socket) {
  ClientOptions options;
  options.mode = ClientOptions::Mode::kSidecar;
  options.agent_socket = socket;
  options.rank = 0;
  options.rpc_timeout = kPatience;
  options.step_timeout = kPatience;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

absl::Status ReportStep(Client& client, const Step& step) {
  return client.ReportStep(step, std::vector<double>(step.tasks.size(), 0.01),
                           0.001);
}

/// SIGKILLs `child` and reaps it.
void KillNow(Child& child) {
  ASSERT_EQ(kill(child.pid, SIGKILL), 0);
  ASSERT_EQ(waitpid(child.pid, nullptr, 0), child.pid);
  child.done = true;
}

/// Steps 0 .. kSteps - 1: what the trainer must have run, each once.
std::vector<int64_t> AllSteps() {
  std::vector<int64_t> steps;
  for (int64_t s = 0; s < kSteps; ++s) steps.push_back(s);
  return steps;
}

/// The highest reconnection the agent's log says failed (0: none).
int FailedReconnections(const Child& agent) {
  int most = 0;
  for (absl::string_view line :
       absl::StrSplit(ReadFile(agent.err_path), '\n')) {
    const size_t at = line.find("(reconnection ");
    if (at == absl::string_view::npos) continue;
    int n = 0;
    for (char c : line.substr(at + 14)) {
      if (c < '0' || c > '9') break;
      n = n * 10 + (c - '0');
    }
    most = std::max(most, n);
  }
  return most;
}

TEST(SidecarOutageE2eTest, ALongSchedulerOutageIsAPauseToTheTrainer) {
  const std::vector<std::string> scheduler_flags = SchedulerFlags("outage");
  std::vector<Child> first;
  std::vector<Child> second;
  ServingAgents serving;
  ChildReaper reaper({&first, &second, &serving.agents});
  const int port =
      StartSchedulerIncarnation("scheduler-1", scheduler_flags, 0, first);
  ASSERT_GT(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  serving = StartServingAgents("outage", address, 1, AgentFlags());
  ASSERT_FALSE(serving.dir.empty());

  std::unique_ptr<Client> client = ConnectTrainer(serving.sockets[0]);
  ASSERT_NE(client, nullptr);
  std::vector<int64_t> steps;
  auto report = [&](const Step& step) { return ReportStep(*client, step); };
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<Step> step = client->NextStep();
    ASSERT_TRUE(step.ok()) << step.status();
    ASSERT_FALSE(step->drained);
    steps.push_back(step->step);
    if (i == 0) {
      ASSERT_TRUE(report(*step).ok());
    }
    if (i == 1) {
      // The outage begins with the second step not yet reported.
      KillNow(first[0]);
      const absl::Status kept = report(*step);
      EXPECT_TRUE(kept.ok()) << "a report during the outage: " << kept;
    }
  }

  // The trainer goes on in a thread: steps already with the agent come at
  // once (the look-ahead planned step 2 before the kill), their reports are
  // kept; then NextStep waits, as step 3 cannot be planned before step 1's
  // report reaches the scheduler.
  absl::Mutex mu;
  std::vector<absl::Status> errors;  // Guarded by mu.
  int64_t last_step = steps.back();  // Guarded by mu.
  std::vector<int64_t> later;
  std::thread trainer([&] {
    while (true) {
      absl::StatusOr<Step> step = client->NextStep();
      absl::Status reported;
      if (step.ok() && !step->drained) reported = report(*step);
      absl::MutexLock lock(&mu);
      if (!step.ok() || !reported.ok()) {
        errors.push_back(!step.ok() ? step.status() : reported);
        return;
      }
      if (step->drained) return;
      later.push_back(step->step);
      last_step = step->step;
    }
  });
  {
    FileActivity activity({TmpPath("")});
    const absl::Time deadline = absl::Now() + kPatience;
    while (FailedReconnections(serving.agents[0]) <= kAttempts + 1) {
      ASSERT_TRUE(activity.Await(deadline))
          << "the agent did not log its reconnections: "
          << Describe(serving.agents);
    }
  }
  // More than kAttempts + 1 failures, each after a back-off sleep, the
  // later ones at the cap: the outage is longer than the cap several times
  // over, and the trainer saw no error, only a wait.
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(errors.empty()) << "during the outage: " << errors.front();
    EXPECT_LE(last_step, 2) << "a step planned during the outage?";
  }
  EXPECT_FALSE(
      absl::StrContains(ReadFile(serving.agents[0].err_path), "gave up"));

  ASSERT_GT(
      StartSchedulerIncarnation("scheduler-2", scheduler_flags, port, second),
      0);
  trainer.join();
  EXPECT_TRUE(errors.empty()) << errors.front();
  steps.insert(steps.end(), later.begin(), later.end());
  EXPECT_EQ(steps, AllSteps());
  const nlohmann::json status = CtlStatus("ctl-status", address);
  ASSERT_FALSE(status.is_discarded());
  EXPECT_EQ(JsonNumber(status["completed_steps"]), kSteps);
  testing_process::ExpectAllExit(serving.agents, absl::Now() + kPatience,
                                 "the agent did not exit after the drain");
  EXPECT_EQ(serving.agents[0].exit_code, 0) << Describe(serving.agents);
  StopScheduler(address, second);
  rmdir(serving.dir.c_str());
}

TEST(SidecarOutageE2eTest, ASpooledReportOutlivesTheAgent) {
  const std::vector<std::string> scheduler_flags = SchedulerFlags("spool");
  const std::string spool_dir = TmpPath("spool");
  const std::string spool_file = spool_dir + "/reports-rank0.spool";
  std::vector<Child> first;
  std::vector<Child> second;
  std::vector<Child> agent_again;
  ServingAgents serving;
  ChildReaper reaper({&first, &second, &serving.agents, &agent_again});
  const int port =
      StartSchedulerIncarnation("spool-scheduler-1", scheduler_flags, 0, first);
  ASSERT_GT(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  std::vector<std::string> flags = AgentFlags();
  flags.push_back("--report_spool_dir=" + spool_dir);
  serving = StartServingAgents("spool", address, 1, flags);
  ASSERT_FALSE(serving.dir.empty());

  std::unique_ptr<Client> client = ConnectTrainer(serving.sockets[0]);
  ASSERT_NE(client, nullptr);
  std::vector<int64_t> steps;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<Step> step = client->NextStep();
    ASSERT_TRUE(step.ok()) << step.status();
    ASSERT_FALSE(step->drained);
    steps.push_back(step->step);
    // The second step's report finds the scheduler gone: the agent keeps
    // it, in the spool before it answers.
    if (i == 1) KillNow(first[0]);
    const absl::Status reported = ReportStep(*client, *step);
    ASSERT_TRUE(reported.ok()) << "step " << step->step << ": " << reported;
  }
  EXPECT_GT(ReadFile(spool_file).size(), std::string("DCPSPOOL").size())
      << "the kept report is not in the spool";
  KillNow(serving.agents[0]);

  ASSERT_GT(StartSchedulerIncarnation("spool-scheduler-2", scheduler_flags,
                                      port, second),
            0);
  {
    FileActivity activity({TmpPath("")});
    agent_again.push_back(Spawn("spool-agent-0-again", serving.argv[0]));
    const absl::Time deadline = absl::Now() + kPatience;
    while (
        !absl::StrContains(ReadFile(agent_again[0].err_path), "serving on")) {
      ASSERT_TRUE(activity.Await(deadline) && !Poll(agent_again[0]))
          << "the agent did not serve again: " << Describe(agent_again);
    }
  }
  EXPECT_TRUE(absl::StrContains(ReadFile(agent_again[0].err_path),
                                "1 spooled reports to deliver first"))
      << Describe(agent_again);
  // The same trainer goes on after its agent came back: without the
  // spooled report the scheduler could not complete step 1, nor plan past
  // its look-ahead, and NextStep would time out here.
  while (true) {
    absl::StatusOr<Step> step = client->NextStep();
    ASSERT_TRUE(step.ok()) << step.status() << Describe(agent_again);
    if (step->drained) break;
    steps.push_back(step->step);
    const absl::Status reported = ReportStep(*client, *step);
    ASSERT_TRUE(reported.ok()) << "step " << step->step << ": " << reported;
  }
  EXPECT_EQ(steps, AllSteps());
  const nlohmann::json status = CtlStatus("spool-ctl-status", address);
  ASSERT_FALSE(status.is_discarded());
  EXPECT_EQ(JsonNumber(status["completed_steps"]), kSteps);
  // One report a step at most, the spooled one included: a second copy
  // would be ALREADY_EXISTS, not counted.
  EXPECT_LE(JsonNumber(status["timing_reports"]), kSteps);
  testing_process::ExpectAllExit(agent_again, absl::Now() + kPatience,
                                 "the agent did not exit after the drain");
  EXPECT_EQ(agent_again[0].exit_code, 0) << Describe(agent_again);
  EXPECT_EQ(ReadFile(spool_file), "DCPSPOOL") << "a report left unsettled";
  StopScheduler(address, second);
  rmdir(serving.dir.c_str());
}

}  // namespace
}  // namespace dcp
