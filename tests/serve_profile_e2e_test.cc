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
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
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

namespace dcp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_process::Binary;
using testing_process::Child;
using testing_process::Describe;
using testing_process::KillAll;
using testing_process::ReadFile;
using testing_process::RunToEnd;
using testing_process::Spawn;
using testing_process::StartScheduler;
using testing_process::StopScheduler;
using testing_process::TmpPath;
using testing_process::WaitAll;
using testing_process::WriteFile;

constexpr int kGpusPerNode = 4;

/// A tiny transformer that is not built in (the agents cannot know its
/// shape from its name): 8 heads, so groups of 1, 2 and 4 ranks.
constexpr char kModelJson[] =
    R"({"name": "tiny-serve", "layers": 1, "hidden": 256, "heads": 8,
        "kv_heads": 8, "ffn": 512, "vocab": 1000, "causal": true})";

/// A deterministic skewed trace, one length a line: mostly short samples,
/// every tenth long enough to be split over a group.
std::string Trace(int n) {
  std::string out;
  uint64_t x = 99;
  for (int i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const int64_t r = static_cast<int64_t>((x >> 33) % 1000);
    absl::StrAppend(&out, r < 900 ? 64 + 2 * r : 8000 + 20 * r, "\n");
  }
  return out;
}

std::vector<std::string> SchedulerFlags(const std::string& name, int world,
                                        int steps, const std::string& timeout) {
  const std::string trace_path = TmpPath(name + "-trace.txt");
  const std::string model_path = TmpPath(name + "-model.json");
  EXPECT_TRUE(WriteFile(trace_path, Trace(400)));
  EXPECT_TRUE(WriteFile(model_path, kModelJson));
  return {"--lengths=" + trace_path, "--model_config=" + model_path,
          absl::StrCat("--world_size=", world),
          absl::StrCat("--gpus_per_node=", kGpusPerNode), "--window=32768",
          "--tokens_per_step=65536", absl::StrCat("--max_steps=", steps),
          "--lookahead_steps=2",
          // Timings never refit (too few for refit_every): any refit comes
          // from the profile.
          "--refit_every=100000", "--profile_at_start",
          "--profile_timeout=" + timeout};
}

/// Serve-mode agents for ranks 0..world-1 on sockets in a directory of
/// this run's own (Unix socket paths are short: not under TEST_TMPDIR).
/// An agent whose trainer is drained while it still warms a step's group
/// (the trainers here form none, so a peer may be gone) waits for that
/// formation up to `rendezvous_timeout` before it exits: callers wait
/// longer than that for the agents.
struct ServingAgents {
  std::string dir;
  std::vector<std::string> sockets;
  std::vector<Child> agents;
};

ServingAgents StartServingAgents(const std::string& name,
                                 const std::string& address, int world,
                                 absl::Duration rendezvous_timeout,
                                 const std::vector<std::string>& extra) {
  ServingAgents out;
  char dir[] = "/tmp/dcp-serve-XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    ADD_FAILURE() << "mkdtemp failed";
    return out;
  }
  out.dir = dir;
  for (int r = 0; r < world; ++r) {
    out.sockets.push_back(absl::StrCat(out.dir, "/agent-", r, ".sock"));
    std::vector<std::string> argv = {
        Binary("worker_agent/dcp-agent"),
        "--scheduler=" + address,
        absl::StrCat("--rank=", r),
        absl::StrCat("--world_size=", world),
        "--mode=serve",
        "--socket=" + out.sockets.back(),
        "--rendezvous_timeout=" + absl::FormatDuration(rendezvous_timeout)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    out.agents.push_back(Spawn(absl::StrCat(name, "-agent-", r), argv));
  }
  return out;
}

/// One sidecar trainer per socket until the job is drained: the steps each
/// got, and how each ended.
struct TrainerRun {
  std::vector<std::vector<int64_t>> steps;
  std::vector<absl::Status> results;
};

TrainerRun RunTrainers(const std::vector<std::string>& sockets) {
  const int world = static_cast<int>(sockets.size());
  TrainerRun run;
  run.steps.resize(world);
  run.results.resize(world);
  std::vector<std::thread> trainers;
  for (int r = 0; r < world; ++r) {
    trainers.emplace_back([&, r] {
      ClientOptions options;
      options.mode = ClientOptions::Mode::kSidecar;
      options.agent_socket = sockets[r];
      options.rank = r;
      options.rpc_timeout = absl::Seconds(60);
      options.step_timeout = absl::Seconds(120);
      absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
      if (!client.ok()) {
        run.results[r] = client.status();
        return;
      }
      while (true) {
        absl::StatusOr<Step> step = (*client)->NextStep();
        if (!step.ok()) {
          run.results[r] = step.status();
          return;
        }
        if (step->drained) return;
        run.steps[r].push_back(step->step);
        absl::Status reported = (*client)->ReportStep(
            *step, std::vector<double>(step->tasks.size(), 0.01));
        if (!reported.ok()) {
          run.results[r] = reported;
          return;
        }
      }
    });
  }
  for (std::thread& t : trainers) t.join();
  return run;
}

