// The control plane end to end: the real dcp-scheduler binary and eight
// real dcp-agent processes in execute mode (from the test's runfiles, no
// shell), over a skewed trace the test writes, on a world of 8 ranks with 4
// per "node" (groups may span nodes). Checks, from the agents' logs and
// `dcp-ctl --json status`, that every rank ran steps 0..49 in order, that
// the members of every task ran the same samples, that every sample of
// every step ran in exactly one task (against the scheduler's own step
// builder over the same trace), and that the timings reached the scheduler
// and refitted its cost model.
//
// A second test runs the same checks with the scheduler and eight agents
// (each training the model with its own executor) as threads of this process; a third runs
// dcp-agent in serve mode for trainers that use client_lib's sidecar mode.

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client_lib/client.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scheduler/planner/plan.h"
#include "scheduler/planner/step_builder.h"
#include "scheduler/server/scheduler_server.h"
#include "tests/child_process.h"
#include "tests/job_inputs.h"
#include "tests/sidecar_trainers.h"
#include "worker_agent/agent.h"
#include "worker_agent/model_executor.h"
#include "worker_agent/step_execution.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

using testing_process::AgentArgs;
using testing_process::Child;
using testing_process::CtlStatus;
using testing_process::Describe;
using testing_process::ExpectAllExit;
using testing_process::JobFlags;
using testing_process::JsonNumber;
using testing_process::KillAll;
using testing_process::ReadFile;
using testing_process::RunSidecarTrainers;
using testing_process::ServingAgents;
using testing_process::SidecarRun;
using testing_process::Spawn;
using testing_process::StartScheduler;
using testing_process::StartServingAgents;
using testing_process::StopScheduler;
using testing_process::TmpPath;
using testing_process::WaitAll;
using testing_process::WriteFile;

constexpr int kWorld = 8;
constexpr int kGpusPerNode = 4;
constexpr int64_t kWindow = 32768;
constexpr int64_t kTokensPerStep = 65536;
constexpr uint64_t kSeed = 0;
constexpr int kSteps = 50;
/// Sequence lengths run on the CPU are divided by this.
constexpr int kTokenScale = 64;

/// A skewed trace: mostly short samples, some medium, a few long ones (some
/// beyond the window). mt19937's raw output is the same everywhere.
std::vector<int32_t> SkewedLengths(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int kind = rng() % 100;
    if (kind < 80) {
      out.push_back(64 + rng() % 2000);
    } else if (kind < 96) {
      out.push_back(2000 + rng() % 14000);
    } else {
      out.push_back(16000 + rng() % 40000);
    }
  }
  return out;
}

/// The tiny transformer the plans are for: heads divisible by the world.
ModelSpec TinyModel() {
  ModelSpec model;
  model.name = "tiny-e2e";
  model.layers = 1;
  model.hidden = 256;
  model.heads = 8;
  model.kv_heads = 8;
  model.ffn = 512;
  model.vocab = 1000;
  model.causal = true;
  return model;
}

std::string ModelJson(const ModelSpec& m) {
  return nlohmann::json{{"name", m.name},         {"layers", m.layers},
                        {"hidden", m.hidden},     {"heads", m.heads},
                        {"kv_heads", m.kv_heads}, {"ffn", m.ffn},
                        {"vocab", m.vocab},       {"causal", m.causal}}
      .dump();
}

