// dcp-node-relay between real processes: a dcp-scheduler, a relay in front
// of it, and four simulate-mode dcp-agents pointed at the relay (nothing
// else changed in their command lines).
//   - the job runs every step, every sample exactly once, and the
//     scheduler's metrics show node streams only: StreamNodePlans and
//     StreamNodeReports calls, no per-rank StreamPlans or StreamReports;
//   - an agent SIGKILLed and started again behind the relay rejoins (its
//     new plan stream goes upstream on its own) and the job ends;
//   - a relay with the wrong bearer token: the agent gets the scheduler's
//     UNAUTHENTICATED, its message as the scheduler wrote it.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_credentials.h"
#include "common/metrics/metrics_testing.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"
#include "tests/elastic_job.h"
#include "tests/job_inputs.h"

namespace dcp {
namespace {

using testing_process::Binary;
using testing_process::Child;
using testing_process::ChildReaper;
using testing_process::CtlStatus;
using testing_process::ElasticJob;
using testing_process::ElasticJobTest;
using testing_process::JsonNumber;
using testing_process::ReadFile;
using testing_process::Spawn;
using testing_process::StartSchedulerIncarnation;
using testing_process::TmpPath;
using testing_process::WaitForPortFile;
using testing_process::WriteFile;

constexpr int kWorld = 4;
constexpr int kSteps = 16;
constexpr int kVictim = 2;
constexpr int64_t kKillAfter = 3;

/// `FourRankJob` on one node (one relay for all four) over a trace and
/// step draw of its own.
ElasticJob RelayedJob() {
  ElasticJob job = testing_process::FourRankJob(kSteps);
  job.shape.gpus_per_node = kWorld;
  job.shape.seed = 7;
  job.trace =
      testing_process::LcgTrace(300, 23, 100, testing_process::SkewedLength);
  job.agent_flags = testing_process::SimulateModeFlags();
  return job;
}

/// The sum of the samples of `family` whose labels include every one of
/// `labels` (`name="value"` pairs) in a Prometheus text exposition; 0 when
/// none matches (a counter never incremented is not exported).
double SumSamples(const std::string& text, const std::string& family,
                  const std::vector<std::string>& labels) {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, family + "{")) continue;
    bool match = true;
    for (const std::string& label : labels) {
      match = match && absl::StrContains(line, label);
    }
    double value = 0;
    const size_t space = line.rfind(' ');
    if (match && space != absl::string_view::npos &&
        absl::SimpleAtod(line.substr(space + 1), &value)) {
      sum += value;
    }
  }
  return sum;
}

class NodeRelayE2eTest : public ElasticJobTest {
 protected:
  NodeRelayE2eTest() : ElasticJobTest(RelayedJob()) {}

  void TearDown() override {
    // dcp-ctl stops the scheduler directly, not through the relay.
    address_ = scheduler_address_;
    ElasticJobTest::TearDown();
  }

  /// Starts the scheduler (with `scheduler_flags` and its metrics on
  /// 127.0.0.1:0), then a relay in front of it with `relay_flags`; agents
  /// started from here on reach the relay. False on failure.
  bool StartSchedulerAndRelay(const std::vector<std::string>& scheduler_flags,
                              const std::vector<std::string>& relay_flags) {
    std::vector<std::string> flags = SchedulerFlags(scheduler_flags);
    flags.push_back("--metrics_listen=127.0.0.1:0");
    flags.push_back("--metrics_port_file=" + MetricsPortPath());
    const int port = StartSchedulerIncarnation(prefix() + "-scheduler", flags,
                                               0, scheduler_);
    if (port <= 0) return false;
    scheduler_address_ = absl::StrCat("127.0.0.1:", port);
    metrics_port_ = WaitForPortFile(MetricsPortPath(), scheduler_[0],
                                    absl::Now() + job_.patience);
    std::vector<std::string> argv = {
        Binary("worker_agent/relay/dcp-node-relay"), "--listen=127.0.0.1:0",
        "--scheduler=" + scheduler_address_,
        "--port_file=" + TmpPath(prefix() + "-relay.port")};
    argv.insert(argv.end(), relay_flags.begin(), relay_flags.end());
    relay_.push_back(Spawn(prefix() + "-relay", argv));
    const int relay_port =
        WaitForPortFile(TmpPath(prefix() + "-relay.port"), relay_.back(),
                        absl::Now() + job_.patience);
    if (relay_port <= 0 || metrics_port_ <= 0) return false;
    address_ = absl::StrCat("127.0.0.1:", relay_port);
    return true;
  }

  void StartAgents() {
    for (int r = 0; r < kWorld; ++r) agents_.push_back(StartAgent(r, ""));
  }

  std::string Scrape() {
    absl::StatusOr<TestHttpResponse> response =
        HttpRequestForTest("127.0.0.1", metrics_port_, "GET", "/metrics");
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? response->body : "";
  }

  /// dcp_scheduler_rpcs_total of `method` (every code, or `code`).
  static double Rpcs(const std::string& text, const std::string& method,
                     const std::string& code = "") {
    std::vector<std::string> labels = {"method=\"" + method + "\""};
    if (!code.empty()) labels.push_back("code=\"" + code + "\"");
    return SumSamples(text, "dcp_scheduler_rpcs_total", labels);
  }

