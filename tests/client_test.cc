// Tests of the client library against a real in-process SchedulerServer on
// 127.0.0.1:0, with two ranks as threads. The cc_test is //tests:client_test
// (the server's target is visible to //tests only).

#include "client_lib/client.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "comm/collectives.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/planner/plan.h"
#include "scheduler/planner/step_builder.h"
#include "scheduler/server/scheduler_server.h"
#include "worker_agent/agent.h"
#include "worker_agent/agent_service.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int kWorld = 2;
constexpr int64_t kWindow = 32768;
constexpr int64_t kTokensPerStep = 65536;

/// Every eighth sample is long enough that the planner splits it over both
/// ranks, so steps use the group [0, 1].
std::vector<int32_t> Lengths() {
  std::vector<int32_t> lengths;
  for (int i = 0; i < 64; ++i) {
    lengths.push_back(i % 8 == 0 ? 32768 : 256 + (i * 97) % 2048);
  }
  return lengths;
}

std::unique_ptr<SchedulerServer> StartServer(int64_t max_steps) {
  SchedulerServerOptions options;
  options.listen_address = "127.0.0.1:0";
  ControlPlaneOptions& cp = options.control_plane;
  cp.lengths = Lengths();
  cp.window = kWindow;
  cp.tokens_per_step = kTokensPerStep;
  cp.model.name = "tiny";
  cp.model.layers = 2;
  cp.model.hidden = 512;
  cp.model.heads = 8;
  cp.model.kv_heads = 8;
  cp.model.ffn = 1024;
  cp.world_size = kWorld;
  cp.lookahead_steps = 2;
  cp.max_steps = max_steps;
  absl::StatusOr<std::unique_ptr<SchedulerServer>> server =
      SchedulerServer::Start(std::move(options));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

ClientOptions InProcess(const SchedulerServer& server, int rank) {
  ClientOptions options;
  options.mode = ClientOptions::Mode::kInProcess;
  options.agent.scheduler_address = server.address();
  options.agent.rank = rank;
  options.agent.world_size = kWorld;
  options.agent.rendezvous_timeout = absl::Seconds(20);
  options.step_timeout = absl::Seconds(30);
  return options;
}

/// What one rank saw.
struct RankLog {
  absl::Status status;
  std::vector<int64_t> steps;
  /// step -> task index -> samples.
  std::map<int64_t, std::map<int, std::vector<int64_t>>> tasks;
  /// step -> sum of the loss weights of the tasks this rank leads.
  std::map<int64_t, double> weights;
  int groups_used = 0;
  /// Gradient syncs over the data-parallel group (in-process mode).
  int syncs = 0;
  bool drained = false;
};

/// The ~10-line training loop of the client's documentation, with an
/// all-reduce on every group as the "model".
void TrainingLoop(Client& client, RankLog& log) {
  while (true) {
    absl::StatusOr<Step> step = client.NextStep();
    if (!step.ok()) {
      log.status = step.status();
      return;
    }
    if (step->drained) {
      log.drained = true;
      return;
    }
    log.steps.push_back(step->step);
    std::vector<double> seconds;
    for (const StepTask& task : step->tasks) {
      log.tasks[step->step][task.task_index] = task.samples;
      if (task.group_ranks.front() == client.rank()) {
        for (double w : task.loss_weights) log.weights[step->step] += w;
      }
      if (task.group_ranks.size() > 1) {
        if (task.group == nullptr) {
          log.status = absl::InternalError("no process group for a group");
          return;
        }
        double value = client.rank() + 1;
        absl::Status s = AllReduceSum(*task.group, absl::MakeSpan(&value, 1));
        if (!s.ok() || value != 1 + 2) {
          log.status = absl::InternalError(
              absl::StrCat("all-reduce: ", s.ToString(), " -> ", value));
          return;
        }
        ++log.groups_used;
      }
      seconds.push_back(0.01 * static_cast<double>(task.samples.size()));
    }
    // The gradient sync: in-process, over the client's data-parallel group.
    double sync_seconds = 0;
    if (client.agent() != nullptr) {
      absl::StatusOr<c10d::ProcessGroup*> world = client.DataParallelGroup();
      if (!world.ok()) {
        log.status = world.status();
        return;
      }
      double gradient = client.rank() + 1;
      const absl::Time start = absl::Now();
      absl::Status s = AllReduceSum(**world, absl::MakeSpan(&gradient, 1));
      sync_seconds = absl::ToDoubleSeconds(absl::Now() - start);
      if (!s.ok() || gradient != 1 + 2) {
        log.status = absl::InternalError(
            absl::StrCat("gradient sync: ", s.ToString(), " -> ", gradient));
        return;
      }
      ++log.syncs;
    } else if (client.DataParallelGroup().status().code() !=
               absl::StatusCode::kFailedPrecondition) {
      log.status = absl::InternalError("sidecar mode handed out a group");
      return;
    }
    absl::Status reported = client.ReportStep(*step, seconds, sync_seconds);
    if (!reported.ok()) {
      log.status = reported;
      return;
    }
  }
}

/// Runs TrainingLoop on every client, a thread each, and returns each rank's
/// log once all are done.
std::vector<RankLog> RunTrainingLoops(
    const std::vector<std::unique_ptr<Client>>& clients) {
  std::vector<RankLog> logs(clients.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < clients.size(); ++r) {
    threads.emplace_back([&, r] { TrainingLoop(*clients[r], logs[r]); });
  }
  for (std::thread& t : threads) t.join();
  return logs;
}

/// What every rank's loop shows after a run of `steps` steps: no error, the
/// end reached, steps 0 to `steps` - 1 in order, a group used, and one
/// gradient sync a step over the data-parallel group.
void ExpectEveryRankRan(const std::vector<RankLog>& logs, int64_t steps) {
  std::vector<int64_t> numbers(steps);
  std::iota(numbers.begin(), numbers.end(), 0);
  for (size_t r = 0; r < logs.size(); ++r) {
    ASSERT_TRUE(logs[r].status.ok()) << "rank " << r << ": " << logs[r].status;
    EXPECT_TRUE(logs[r].drained);
    EXPECT_THAT(logs[r].steps, ElementsAreArray(numbers)) << "rank " << r;
    EXPECT_GE(logs[r].groups_used, 1) << "rank " << r;
    EXPECT_EQ(logs[r].syncs, steps) << "rank " << r;
  }
}

/// The expected steps: the scheduler's step builder from the same trace.
std::vector<std::vector<int64_t>> ExpectedSteps(int64_t steps) {
  const std::vector<int32_t> lengths = Lengths();
  StepBuilderOptions options;
  options.tokens_per_step = kTokensPerStep;
  options.seed = 0;
  absl::StatusOr<std::vector<std::vector<int64_t>>> built =
      BuildSteps(LengthView(lengths, kWindow), options, steps);
  EXPECT_TRUE(built.ok()) << built.status();
  return built.ok() ? *built : std::vector<std::vector<int64_t>>();
}

TEST(ClientTest, InProcessTwoRanksRunFiveSteps) {
  constexpr int64_t kSteps = 5;
  auto server = StartServer(kSteps);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<Client>> clients(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Connect(InProcess(*server, r));
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_EQ((*client)->rank(), r);
    clients[r] = *std::move(client);
  }
  std::vector<RankLog> logs = RunTrainingLoops(clients);
  ASSERT_NO_FATAL_FAILURE(ExpectEveryRankRan(logs, kSteps));
  // Members of a task saw the same samples; every sample of every step is
  // in exactly one task.
  const std::vector<std::vector<int64_t>> expected = ExpectedSteps(kSteps);
  ASSERT_EQ(expected.size(), static_cast<size_t>(kSteps));
  for (int64_t s = 0; s < kSteps; ++s) {
    std::map<int, std::vector<int64_t>> tasks;
    for (int r = 0; r < kWorld; ++r) {
      for (const auto& [index, samples] : logs[r].tasks[s]) {
        auto [it, inserted] = tasks.emplace(index, samples);
        if (!inserted) {
          EXPECT_EQ(it->second, samples) << "step " << s << " task " << index;
        }
      }
    }
    std::multiset<int64_t> seen;
    for (const auto& [index, samples] : tasks) {
      seen.insert(samples.begin(), samples.end());
    }
    EXPECT_EQ(seen,
              std::multiset<int64_t>(expected[s].begin(), expected[s].end()))
        << "step " << s;
    double weights = 0;
    for (int r = 0; r < kWorld; ++r) weights += logs[r].weights[s];
    EXPECT_NEAR(weights, 1.0, 1e-9) << "step " << s;
  }
  const v1::StatusResponse status = server->control_plane().Status();
  EXPECT_EQ(status.completed_steps(), kSteps);
  EXPECT_EQ(status.timing_reports(), kSteps * kWorld);
  for (int r = 0; r < kWorld; ++r) {
    const AgentStats stats = clients[r]->agent()->Stats();
    EXPECT_EQ(stats.steps_delivered, kSteps);
    // [0, 1] twice: the tasks' sequence-parallel group and the gradient
    // sync's data-parallel group, each formed once.
    EXPECT_EQ(stats.groups_live, 2);
  }
}

TEST(ClientTest, ReportStepChecksItsInput) {
  auto server = StartServer(1);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<Client>> clients(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Connect(InProcess(*server, r));
    ASSERT_TRUE(client.ok()) << client.status();
    clients[r] = *std::move(client);
  }
  // Both ranks fetch step 0 (their groups form together).
  std::vector<absl::StatusOr<Step>> steps(kWorld, absl::UnknownError(""));
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] { steps[r] = clients[r]->NextStep(); });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(steps[0].ok()) << steps[0].status();
  ASSERT_FALSE(steps[0]->tasks.empty());
  EXPECT_EQ(clients[0]
                ->ReportStep(*steps[0], std::vector<double>(
                                            steps[0]->tasks.size() + 1, 1.0))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(clients[0]
                ->ReportStep(*steps[0],
                             std::vector<double>(steps[0]->tasks.size(), 0.0))
                .code(),
            absl::StatusCode::kInvalidArgument);
  for (double bad_sync : {-1.0, std::nan(""), HUGE_VAL}) {
    EXPECT_EQ(clients[0]
                  ->ReportStep(*steps[0],
                               std::vector<double>(steps[0]->tasks.size(), 0.5),
                               bad_sync)
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << bad_sync;
  }
  EXPECT_TRUE(clients[0]
                  ->ReportStep(*steps[0],
                               std::vector<double>(steps[0]->tasks.size(), 0.5),
                               /*sync_seconds=*/0.25)
                  .ok());
}

TEST(ClientTest, ConnectRejectsBadOptions) {
  ClientOptions options;
  options.mode = ClientOptions::Mode::kInProcess;
  options.agent.rank = 0;  // No scheduler address.
  EXPECT_EQ(Client::Connect(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.mode = ClientOptions::Mode::kSidecar;
  options.rank = 0;
  EXPECT_EQ(Client::Connect(options).status().code(),
            absl::StatusCode::kInvalidArgument);  // No socket.
  options.agent_socket = "/nonexistent-dcp-dir/agent.sock";
  options.rpc_timeout = absl::Milliseconds(200);
  absl::Status status = Client::Connect(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("dcp-agent"));
}

TEST(ClientTest, SidecarTwoRanksThroughAgentSockets) {
  constexpr int64_t kSteps = 3;
  auto server = StartServer(kSteps);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<Agent>> agents(kWorld);
  std::vector<std::unique_ptr<AgentServer>> sockets(kWorld);
  std::vector<std::unique_ptr<Client>> clients(kWorld);
  // Unix socket paths are short (108 bytes): not under TEST_TMPDIR, but in
  // a directory of this run's own (sandboxes share /tmp and pids).
  char dir[] = "/tmp/dcp-client-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  for (int r = 0; r < kWorld; ++r) {
    AgentOptions agent_options = InProcess(*server, r).agent;
    absl::StatusOr<std::unique_ptr<Agent>> agent = Agent::Start(agent_options);
    ASSERT_TRUE(agent.ok()) << agent.status();
    agents[r] = *std::move(agent);
    AgentServerOptions socket_options;
    socket_options.socket_path = absl::StrCat(dir, "/agent-", r, ".sock");
    socket_options.agent = agents[r].get();
    absl::StatusOr<std::unique_ptr<AgentServer>> socket =
        AgentServer::Start(socket_options);
    ASSERT_TRUE(socket.ok()) << socket.status();
    sockets[r] = *std::move(socket);

    ClientOptions options;
    options.mode = ClientOptions::Mode::kSidecar;
    options.agent_socket = sockets[r]->address();
    options.rank = r;
    options.step_timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_EQ((*client)->agent(), nullptr);
    clients[r] = *std::move(client);
  }
  std::vector<RankLog> logs(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      RankLog& log = logs[r];
      while (true) {
        absl::StatusOr<Step> step = clients[r]->NextStep();
        if (!step.ok()) {
          log.status = step.status();
          return;
        }
        if (step->drained) {
          log.drained = true;
          return;
        }
        log.steps.push_back(step->step);
        std::vector<double> seconds;
        for (const StepTask& task : step->tasks) {
          // Sidecar: no communicator crosses the socket, only where to
          // form one.
          if (task.group != nullptr ||
              (task.group_ranks.size() > 1) == task.rendezvous_prefix.empty()) {
            log.status = absl::InternalError("unexpected group handle");
            return;
          }
          if (task.group_ranks.size() > 1) ++log.groups_used;
          seconds.push_back(0.02);
        }
        absl::Status reported = clients[r]->ReportStep(*step, seconds);
        if (!reported.ok()) {
          log.status = reported;
          return;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(logs[r].status.ok()) << "rank " << r << ": " << logs[r].status;
    EXPECT_TRUE(logs[r].drained);
    EXPECT_THAT(logs[r].steps, ElementsAre(0, 1, 2));
    EXPECT_GE(logs[r].groups_used, 1);
    EXPECT_TRUE(agents[r]->WaitForDrainDelivered(absl::Seconds(1)).ok());
  }
  EXPECT_EQ(server->control_plane().Status().timing_reports(), kSteps * kWorld);
  // A report of another rank through rank 0's socket is refused by its
  // agent, before it reaches the scheduler.
  ClientOptions wrong;
  wrong.mode = ClientOptions::Mode::kSidecar;
  wrong.agent_socket = sockets[0]->address();
  wrong.rank = 1;
  absl::StatusOr<std::unique_ptr<Client>> impostor = Client::Connect(wrong);
  ASSERT_TRUE(impostor.ok()) << impostor.status();
  Step step0;
  step0.step = 0;
  absl::Status refused = (*impostor)->ReportStep(step0, {});
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("rank 1"));
  for (int r = 0; r < kWorld; ++r) {
    agents[r]->Shutdown();
    sockets[r]->Shutdown();
  }
  rmdir(dir);
}

}  // namespace
}  // namespace dcp