/// dcp-scheduler's flags for a job over `trace_path` of `world` ranks and
/// `steps` steps; `extra` comes last and so overrides the defaults here.
std::vector<std::string> SchedulerFlags(
    const std::string& trace_path, const std::string& model_path, int world,
    int steps, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> flags =
      JobFlags(trace_path, model_path,
               {/*world_size=*/world, /*gpus_per_node=*/kGpusPerNode,
                /*window=*/kWindow, /*tokens_per_step=*/kTokensPerStep,
                /*max_steps=*/steps});
  flags.insert(flags.end(), {absl::StrCat("--seed=", kSeed),
                             "--lookahead_steps=4", "--refit_every=16"});
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

/// dcp-agent in execute mode for rank `rank` of `world` at `address`
/// (`AgentArgs`, logging to `log_file`), training the model of
/// `model_path` at kTokenScale, its groups formed within 60 s.
std::vector<std::string> ExecuteAgentArgs(const std::string& address, int rank,
                                          int world,
                                          const std::string& model_path,
                                          const std::string& log_file) {
  std::vector<std::string> argv = AgentArgs(address, rank, world, log_file);
  argv.insert(argv.end(), {"--mode=execute", "--model_config=" + model_path,
                           absl::StrCat("--token_scale=", kTokenScale),
                           "--rendezvous_timeout=60s"});
  return argv;
}

// ---------------------------------------------------------------- checks

/// One task as one rank logged it.
struct TaskLine {
  int64_t step = 0;
  int rank = 0;
  int task_index = 0;
  int micro_step = 0;
  std::vector<int> group;
  std::vector<int64_t> samples;
  double seconds = 0;
};

/// Per rank: the steps it logged, in order, and its tasks.
struct RankLog {
  std::vector<int64_t> steps;
  std::vector<TaskLine> tasks;
};

/// Parses an agent's execute-mode log (FormatExecutionLog).
/// `synced`: the agent closed every step with a gradient sync (dcp-agent's
/// execute mode), so every step line has a positive sync_seconds.
RankLog ParseLog(const std::string& text, int rank, bool synced = false) {
  RankLog log;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      ADD_FAILURE() << "rank " << rank << ": bad log line: " << line;
      continue;
    }
    EXPECT_EQ(j.value("rank", -1), rank) << line;
    if (j.value("kind", "") == "step") {
      log.steps.push_back(j["step"].get<int64_t>());
      if (synced) {
        EXPECT_GT(j.value("sync_seconds", 0.0), 0.0) << line;
      }
      EXPECT_EQ(j["tasks"].get<int>(),
                std::count_if(log.tasks.begin(), log.tasks.end(),
                              [&](const TaskLine& t) {
                                return t.step == j["step"].get<int64_t>();
                              }))
          << line;
      continue;
    }
    TaskLine t;
    t.step = j["step"].get<int64_t>();
    t.rank = rank;
    t.task_index = j["task_index"].get<int>();
    t.micro_step = j["micro_step"].get<int>();
    t.group = j["group"].get<std::vector<int>>();
    t.samples = j["samples"].get<std::vector<int64_t>>();
    t.seconds = j["seconds"].get<double>();
    log.tasks.push_back(std::move(t));
  }
  return log;
}

