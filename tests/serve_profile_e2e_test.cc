// dcp-agent's serve mode and the scheduler's start-up profile, end to end:
// the real dcp-scheduler with --profile_at_start and real dcp-agent
// processes in serve mode, each feeding a trainer of this process that uses
// client_lib's sidecar mode. The agents answer the ProfileRequest
// themselves (the model's attention layer on the CPU over Gloo) before
// their trainers get step 0, and the scheduler refits from the profile
// before it plans step 0. Without the model's shape a serving agent skips
// the profile with a warning and still serves; a model flag that does not
// load fails it at start-up.

#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client_lib/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"
#include "tests/job_inputs.h"
#include "tests/sidecar_trainers.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_process::AgentArgs;
using testing_process::Child;
using testing_process::CtlStatus;
using testing_process::Describe;
using testing_process::ExpectAllExit;
using testing_process::JsonNumber;
using testing_process::LcgTrace;
using testing_process::ReadFile;
using testing_process::RunSidecarTrainers;
using testing_process::ServingAgents;
using testing_process::SidecarRun;
using testing_process::Spawn;
using testing_process::StartScheduler;
using testing_process::StartServingAgents;
using testing_process::StopScheduler;
using testing_process::TmpPath;
using testing_process::WriteJob;

constexpr int kGpusPerNode = 4;

std::vector<std::string> SchedulerFlags(const std::string& name, int world,
                                        int steps, const std::string& timeout) {
  // A skewed trace: mostly short samples, every tenth long enough to be
  // split over a group; a model of 8 heads, so groups of 1, 2 and 4 ranks.
  std::vector<std::string> flags = WriteJob(
      name,
      LcgTrace(400, 99, 1000,
               [](int d) { return d < 900 ? 64 + 2 * d : 8000 + 20 * d; }),
      "tiny-serve",
      {/*world_size=*/world, /*gpus_per_node=*/kGpusPerNode,
       /*window=*/32768, /*tokens_per_step=*/65536, /*max_steps=*/steps});
  flags.insert(flags.end(), {"--lookahead_steps=2",
                             // Timings never refit (too few for refit_every,
                             // however far off): any refit comes from the
                             // profile.
                             "--refit_every=100000", "--refit_error=0",
                             "--profile_at_start",
                             "--profile_timeout=" + timeout});
  return flags;
}

/// Serve-mode agents for ranks 0..world-1. An agent whose trainer is
/// drained while it still warms a step's group (the trainers here form
/// none, so a peer may be gone) waits for that formation up to
/// `rendezvous_timeout` before it exits: callers wait longer than that for
/// the agents.
ServingAgents StartAgents(const std::string& name, const std::string& address,
                          int world, absl::Duration rendezvous_timeout,
                          std::vector<std::string> extra) {
  extra.insert(extra.begin(), "--rendezvous_timeout=" +
                                  absl::FormatDuration(rendezvous_timeout));
  return StartServingAgents(name, address, world, extra);
}

/// One sidecar trainer per socket until the job is drained.
SidecarRun RunTrainers(const std::vector<std::string>& sockets) {
  ClientOptions options;
  options.rpc_timeout = absl::Seconds(60);
  options.step_timeout = absl::Seconds(120);
  return RunSidecarTrainers(sockets, options);
}

/// The entries the agent said it profiled ("profiled N entries"); -1 when
/// it did not say.
int ProfiledEntries(const std::string& err) {
  const size_t at = err.find("profiled ");
  if (at == std::string::npos) return -1;
  int n = -1;
  const size_t from = at + 9;
  if (!absl::SimpleAtoi(err.substr(from, err.find(' ', from) - from), &n)) {
    return -1;
  }
  return n;
}