double JsonNumber(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  double value = 0;
  if (j.is_string() && absl::SimpleAtod(j.get<std::string>(), &value)) {
    return value;
  }
  ADD_FAILURE() << "not a number: " << j.dump();
  return 0;
}

nlohmann::json Status(const std::string& name, const std::string& address) {
  const nlohmann::json status = nlohmann::json::parse(
      RunToEnd(name, {Binary("scheduler/dcp-ctl"), "--scheduler=" + address,
                      "--json", "status"}),
      nullptr, false);
  EXPECT_FALSE(status.is_discarded());
  return status;
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
  const nlohmann::json initial = Status("ctl-initial", address);
  EXPECT_EQ(JsonNumber(initial["refits"]), 0);

  // The agents learn the model's shape from the same config file.
  const absl::Duration rendezvous_timeout = absl::Seconds(30);
  ServingAgents serving = StartServingAgents(
      "serve-profile", address, kWorld, rendezvous_timeout,
      {"--model_config=" + TmpPath("serve-profile-model.json"),
       "--token_scale=64"});
  const TrainerRun run = RunTrainers(serving.sockets);
  // The agents exit 0 once their trainer was told the job is drained.
  if (!WaitAll(serving.agents,
               absl::Now() + 2 * rendezvous_timeout + absl::Seconds(30))) {
    KillAll(serving.agents);
    ADD_FAILURE() << "the serving agents did not exit:\n"
                  << Describe(serving.agents);
  }
  std::vector<int64_t> all_steps;
  for (int s = 0; s < kSteps; ++s) all_steps.push_back(s);
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(run.results[r].ok()) << "rank " << r << ": " << run.results[r];
    EXPECT_EQ(run.steps[r], all_steps) << "rank " << r;
    EXPECT_EQ(serving.agents[r].exit_code, 0) << Describe(serving.agents);
  }

  // The grid: lengths {256, 1024, 4096} x recompute {0, 1} for p in
  // {1, 2, 4} (the divisors of 8 heads and 4 ranks within a 4-GPU node);
  // each group's first rank reports it: 4 + 2 + 1 groups.
  constexpr int kEntries = 3 * 2 * (4 + 2 + 1);
  int profiled = 0;
  for (int r = 0; r < kWorld; ++r) {
    const std::string err = ReadFile(serving.agents[r].err_path);
    const int n = ProfiledEntries(err);
    EXPECT_GE(n, 0) << "rank " << r << " did not profile:\n" << err;
    profiled += n;
  }
  EXPECT_EQ(profiled, kEntries);

  const nlohmann::json status = Status("ctl-status", address);
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
  ServingAgents serving = StartServingAgents("serve-noprofile", address, kWorld,
                                             rendezvous_timeout, {});
  const TrainerRun run = RunTrainers(serving.sockets);
  if (!WaitAll(serving.agents,
               absl::Now() + 2 * rendezvous_timeout + absl::Seconds(30))) {
    KillAll(serving.agents);
    ADD_FAILURE() << "the serving agents did not exit:\n"
                  << Describe(serving.agents);
  }
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
  const nlohmann::json status = Status("ctl-noprofile-status", address);
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
  std::vector<Child> agent = {Spawn(
      "serve-bad-model-agent",
      {Binary("worker_agent/dcp-agent"), "--scheduler=127.0.0.1:1", "--rank=0",
       "--mode=serve", "--model_config=" + missing, "--connect_timeout=60s"})};
  if (!WaitAll(agent, absl::Now() + absl::Seconds(30))) {
    KillAll(agent);
    FAIL() << "the agent did not fail at start-up:\n" << Describe(agent);
  }
  EXPECT_EQ(agent[0].exit_code, 1);
  const std::string err = ReadFile(agent[0].err_path);
  EXPECT_THAT(err, HasSubstr(missing));
  EXPECT_THAT(err, Not(HasSubstr("registered")));
}

}  // namespace
}  // namespace dcp