/// The checks both tests make on what the ranks logged. Whether some group
/// spans two nodes is not one of them: that is the planner's choice, which
/// after refits from measured timings varies from run to run (the 50-step
/// run failed on it once the planner of issue 12 stopped planning one in its
/// first steps); the agents form a group the same way whichever nodes its
/// ranks are on.
void CheckRun(const std::vector<RankLog>& logs,
              const std::vector<int32_t>& lengths, int steps) {
  // Every rank ran steps 0..steps-1 in order, its tasks in micro-step
  // order.
  std::vector<int64_t> all_steps;
  for (int s = 0; s < steps; ++s) all_steps.push_back(s);
  for (size_t r = 0; r < logs.size(); ++r) {
    EXPECT_EQ(logs[r].steps, all_steps) << "rank " << r;
    int64_t step = -1;
    int micro = 0;
    for (const TaskLine& t : logs[r].tasks) {
      if (t.step != step) {
        EXPECT_GT(t.step, step) << "rank " << r;
        step = t.step;
        micro = 0;
      }
      EXPECT_EQ(t.micro_step, micro++) << "rank " << r << " step " << t.step;
      EXPECT_GT(t.seconds, 0);
    }
  }

  // Group agreement: every member of a task logged it, with the same
  // group and samples.
  struct Seen {
    std::vector<int> group;
    std::vector<int64_t> samples;
    std::set<int> ranks;
  };
  std::map<std::pair<int64_t, int>, Seen> tasks;
  int multi_rank_tasks = 0;
  for (const RankLog& log : logs) {
    for (const TaskLine& t : log.tasks) {
      auto [it, inserted] = tasks.try_emplace({t.step, t.task_index});
      Seen& seen = it->second;
      if (inserted) {
        seen.group = t.group;
        seen.samples = t.samples;
      } else {
        EXPECT_EQ(seen.group, t.group)
            << "step " << t.step << " task " << t.task_index;
        EXPECT_EQ(seen.samples, t.samples)
            << "step " << t.step << " task " << t.task_index;
      }
      seen.ranks.insert(t.rank);
    }
  }
  for (const auto& [key, seen] : tasks) {
    EXPECT_EQ(std::set<int>(seen.group.begin(), seen.group.end()), seen.ranks)
        << "step " << key.first << " task " << key.second;
    if (seen.group.size() > 1) ++multi_rank_tasks;
  }
  // The trace is skewed enough that groups form.
  EXPECT_GT(multi_rank_tasks, 0);

  // Every sample of every step ran in exactly one task, none twice: the
  // steps are the scheduler's step builder over the same trace.
  StepBuilderOptions options;
  options.tokens_per_step = kTokensPerStep;
  options.seed = kSeed;
  absl::StatusOr<std::vector<std::vector<int64_t>>> expected =
      BuildSteps(LengthView(lengths, kWindow), options, steps);
  ASSERT_TRUE(expected.ok()) << expected.status();
  std::map<int64_t, std::multiset<int64_t>> ran;
  for (const auto& [key, seen] : tasks) {
    ran[key.first].insert(seen.samples.begin(), seen.samples.end());
  }
  for (int s = 0; s < steps; ++s) {
    const std::multiset<int64_t> want((*expected)[s].begin(),
                                      (*expected)[s].end());
    EXPECT_EQ(ran[s], want) << "step " << s;
    EXPECT_EQ(std::set<int64_t>(ran[s].begin(), ran[s].end()).size(),
              ran[s].size())
        << "step " << s << " ran a sample twice";
  }
}

/// Whether some coefficient moved away from the initial value by more than
/// a relative 1e-6.
bool CoefficientsChanged(const std::map<std::string, double>& before,
                         const std::map<std::string, double>& after) {
  for (const auto& [name, value] : before) {
    auto it = after.find(name);
    if (it == after.end()) continue;
    if (std::abs(it->second - value) > 1e-6 * std::abs(value) + 1e-30) {
      return true;
    }
  }
  return false;
}

std::map<std::string, double> Coefficients(const nlohmann::json& status) {
  std::map<std::string, double> out;
  for (const auto& [name, value] : status["coefficients"].items()) {
    out[name] = JsonNumber(value);
  }
  return out;
}

// ----------------------------------------------------------------- tests