  std::string MetricsPortPath() const {
    return TmpPath(prefix() + "-scheduler.metrics_port");
  }

  std::string scheduler_address_;
  int metrics_port_ = 0;
  std::vector<Child> relay_;
  ChildReaper relay_reaper_{{&relay_}};
};

TEST_F(NodeRelayE2eTest, AJobRunsThroughTheRelayOnNodeStreamsOnly) {
  // A wide window, so that the four agents starting one after another
  // share one upstream plan stream even on a loaded machine.
  ASSERT_TRUE(StartSchedulerAndRelay({}, {"--gather_window=2s"}))
      << reaper_.Describe(4000) << relay_reaper_.Describe(4000);
  StartAgents();
  ExpectAgentsFinish();
  ExpectEveryStepAndSampleOnce();
  const nlohmann::json done = CtlStatus("ctl-done", scheduler_address_);
  EXPECT_EQ(JsonNumber(done["completed_steps"]), kSteps);

  // A node stream is counted as it ends, which is after the last agent may
  // have taken its drain message: scrape until it shows.
  const absl::Time deadline = absl::Now() + job_.patience;
  std::string metrics = Scrape();
  while (Rpcs(metrics, "StreamNodePlans") == 0 && absl::Now() < deadline) {
    metrics = Scrape();
  }
  const double node_plans = Rpcs(metrics, "StreamNodePlans");
  std::fprintf(stderr, "upstream StreamNodePlans calls for %d agents: %g\n",
               kWorld, node_plans);
  EXPECT_GE(node_plans, 1);
  EXPECT_LE(node_plans, kWorld);
  EXPECT_EQ(Rpcs(metrics, "StreamPlans"), 0) << metrics;
  EXPECT_EQ(Rpcs(metrics, "StreamReports"), 0) << metrics;
  EXPECT_EQ(Rpcs(metrics, "ReportTimings"), 0) << metrics;
  // Every rank's report of every step, each answered once.
  EXPECT_EQ(Rpcs(metrics, "StreamNodeReports", "OK"), kWorld * kSteps)
      << metrics;
  EXPECT_GT(Rpcs(metrics, "Register", "OK"), 0);
}

TEST_F(NodeRelayE2eTest, AnAgentKilledBehindTheRelayRejoins) {
  ASSERT_TRUE(StartSchedulerAndRelay(
      {"--rank_timeout=60s", "--on_rank_failure=hold"}, {}))
      << reaper_.Describe(4000) << relay_reaper_.Describe(4000);
  StartAgents();
  ASSERT_TRUE(AwaitOutput([this] { return Ran(kVictim, kKillAfter); }))
      << reaper_.Describe(4000);
  testing_process::KillAndReap(agents_[kVictim]);
  agents_[kVictim] = StartAgent(kVictim, "-again");
  ExpectAgentsFinish();
  ExpectEveryStepAndSampleOnce();

  const std::string log = ReadFile(scheduler_[0].err_path);
  EXPECT_FALSE(absl::StrContains(log, "rank failure")) << log;
  const nlohmann::json done = CtlStatus("ctl-done", scheduler_address_);
  EXPECT_EQ(JsonNumber(done["completed_steps"]), kSteps);
  EXPECT_EQ(JsonNumber(done["rank_failures"]), 0);
  const std::string metrics = Scrape();
  EXPECT_EQ(Rpcs(metrics, "StreamPlans"), 0) << metrics;
  // The first agent of the rank registered, and so did its successor.
  EXPECT_GE(Rpcs(metrics, "Register", "OK"), kWorld + 1) << metrics;
}

TEST_F(NodeRelayE2eTest, ARelayWithAWrongTokenGetsTheSchedulersRefusal) {
  const std::string right(32, 'a');
  const std::string wrong(32, 'b');
  ASSERT_TRUE(WriteFile(TmpPath("right.token"), right + "\n"));
  ASSERT_TRUE(WriteFile(TmpPath("wrong.token"), wrong + "\n"));
  ASSERT_TRUE(
      StartSchedulerAndRelay({"--auth_token_file=" + TmpPath("right.token")},
                             {"--auth_token_file=" + TmpPath("wrong.token")}))
      << reaper_.Describe(4000) << relay_reaper_.Describe(4000);
  agents_.push_back(StartAgent(0, ""));
  std::vector<Child> agent = {agents_[0]};
  ASSERT_TRUE(testing_process::ExpectAllExit(agent, absl::Now() + job_.patience,
                                             "the agent did not give up"));
  EXPECT_NE(agent[0].exit_code, 0);
  // What the scheduler's check says of that token, word for word.
  const absl::Status refusal =
      CallAuthenticator("", right).Check("Bearer " + wrong, std::nullopt);
  ASSERT_EQ(refusal.code(), absl::StatusCode::kUnauthenticated);
  const std::string err = ReadFile(agent[0].err_path);
  EXPECT_TRUE(absl::StrContains(err, "UNAUTHENTICATED")) << err;
  EXPECT_TRUE(absl::StrContains(err, refusal.message())) << err;
  agents_[0] = agent[0];
  // dcp-ctl has no token: the scheduler goes by signal.
  testing_process::KillAndReap(scheduler_[0]);
}

}  // namespace
}  // namespace dcp