TEST(ServeProfileE2eTest, ServingAgentsAnswerTheProfileBeforeStepZero) {
  constexpr int kWorld = 4;
  constexpr int kSteps = 3;
  std::vector<Child> scheduler;
  const int port = StartScheduler(
      "serve-profile-scheduler",
      SchedulerFlags("serve-profile", kWorld, kSteps, "120s"), scheduler);
  ASSERT_GT(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  const nlohmann::json initial = CtlStatus("ctl-initial", address);
  EXPECT_EQ(JsonNumber(initial["refits"]), 0);

  // The agents learn the model's shape from the same config file.
  const absl::Duration rendezvous_timeout = absl::Seconds(30);
  ServingAgents serving =
      StartAgents("serve-profile", address, kWorld, rendezvous_timeout,
                  {"--model_config=" + TmpPath("serve-profile-model.json"),
                   "--token_scale=64"});
  const SidecarRun run = RunTrainers(serving.sockets);
  // The agents exit 0 once their trainer was told the job is drained.
  ExpectAllExit(serving.agents,
                absl::Now() + 2 * rendezvous_timeout + absl::Seconds(30),
                "the serving agents did not exit");
  std::vector<int64_t> all_steps;
  for (int s = 0; s < kSteps; ++s) all_steps.push_back(s);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(run.results[r].ok()) << "rank " << r << ": " << run.results[r];
    EXPECT_EQ(run.steps[r], all_steps) << "rank " << r;
    EXPECT_EQ(serving.agents[r].exit_code, 0) << Describe(serving.agents);
  }

  // The grid: lengths {256, 1024, 4096, 16384, 32768} (the default, to the
  // window; the tiny model fits them all) x recompute {0, 1}; lengths up to
  // kProfileAllGroupsUpToLength (4096) for p in {1, 2, 4} (the divisors of 8
  // heads and 4 ranks within a 4-GPU node), p > 1 both as plain Ulysses and
  // as a ring of two (ProfiledDegrees), each group's first rank reporting:
  // 4 + 2 x 2 + 1 x 2 groups and shapes; the two longer ones on the one
  // group of 4 as plain Ulysses.
  constexpr int kEntries = 3 * 2 * (4 + 2 * 2 + 1 * 2) + 2 * 2 * 1;
  int profiled = 0;
  for (int r = 0; r < kWorld; ++r) {
    const std::string err = ReadFile(serving.agents[r].err_path);
    const int n = ProfiledEntries(err);
    EXPECT_GE(n, 0) << "rank " << r << " did not profile:\n" << err;
    profiled += n;
  }
  EXPECT_EQ(profiled, kEntries);

  const nlohmann::json status = CtlStatus("ctl-status", address);
  EXPECT_EQ(JsonNumber(status["completed_steps"]), kSteps);
  EXPECT_EQ(JsonNumber(status["timing_reports"]), kSteps * kWorld);
  EXPECT_EQ(JsonNumber(status["refits"]), 1);
  EXPECT_GE(JsonNumber(status["observations"]), kEntries);
  EXPECT_EQ(status.value("planner_error", ""), "");
  EXPECT_NE(JsonNumber(status["coefficients"]["lin"]),
            JsonNumber(initial["coefficients"]["lin"]));
  StopScheduler(address, scheduler);

  // Every rank answered before the timeout, the scheduler refitted from
  // the profile, and only then planned step 0.
  const std::string log = ReadFile(scheduler[0].err_path);
  const size_t refit = log.find(absl::StrCat("refit 1 over ", kEntries, " "));
  const size_t done = log.find(absl::StrCat(
      "profile done: ", kWorld, " ranks answered, ", kEntries, " "));
  const size_t first_step = log.find(" step 0 (");
  ASSERT_NE(refit, std::string::npos) << log;
  ASSERT_NE(done, std::string::npos) << log;
  ASSERT_NE(first_step, std::string::npos) << log;
  EXPECT_LT(refit, first_step) << log;
  EXPECT_LT(done, first_step) << log;
  rmdir(serving.dir.c_str());
}

TEST(ServeProfileE2eTest, WithoutTheModelServingAgentsSkipTheProfile) {
  constexpr int kWorld = 2;
  constexpr int kSteps = 2;
  std::vector<Child> scheduler;
  // The scheduler's model is not built in and the agents get no config:
  // they cannot profile, and the scheduler plans after its timeout.
  const int port = StartScheduler(
      "serve-noprofile-scheduler",
      SchedulerFlags("serve-noprofile", kWorld, kSteps, "2s"), scheduler);
  ASSERT_GT(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  const absl::Duration rendezvous_timeout = absl::Seconds(10);
  ServingAgents serving =
      StartAgents("serve-noprofile", address, kWorld, rendezvous_timeout, {});
  const SidecarRun run = RunTrainers(serving.sockets);
  ExpectAllExit(serving.agents,
                absl::Now() + 2 * rendezvous_timeout + absl::Seconds(30),
                "the serving agents did not exit");
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(run.results[r].ok()) << "rank " << r << ": " << run.results[r];
    EXPECT_EQ(run.steps[r], std::vector<int64_t>({0, 1})) << "rank " << r;
    EXPECT_EQ(serving.agents[r].exit_code, 0) << Describe(serving.agents);
    const std::string err = ReadFile(serving.agents[r].err_path);
    EXPECT_THAT(err, HasSubstr("warning: not answering the scheduler's "
                               "profile request"));
    EXPECT_THAT(err, HasSubstr("'tiny-serve', which is not built in"));
    EXPECT_THAT(err, HasSubstr("--model_config"));
    EXPECT_EQ(ProfiledEntries(err), -1) << err;
  }
  const nlohmann::json status = CtlStatus("ctl-noprofile-status", address);
  EXPECT_EQ(JsonNumber(status["completed_steps"]), kSteps);
  EXPECT_EQ(JsonNumber(status["refits"]), 0);
  StopScheduler(address, scheduler);
  EXPECT_THAT(ReadFile(scheduler[0].err_path),
              HasSubstr("profile timed out: ranks [0,1] did not answer"));
  rmdir(serving.dir.c_str());
}

TEST(ServeProfileE2eTest, AModelConfigThatDoesNotLoadFailsAtStartUp) {
  const std::string missing = TmpPath("no-such-model.json");
  // Nothing listens on the scheduler address: the agent must fail before
  // it tries to register.
  std::vector<std::string> argv =
      AgentArgs("127.0.0.1:1", /*rank=*/0, /*world_size=*/0, /*log_file=*/"");
  argv.insert(argv.end(), {"--mode=serve", "--model_config=" + missing,
                           "--connect_timeout=60s"});
  std::vector<Child> agent = {Spawn("serve-bad-model-agent", argv)};
  if (!ExpectAllExit(agent, absl::Now() + absl::Seconds(30),
                     "the agent did not fail at start-up")) {
    return;
  }
  EXPECT_EQ(agent[0].exit_code, 1);
  const std::string err = ReadFile(agent[0].err_path);
  EXPECT_THAT(err, HasSubstr(missing));
  EXPECT_THAT(err, Not(HasSubstr("registered")));
}

}  // namespace
}  // namespace dcp