TEST(ControlPlaneE2eTest, EightAgentProcessesRunFiftyStepsOfTheScheduler) {
  const std::vector<int32_t> lengths = SkewedLengths(300, 17);
  std::string trace;
  for (int32_t l : lengths) absl::StrAppend(&trace, l, "\n");
  const std::string trace_path = TmpPath("trace.txt");
  const std::string model_path = TmpPath("model.json");
  ASSERT_TRUE(WriteFile(trace_path, trace));
  ASSERT_TRUE(WriteFile(model_path, ModelJson(TinyModel())));

  std::vector<Child> scheduler;
  const int port = StartScheduler(
      absl::StrCat("scheduler-", kWorld),
      SchedulerFlags(trace_path, model_path, kWorld, kSteps), scheduler);
  ASSERT_GT(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);

  // Before any timing: the data-sheet model (CostModel::FromSpecs).
  const nlohmann::json initial = CtlStatus("ctl-initial", address);
  ASSERT_FALSE(initial.is_discarded());
  EXPECT_EQ(JsonNumber(initial["refits"]), 0);

  const absl::Time started = absl::Now();
  std::vector<Child> agents;
  for (int r = 0; r < kWorld; ++r) {
    agents.push_back(
        Spawn(absl::StrCat("agent-", r),
              ExecuteAgentArgs(address, r, kWorld, model_path,
                               TmpPath(absl::StrCat("agent-", r, ".jsonl")))));
  }
  if (!WaitAll(agents, absl::Now() + absl::Seconds(150))) {
    KillAll(agents);
    KillAll(scheduler);
    FAIL() << "the agents did not finish in time:\n"
           << Describe(agents) << Describe(scheduler);
  }
  const absl::Duration run_time = absl::Now() - started;
  bool all_ok = true;
  for (const Child& a : agents) all_ok &= a.exit_code == 0;
  if (!all_ok) {
    KillAll(scheduler);
    FAIL() << "an agent failed:\n" << Describe(agents) << Describe(scheduler);
  }
  std::fprintf(stderr, "8 agents ran %d steps in %.1f s\n", kSteps,
               absl::ToDoubleSeconds(run_time));

  const nlohmann::json status = CtlStatus("ctl-status", address);
  ASSERT_FALSE(status.is_discarded());
  EXPECT_EQ(JsonNumber(status["planned_steps"]), kSteps);
  EXPECT_EQ(JsonNumber(status["completed_steps"]), kSteps);
  EXPECT_EQ(JsonNumber(status["timing_reports"]), kSteps * kWorld);
  EXPECT_GT(JsonNumber(status["refits"]), 0);
  EXPECT_EQ(status.value("planner_error", ""), "");
  EXPECT_TRUE(CoefficientsChanged(Coefficients(initial), Coefficients(status)))
      << "initial " << initial["coefficients"].dump() << "\nnow "
      << status["coefficients"].dump();
  // The agents' gradient syncs (a Gloo all-reduce on the CPU) taught the
  // scheduler a sync term other than the data sheet's.
  EXPECT_NE(Coefficients(status)["grad_sync"],
            Coefficients(initial)["grad_sync"]);

  StopScheduler(address, scheduler);

  std::vector<RankLog> logs;
  for (int r = 0; r < kWorld; ++r) {
    logs.push_back(ParseLog(
        ReadFile(TmpPath(absl::StrCat("agent-", r, ".jsonl"))), r,
        /*synced=*/true));
  }
  CheckRun(logs, lengths, kSteps);
}

// Agents told a model of 9 heads while the scheduler plans for 8: a task
// over one rank runs, the first one over a group (of 2, 4 or 8 ranks: none
// divides 9) cannot be split over its group. Every agent fails within a
// bound (its peers through the refused first collective and the world's
// agreement, not a timeout), the one that could not run the task names its
// rank, step and task, and the scheduler keeps every report the agents sent
// before. (With 12 heads only a group of 8 failed, and whether the planner
// makes one in 50 steps depends on its refits: a run here made none.)
TEST(ControlPlaneE2eTest, AgentsThatCannotRunAPlanFailNamingRankStepAndTask) {
  const std::vector<int32_t> lengths = SkewedLengths(300, 17);
  std::string trace;
  for (int32_t l : lengths) absl::StrAppend(&trace, l, "\n");
  const std::string trace_path = TmpPath("bad-trace.txt");
  const std::string model_path = TmpPath("bad-model.json");
  const std::string agent_model_path = TmpPath("bad-agent-model.json");
  ModelSpec nine_heads = TinyModel();
  nine_heads.heads = 9;
  nine_heads.kv_heads = 9;
  nine_heads.hidden = 9 * 16;
  ASSERT_TRUE(WriteFile(trace_path, trace));
  ASSERT_TRUE(WriteFile(model_path, ModelJson(TinyModel())));
  ASSERT_TRUE(WriteFile(agent_model_path, ModelJson(nine_heads)));

  std::vector<Child> scheduler;
  const int port = StartScheduler(
      "bad-scheduler", SchedulerFlags(trace_path, model_path, kWorld, kSteps),
      scheduler);
  ASSERT_GT(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);
  std::vector<Child> agents;
  for (int r = 0; r < kWorld; ++r) {
    // The nine-head model: the scheduler plans for eight.
    agents.push_back(Spawn(
        absl::StrCat("bad-agent-", r),
        ExecuteAgentArgs(address, r, kWorld, agent_model_path,
                         TmpPath(absl::StrCat("bad-agent-", r, ".jsonl")))));
  }
  // Far below the 60 s a peer waiting out a timeout would take.
  const absl::Time started = absl::Now();
  ASSERT_TRUE(ExpectAllExit(agents, started + absl::Seconds(45),
                            "agents that cannot run a plan must fail"));
  int64_t logged_steps = 0;
  bool named = false;
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_NE(agents[r].exit_code, 0) << Describe({agents[r]});
    const std::string err = ReadFile(agents[r].err_path);
    EXPECT_THAT(err, HasSubstr(absl::StrCat("rank ", r, ", step ")));
    named |= err.find("to divide the") != std::string::npos &&
             err.find(", task ") != std::string::npos;
    const std::string log =
        ReadFile(TmpPath(absl::StrCat("bad-agent-", r, ".jsonl")));
    logged_steps += ParseLog(log, r).steps.size();
  }
  EXPECT_TRUE(named) << Describe(agents);
  std::fprintf(stderr, "8 agents failed within %.1f s:\n%s",
               absl::ToDoubleSeconds(absl::Now() - started),
               Describe(agents, 400).c_str());
  const nlohmann::json status = CtlStatus("bad-ctl", address);
  ASSERT_FALSE(status.is_discarded());
  // An agent logs a step before it reports it, and reports before it asks
  // for the next: every logged step's report reached the scheduler.
  EXPECT_EQ(JsonNumber(status["timing_reports"]), logged_steps);
  StopScheduler(address, scheduler);
}

TEST(ControlPlaneE2eTest, ProfileAtStartRefitsBeforeTheFirstStep) {
  constexpr int kProfileWorld = 4;
  constexpr int kProfileSteps = 5;
  const std::vector<int32_t> lengths = SkewedLengths(200, 23);
  std::string trace;
  for (int32_t l : lengths) absl::StrAppend(&trace, l, "\n");
  const std::string trace_path = TmpPath("profile-trace.txt");
  const std::string model_path = TmpPath("profile-model.json");
  ASSERT_TRUE(WriteFile(trace_path, trace));
  ASSERT_TRUE(WriteFile(model_path, ModelJson(TinyModel())));

  // Timings never refit here (too few observations for refit_every), so any
  // refit comes from the profile.
  std::vector<Child> scheduler;
  const int port = StartScheduler(
      absl::StrCat("scheduler-", kProfileWorld),
      SchedulerFlags(trace_path, model_path, kProfileWorld, kProfileSteps,
                     {"--refit_every=100000", "--profile_at_start",
                      "--profile_timeout=60s"}),
      scheduler);
  ASSERT_GT(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);

  std::vector<Child> agents;
  for (int r = 0; r < kProfileWorld; ++r) {
    agents.push_back(
        Spawn(absl::StrCat("profile-agent-", r),
              ExecuteAgentArgs(
                  address, r, kProfileWorld, model_path,
                  TmpPath(absl::StrCat("profile-agent-", r, ".jsonl")))));
  }
  if (!WaitAll(agents, absl::Now() + absl::Seconds(120))) {
    KillAll(agents);
    KillAll(scheduler);
    FAIL() << "the agents did not finish in time:\n"
           << Describe(agents) << Describe(scheduler);
  }
  bool all_ok = true;
  for (const Child& a : agents) all_ok &= a.exit_code == 0;
  if (!all_ok) {
    KillAll(scheduler);
    FAIL() << "an agent failed:\n" << Describe(agents) << Describe(scheduler);
  }

  // The grid: lengths {256, 1024, 4096, 16384, 32768} (the default, to the
  // window; the tiny model fits them all) x recompute {0, 1}; lengths up to
  // kProfileAllGroupsUpToLength (4096) for p in {1, 2, 4} (the divisors of 8
  // heads and 4 ranks within a 4-GPU node), p > 1 both as plain Ulysses and
  // as a ring of two (ProfiledDegrees), each group's first rank reporting:
  // 4 + 2 x 2 + 1 x 2 groups and shapes; the two longer ones on the one
  // group of 4 as plain Ulysses.
  constexpr int kEntries = 3 * 2 * (4 + 2 * 2 + 1 * 2) + 2 * 2 * 1;
  const nlohmann::json status = CtlStatus("ctl-profile-status", address);
  ASSERT_FALSE(status.is_discarded());
  EXPECT_EQ(JsonNumber(status["completed_steps"]), kProfileSteps);
  EXPECT_EQ(JsonNumber(status["timing_reports"]),
            kProfileSteps * kProfileWorld);
  EXPECT_GE(JsonNumber(status["refits"]), 1);
  EXPECT_GE(JsonNumber(status["observations"]), kEntries);
  EXPECT_EQ(status.value("planner_error", ""), "");

  StopScheduler(address, scheduler);
  // Every rank answered before the timeout, and planning started after.
  const std::string log = ReadFile(scheduler[0].err_path);
  const size_t profiled = log.find(
      absl::StrCat("profile done: 4 ranks answered, ", kEntries, " "));
  EXPECT_NE(profiled, std::string::npos) << log;
  const size_t first_step = log.find(" step 0 (");
  EXPECT_LT(profiled, first_step) << log;
  int profiled_entries = 0;
  for (int r = 0; r < kProfileWorld; ++r) {
    const std::string err = ReadFile(agents[r].err_path);
    const size_t at = err.find("profiled ");
    ASSERT_NE(at, std::string::npos) << err;
    int n = 0;
    ASSERT_TRUE(absl::SimpleAtoi(
        err.substr(at + 9, err.find(' ', at + 9) - at - 9), &n))
        << err;
    profiled_entries += n;
  }
  EXPECT_EQ(profiled_entries, kEntries);

  std::vector<RankLog> logs;
  for (int r = 0; r < kProfileWorld; ++r) {
    logs.push_back(ParseLog(
        ReadFile(TmpPath(absl::StrCat("profile-agent-", r, ".jsonl"))), r));
  }
  // All steps ran on every rank (CheckRun's other checks assume the 8-rank,
  // two-node world).
  const std::vector<int64_t> all_steps = {0, 1, 2, 3, 4};
  for (int r = 0; r < kProfileWorld; ++r) {
    EXPECT_EQ(logs[r].steps, all_steps) << "rank " << r;
  }
}

TEST(ControlPlaneE2eTest, EightInProcessAgentsRunTheSameChecks) {
  constexpr int kInProcessSteps = 12;
  const std::vector<int32_t> lengths = SkewedLengths(300, 17);
  SchedulerServerOptions options;
  options.listen_address = "127.0.0.1:0";
  ControlPlaneOptions& cp = options.control_plane;
  cp.lengths = lengths;
  cp.window = kWindow;
  cp.tokens_per_step = kTokensPerStep;
  cp.seed = kSeed;
  cp.model = TinyModel();
  cp.world_size = kWorld;
  cp.cluster.gpus_per_node = kGpusPerNode;
  cp.max_steps = kInProcessSteps;
  cp.lookahead_steps = 4;
  cp.refit_every = 16;
  absl::StatusOr<std::unique_ptr<SchedulerServer>> server =
      SchedulerServer::Start(std::move(options));
  ASSERT_TRUE(server.ok()) << server.status();

  std::vector<std::string> texts(kWorld);
  std::vector<absl::Status> results(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      AgentOptions agent_options;
      agent_options.scheduler_address = (*server)->address();
      agent_options.rank = r;
      agent_options.world_size = kWorld;
      agent_options.rendezvous_timeout = absl::Seconds(60);
      agent_options.warm_groups = false;  // The executor forms its own.
      absl::StatusOr<std::unique_ptr<Agent>> agent =
          Agent::Start(agent_options);
      if (!agent.ok()) {
        results[r] = agent.status();
        return;
      }
      ModelExecutorOptions executor_options;
      executor_options.model = TinyModel();
      executor_options.rank = r;
      executor_options.world_size = kWorld;
      executor_options.session_id = (*agent)->registration().session_id();
      executor_options.token_scale = kTokenScale;
      executor_options.torch_threads = 1;
      executor_options.group_timeout = absl::Seconds(60);
      absl::StatusOr<std::unique_ptr<ModelExecutor>> executor =
          ModelExecutor::Create(executor_options,
                                (*agent)->rendezvous_store());
      if (!executor.ok()) {
        results[r] = executor.status();
        return;
      }
      int64_t last = -1;
      while (true) {
        absl::StatusOr<NextStepResult> next =
            (*agent)->NextStep(last, absl::Seconds(60));
        if (!next.ok()) {
          results[r] = next.status();
          break;
        }
        if (next->drained) break;
        absl::StatusOr<StepExecution> done = (*executor)->RunStep(next->step);
        if (!done.ok()) {
          results[r] = done.status();
          break;
        }
        texts[r] += FormatExecutionLog(next->step, *done);
        if (absl::Status s = (*agent)->ReportTimings(done->report); !s.ok()) {
          results[r] = s;
          break;
        }
        last = next->step.step();
      }
      // A rank that failed aborts its groups so the others do not hang.
      executor->reset();
      (*agent)->Shutdown();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
  }
  const v1::StatusResponse status = (*server)->control_plane().Status();
  EXPECT_EQ(status.completed_steps(), kInProcessSteps);
  EXPECT_EQ(status.timing_reports(), kInProcessSteps * kWorld);
  EXPECT_GT(status.refits(), 0);

  std::vector<RankLog> logs;
  for (int r = 0; r < kWorld; ++r) logs.push_back(ParseLog(texts[r], r));
  CheckRun(logs, lengths, kInProcessSteps);
}

TEST(ControlPlaneE2eTest, ServeModeAgentsFeedSidecarTrainers) {
  constexpr int kServeWorld = 2;
  constexpr int kServeSteps = 6;
  std::string trace;
  for (int32_t l : SkewedLengths(300, 17)) absl::StrAppend(&trace, l, "\n");
  const std::string trace_path = TmpPath("serve-trace.txt");
  const std::string model_path = TmpPath("serve-model.json");
  ASSERT_TRUE(WriteFile(trace_path, trace));
  ASSERT_TRUE(WriteFile(model_path, ModelJson(TinyModel())));
  std::vector<Child> scheduler;
  const int port = StartScheduler(
      absl::StrCat("scheduler-", kServeWorld),
      SchedulerFlags(trace_path, model_path, kServeWorld, kServeSteps),
      scheduler);
  ASSERT_GT(port, 0);
  const std::string address = absl::StrCat("127.0.0.1:", port);

  ServingAgents serving = StartServingAgents("serve", address, kServeWorld, {});
  ASSERT_FALSE(serving.dir.empty());
  ClientOptions options;
  options.rpc_timeout = absl::Seconds(30);
  options.step_timeout = absl::Seconds(30);
  const SidecarRun run = RunSidecarTrainers(serving.sockets, options);
  // The agents exit 0 once their trainer was told the job is drained.
  ExpectAllExit(serving.agents, absl::Now() + absl::Seconds(30),
                "the serving agents did not exit");
  for (int r = 0; r < kServeWorld; ++r) {
    EXPECT_TRUE(run.results[r].ok()) << "rank " << r << ": " << run.results[r];
    EXPECT_EQ(run.steps[r], std::vector<int64_t>({0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(serving.agents[r].exit_code, 0) << Describe(serving.agents);
  }
  const nlohmann::json status = CtlStatus("ctl-serve-status", address);
  ASSERT_FALSE(status.is_discarded());
  EXPECT_EQ(JsonNumber(status["timing_reports"]), kServeSteps * kServeWorld);
  StopScheduler(address, scheduler);
  rmdir(serving.dir.c_str());
}

}  // namespace
}  // namespace dcp
