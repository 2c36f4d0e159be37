// Metrics end to end: the real dcp-scheduler and two real dcp-agent
// processes (execute mode) serve /metrics on 127.0.0.1:0, and a real
// Prometheus server scrapes them every second with the deploy
// configuration (deploy/prometheus/prometheus.yml, targets written by the
// test). The test asks Prometheus' HTTP query API for what it scraped: every
// target up, and values that show the job ran (steps planned and completed,
// timings accepted, agents connected, tasks executed and timed, plans
// delivered (one observation per step received), communicators formed, the
// last step's figures); the build info of every daemon with the commit this
// build stamped; and, once the job is drained, figures that must add up:
// the steps completed and the tokens trained are those of the steps the
// scheduler logged, with one step-time observation per step. A second,
// shorter case serves the scheduler's metrics over mutual TLS and an agent's
// over TLS (--metrics_tls_*), with the deploy configuration's TLS lines
// uncommented: both targets up, their families scraped. Skips when
// Prometheus is not installed (tools/setup.sh installs it).
//
// The stamped commit is compared with the one compiled into this test (the
// same build's tools/workspace_status.sh): the sandbox that runs the test
// has no git checkout to ask. It is a commit id, or "unknown" when the
// workspace is not a git checkout.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/build_info.h"
#include "common/current_build_info.h"
#include "common/metrics/metrics_testing.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"
#include "tests/job_inputs.h"
#include "tests/test_pki.h"

namespace dcp {
namespace {

using testing_process::AgentArgs;
using testing_process::Binary;
using testing_process::Child;
using testing_process::ChildReaper;
using testing_process::Describe;
using testing_process::JobFlags;
using testing_process::LcgTrace;
using testing_process::ReadFile;
using testing_process::Spawn;
using testing_process::TinyModelJson;
using testing_process::TmpPath;
using testing_process::WaitAll;
using testing_process::WaitForPortFile;
using testing_process::WriteFile;

constexpr int kWorld = 2;
/// Bounds waits for things that take a few seconds; only reached on failure.
constexpr absl::Duration kPatience = absl::Seconds(60);

/// Failure messages show the end of each child's stderr: the scheduler logs
/// every step it plans, and it plans for as long as the test watches.
constexpr size_t kStderrTail = 3000;

/// The TLS lines of each job in deploy/prometheus/prometheus.yml, commented.
constexpr char kCommentedTls[] =
    "    # scheme: https\n"
    "    # tls_config:\n"
    "    #   ca_file: /etc/dcp/ca.crt\n"
    "    #   cert_file: /etc/dcp/prometheus.crt\n"
    "    #   key_file: /etc/dcp/prometheus.key\n";

/// A port nothing listens on right now (the kernel's pick for port 0).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// ------------------------------------------------------------- Prometheus

/// One series of an instant query's answer.
struct Series {
  std::map<std::string, std::string> labels;
  double value = 0;
};

/// Runs the PromQL `query` on Prometheus' HTTP API.
absl::StatusOr<std::vector<Series>> Query(int port, const std::string& query) {
  absl::StatusOr<TestHttpResponse> response = HttpRequestForTest(
      "127.0.0.1", port, "GET",
      absl::StrCat("/api/v1/query?query=", UrlEncodeForTest(query)));
  if (!response.ok()) return response.status();
  if (response->status != 200) {
    return absl::UnavailableError(absl::StrCat(
        "HTTP ", response->status, " for '", query, "': ", response->body));
  }
  const nlohmann::json json = nlohmann::json::parse(response->body, nullptr,
                                                    /*allow_exceptions=*/false);
  if (json.is_discarded() || json.value("status", "") != "success" ||
      json["data"].value("resultType", "") != "vector") {
    return absl::DataLossError(
        absl::StrCat("unexpected answer to '", query, "': ", response->body));
  }
  std::vector<Series> out;
  for (const nlohmann::json& r : json["data"]["result"]) {
    Series series;
    for (const auto& [name, value] : r["metric"].items()) {
      series.labels[name] = value.get<std::string>();
    }
    // "value": [<unix time>, "<number as a string>"]
    const std::string text = r["value"][1].get<std::string>();
    if (!absl::SimpleAtod(text, &series.value)) {
      return absl::DataLossError(absl::StrCat("bad value '", text, "'"));
    }
    out.push_back(std::move(series));
  }
  return out;
}

std::string Show(const std::vector<Series>& result) {
  std::string out = "[";
  for (const Series& s : result) {
    absl::StrAppend(&out, "{");
    for (const auto& [k, v] : s.labels) absl::StrAppend(&out, k, "=", v, " ");
    absl::StrAppend(&out, "} ", s.value, "; ");
  }
  return out + "]";
}

/// Polls `query` until `done` holds for its answer; the last answer (or
/// error) either way.
std::string WaitForQuery(
    int port, const std::string& query,
    const std::function<bool(const std::vector<Series>&)>& done,
    bool* satisfied) {
  const absl::Time deadline = absl::Now() + kPatience;
  std::string last;
  *satisfied = false;
  while (absl::Now() < deadline) {
    absl::StatusOr<std::vector<Series>> result = Query(port, query);
    if (result.ok()) {
      last = Show(*result);
      if (done(*result)) {
        *satisfied = true;
        return last;
      }
    } else {
      last = result.status().ToString();
    }
    absl::SleepFor(absl::Milliseconds(250));
  }
  return last;
}

/// The steps dcp-scheduler logged planning ("... step N (epoch E): S
/// samples, T tokens, ..."): how many, and their tokens summed.
struct LoggedSteps {
  int steps = 0;
  double tokens = 0;
};
LoggedSteps ParseLoggedSteps(const std::string& log) {
  LoggedSteps out;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    const size_t epoch = line.find(" (epoch ");
    const size_t samples = line.find(" samples, ");
    const size_t tokens = line.find(" tokens, ");
    if (epoch == line.npos || samples == line.npos || tokens == line.npos ||
        tokens < samples) {
      continue;
    }
    const size_t from = samples + std::string(" samples, ").size();
    int64_t count = 0;
    if (!absl::SimpleAtoi(line.substr(from, tokens - from), &count)) continue;
    ++out.steps;
    out.tokens += static_cast<double>(count);
  }
  return out;
}

/// A git commit id: 40 (SHA-1) or 64 (SHA-256) lower-case hex digits.
bool IsCommitId(const std::string& commit) {
  if (commit.size() != 40 && commit.size() != 64) return false;
  for (char c : commit) {
    if (!absl::ascii_isdigit(c) && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

// The job, its Prometheus and what the test asks of them, in the order the
// test runs them; a step that fails fatally ends the test (the reaper kills
// what is still running).
class MetricsE2eTest : public ::testing::Test {
 protected:
  // The job: a scheduler with no step limit (it keeps planning while the
  // test watches) and two agents, every server on 127.0.0.1:0.
  void StartJob() {
    // Mostly short samples, a few long ones.
    ASSERT_TRUE(WriteFile(trace_, LcgTrace(3000, 12345, 100, [](int d) {
                            return d < 90 ? 64 + d * 20 : 4000 + d * 40;
                          })));
    // 8 heads: every group size of a world of 2 divides them.
    ASSERT_TRUE(WriteFile(model_, TinyModelJson("tiny-metrics")));
    std::vector<std::string> argv = {Binary("scheduler/server/dcp-scheduler")};
    for (std::string& flag :
         JobFlags(trace_, model_,
                  {/*world_size=*/kWorld, /*gpus_per_node=*/2, /*window=*/8192,
                   /*tokens_per_step=*/16384, /*max_steps=*/0})) {
      argv.push_back(std::move(flag));
    }
    argv.insert(
        argv.end(),
        {"--lookahead_steps=2", "--refit_every=8", "--prior_weight=0.0001",
         "--listen=127.0.0.1:0", "--port_file=" + Path("scheduler.port"),
         "--metrics_listen=127.0.0.1:0",
         "--metrics_port_file=" + Path("scheduler.metrics_port")});
    argv.insert(argv.end(), scheduler_metrics_flags_.begin(),
                scheduler_metrics_flags_.end());
    scheduler_ = {Spawn("scheduler", argv)};
    port_ = WaitForPortFile(Path("scheduler.port"), scheduler_[0],
                            absl::Now() + kPatience);
    scheduler_metrics_ = WaitForPortFile(
        Path("scheduler.metrics_port"), scheduler_[0], absl::Now() + kPatience);
    ASSERT_GT(port_, 0) << reaper_.Describe(kStderrTail);
    ASSERT_GT(scheduler_metrics_, 0) << reaper_.Describe(kStderrTail);

    agent_metrics_.assign(agents_to_start_, 0);
    for (int r = 0; r < agents_to_start_; ++r) {
      std::vector<std::string> agent =
          AgentArgs(absl::StrCat("127.0.0.1:", port_), r, kWorld,
                    /*log_file=*/"");
      agent.insert(
          agent.end(),
          {"--mode=execute", "--model_config=" + model_, "--token_scale=64",
           "--metrics_listen=127.0.0.1:0",
           "--metrics_port_file=" + Path(absl::StrCat("agent-", r, ".port"))});
      agent.insert(agent.end(), agent_metrics_flags_.begin(),
                   agent_metrics_flags_.end());
      agents_.push_back(Spawn(absl::StrCat("agent-", r), agent));
    }
    for (int r = 0; r < agents_to_start_; ++r) {
      agent_metrics_[r] =
          WaitForPortFile(Path(absl::StrCat("agent-", r, ".port")), agents_[r],
                          absl::Now() + kPatience);
      ASSERT_GT(agent_metrics_[r], 0) << reaper_.Describe(kStderrTail);
    }
  }

  // Prometheus with the deploy configuration: the targets as the deploy
  // would write them, and a 1 s scrape interval instead of 15 s.
  void StartPrometheus() {
    const std::string config_dir = Path("prometheus");
    ASSERT_EQ(mkdir(config_dir.c_str(), 0755), 0);
    ASSERT_EQ(mkdir((config_dir + "/targets").c_str(), 0755), 0);
    std::string config = ReadFile(Binary("deploy/prometheus/prometheus.yml"));
    ASSERT_EQ(absl::StrReplaceAll(
                  {{"scrape_interval: 15s", "scrape_interval: 1s"}}, &config),
              1)
        << "deploy/prometheus/prometheus.yml no longer sets "
           "'scrape_interval: 15s' once:\n"
        << config;
    if (!prometheus_tls_.empty()) {
      ASSERT_EQ(
          absl::StrReplaceAll({{kCommentedTls, prometheus_tls_}}, &config), 2)
          << "deploy/prometheus/prometheus.yml no longer has the commented "
             "TLS lines of both jobs:\n"
          << config;
    }
    ASSERT_TRUE(WriteFile(config_dir + "/prometheus.yml", config));
    ASSERT_TRUE(WriteFile(
        config_dir + "/targets/dcp-scheduler.json",
        nlohmann::json::array(
            {{{"targets", {absl::StrCat("127.0.0.1:", scheduler_metrics_)}}}})
            .dump()));
    nlohmann::json agent_targets = nlohmann::json::array();
    for (size_t r = 0; r < agent_metrics_.size(); ++r) {
      agent_targets.push_back(
          {{"targets", {absl::StrCat("127.0.0.1:", agent_metrics_[r])}},
           {"labels", {{"rank", absl::StrCat(r)}}}});
    }
    ASSERT_TRUE(WriteFile(config_dir + "/targets/dcp-agent.json",
                          agent_targets.dump()));
    if (const std::optional<std::string> promtool = FindOnPath("promtool")) {
      std::vector<Child> check = {Spawn(
          "promtool-check-config",
          {*promtool, "check", "config", config_dir + "/prometheus.yml"})};
      ASSERT_TRUE(WaitAll(check, absl::Now() + kPatience));
      EXPECT_EQ(check[0].exit_code, 0) << Describe(check, kStderrTail);
    }

    web_port_ = FreePort();
    ASSERT_GT(web_port_, 0);
    server_ = {
        Spawn("prometheus",
              {*prometheus_, "--config.file=" + config_dir + "/prometheus.yml",
               "--storage.tsdb.path=" + Path("tsdb"),
               absl::StrCat("--web.listen-address=127.0.0.1:", web_port_),
               "--log.level=warn"})};
  }

  // Every target up (Prometheus' own `up`), the agents with their rank.
  void ExpectTargetsUp() {
    bool ok = false;
    const std::string seen = WaitForQuery(
        web_port_, "up",
        [want = static_cast<int>(agent_metrics_.size())](
            const std::vector<Series>& r) {
          int scheduler = 0, agents = 0;
          for (const Series& s : r) {
            if (s.value != 1) return false;
            const std::string job =
                s.labels.count("job") ? s.labels.at("job") : "";
            scheduler += job == "dcp-scheduler";
            agents += job == "dcp-agent" && s.labels.count("rank") == 1;
          }
          return scheduler == 1 && agents == want;
        },
        &ok);
    ASSERT_TRUE(ok) << "up: " << seen << "\n" << reaper_.Describe(kStderrTail);
  }

  // Values that only a running job gives, as Prometheus scraped them.
  void ExpectRunningJobFigures() {
    bool ok = false;
    auto positive = [](const std::vector<Series>& r) {
      return !r.empty() && r[0].value > 0;
    };
    for (const char* query : {
             "dcp_scheduler_steps_planned_total",
             "dcp_scheduler_steps_completed_total",
             "dcp_scheduler_timing_reports_total",
             "dcp_scheduler_planning_seconds_count",
             "dcp_scheduler_planned_tokens_total",
             "dcp_scheduler_cost_model_coefficient{coefficient=\"attn\"}",
             "dcp_scheduler_rpcs_total{method=\"StreamReports\",code=\"OK\"}",
             "dcp_agent_steps_executed_total{rank=\"0\"}",
             "dcp_agent_steps_executed_total{rank=\"1\"}",
             "sum(dcp_agent_task_seconds_count)",
             "sum(dcp_agent_steps_received_total)",
             "dcp_scheduler_step_measured_seconds",
             "dcp_scheduler_step_predicted_seconds",
             "dcp_scheduler_step_seconds_count",
             "dcp_scheduler_trained_tokens_total",
             "dcp_scheduler_tokens_per_second",
             "dcp_scheduler_task_group_size_count",
             "dcp_scheduler_task_recompute_ratio_count",
             "dcp_agent_plan_delivery_seconds_count{rank=\"0\"}",
             "dcp_agent_plan_delivery_seconds_count{rank=\"1\"}",
             "dcp_agent_communicator_formation_seconds_count{rank=\"0\"}",
             "dcp_agent_communicator_formation_seconds_count{rank=\"1\"}",
         }) {
      const std::string seen = WaitForQuery(web_port_, query, positive, &ok);
      EXPECT_TRUE(ok) << query << ": " << seen;
    }
    std::string seen;
    // One delivery observation per step an agent received (a scrape between
    // the two counts may see them one apart; the wait takes the next).
    seen = WaitForQuery(
        web_port_,
        "sum(dcp_agent_plan_delivery_seconds_count) - "
        "sum(dcp_agent_steps_received_total)",
        [](const std::vector<Series>& r) {
          return r.size() == 1 && r[0].value == 0;
        },
        &ok);
    EXPECT_TRUE(ok) << "deliveries - steps received: " << seen;
    // Both sources of the imbalance, each an idle fraction.
    seen = WaitForQuery(
        web_port_, "dcp_scheduler_step_imbalance_ratio",
        [](const std::vector<Series>& r) {
          std::set<std::string> sources;
          for (const Series& s : r) {
            if (s.value < 0 || s.value > 1) return false;
            sources.insert(s.labels.at("source"));
          }
          return sources == std::set<std::string>{"measured", "predicted"};
        },
        &ok);
    EXPECT_TRUE(ok) << "dcp_scheduler_step_imbalance_ratio: " << seen;
  }

  // Every daemon's build info names this build's version and commit.
  void ExpectBuildInfo() {
    bool ok = false;
    const BuildInfo build = CurrentBuildInfo();
    EXPECT_TRUE(build.commit == "unknown" || IsCommitId(build.commit))
        << build.commit;
    for (const auto& [query, count] :
         std::vector<std::pair<std::string, size_t>>{
             {"dcp_scheduler_build_info", 1},
             {"dcp_agent_build_info", kWorld}}) {
      const std::string seen = WaitForQuery(
          web_port_, query,
          [&, count = count](const std::vector<Series>& r) {
            if (r.size() != count) return false;
            for (const Series& s : r) {
              if (s.value != 1 || s.labels.at("version") != kDcpVersion ||
                  s.labels.at("commit") != build.commit) {
                return false;
              }
            }
            return true;
          },
          &ok);
      EXPECT_TRUE(ok) << query << " (want commit " << build.commit
                      << "): " << seen;
    }
  }

  // The scheduler sees every agent; each agent's rank gauge is its rank.
  void ExpectAgentsConnected() {
    bool ok = false;
    std::string seen = WaitForQuery(
        web_port_, "dcp_scheduler_connected_agents",
        [](const std::vector<Series>& r) {
          return r.size() == 1 && r[0].value == kWorld;
        },
        &ok);
    EXPECT_TRUE(ok) << "dcp_scheduler_connected_agents: " << seen;
    seen = WaitForQuery(
        web_port_, "dcp_agent_rank",
        [](const std::vector<Series>& r) {
          if (r.size() != kWorld) return false;
          for (const Series& s : r) {
            if (absl::StrCat(s.value) != s.labels.at("rank")) return false;
          }
          return true;
        },
        &ok);
    EXPECT_TRUE(ok) << "dcp_agent_rank: " << seen;
  }

  // The job ends cleanly with its metrics servers, and its totals add up.
  void DrainAndExpectTotals() {
    // A drain lets the agents run and report their last steps and exit 0,
    // then the scheduler, with no stream left, exits 0 on SIGTERM.
    std::vector<Child> drain = {
        Spawn("dcp-ctl-drain",
              {Binary("scheduler/server/dcp-ctl"),
               absl::StrCat("--scheduler=127.0.0.1:", port_), "drain"})};
    ASSERT_TRUE(WaitAll(drain, absl::Now() + kPatience))
        << Describe(drain, kStderrTail);
    EXPECT_EQ(drain[0].exit_code, 0) << Describe(drain, kStderrTail);
    ASSERT_TRUE(WaitAll(agents_, absl::Now() + kPatience))
        << Describe(agents_, kStderrTail);
    for (const Child& a : agents_) {
      EXPECT_EQ(a.exit_code, 0) << Describe(agents_, kStderrTail);
    }

    // Drained: every step the scheduler planned (and logged) completed, and
    // the figures add up once Prometheus has scraped the last of them.
    const LoggedSteps logged =
        ParseLoggedSteps(ReadFile(scheduler_[0].err_path));
    ASSERT_GT(logged.steps, 0) << reaper_.Describe(kStderrTail);
    bool ok = false;
    std::string seen = WaitForQuery(
        web_port_, "dcp_scheduler_steps_completed_total",
        [&](const std::vector<Series>& r) {
          return r.size() == 1 && r[0].value == logged.steps;
        },
        &ok);
    EXPECT_TRUE(ok) << "completed steps (want the " << logged.steps
                    << " logged): " << seen;
    seen = WaitForQuery(
        web_port_, "dcp_scheduler_trained_tokens_total",
        [&](const std::vector<Series>& r) {
          return r.size() == 1 && r[0].value == logged.tokens;
        },
        &ok);
    EXPECT_TRUE(ok) << "trained tokens (want " << logged.tokens
                    << ", the logged steps' sum): " << seen;
    seen = WaitForQuery(
        web_port_, "dcp_scheduler_step_seconds_count",
        [&](const std::vector<Series>& r) {
          return r.size() == 1 && r[0].value == logged.steps;
        },
        &ok);
    EXPECT_TRUE(ok) << "step time observations (want one per step, "
                    << logged.steps << "): " << seen;
    kill(scheduler_[0].pid, SIGTERM);
    ASSERT_TRUE(WaitAll(scheduler_, absl::Now() + kPatience))
        << Describe(scheduler_, kStderrTail);
    EXPECT_EQ(scheduler_[0].exit_code, 0) << Describe(scheduler_, kStderrTail);
    kill(server_[0].pid, SIGTERM);
    EXPECT_TRUE(WaitAll(server_, absl::Now() + kPatience))
        << Describe(server_, kStderrTail);
  }

  // What the TLS case changes: the daemons' --metrics_tls_* flags, how many
  // agents run, and the TLS lines of Prometheus' configuration.
  std::vector<std::string> scheduler_metrics_flags_;
  std::vector<std::string> agent_metrics_flags_;
  int agents_to_start_ = kWorld;
  std::string prometheus_tls_;

  /// A file of this test's own directory (the cases share TEST_TMPDIR).
  std::string Path(const std::string& name) const {
    return absl::StrCat(dir_, "/", name);
  }
  static std::string MakeTestDir() {
    const std::string dir = TmpPath(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    mkdir(dir.c_str(), 0755);
    return dir;
  }

  std::optional<std::string> prometheus_ = FindOnPath("prometheus");
  const std::string dir_ = MakeTestDir();
  const std::string trace_ = Path("trace.txt");
  const std::string model_ = Path("model.json");
  std::vector<Child> scheduler_;
  std::vector<Child> agents_;
  std::vector<Child> server_;
  ChildReaper reaper_{{&scheduler_, &agents_, &server_}};
  int port_ = 0;
  int scheduler_metrics_ = 0;
  std::vector<int> agent_metrics_;
  int web_port_ = 0;
};

TEST_F(MetricsE2eTest, PrometheusScrapesTheSchedulerAndTheAgents) {
  if (!prometheus_.has_value()) {
    GTEST_SKIP() << "prometheus is not on PATH; tools/setup.sh installs it "
                    "(Debian package prometheus)";
  }
  // Each phase needs the one before; a fatal failure in one ends the test.
  StartJob();
  if (HasFatalFailure()) return;
  StartPrometheus();
  if (HasFatalFailure()) return;
  ExpectTargetsUp();
  if (HasFatalFailure()) return;
  ExpectRunningJobFigures();
  ExpectBuildInfo();
  ExpectAgentsConnected();
  DrainAndExpectTotals();
}

// The scheduler's /metrics over mutual TLS and an agent's over TLS, scraped
// by Prometheus with the deploy configuration's TLS lines: Prometheus
// presents a client certificate of the CA and verifies the daemons'
// certificates (they name 127.0.0.1). One agent of two is enough: it serves
// metrics from start-up, before the job can start.
TEST_F(MetricsE2eTest, PrometheusScrapesOverMutualTls) {
  if (!prometheus_.has_value()) {
    GTEST_SKIP() << "prometheus is not on PATH; tools/setup.sh installs it "
                    "(Debian package prometheus)";
  }
  testing_process::TestPki pki;
  ASSERT_TRUE(testing_process::MakeTestPki(Path("pki"), &pki));
  scheduler_metrics_flags_ = {"--metrics_tls_cert=" + pki.server_cert,
                              "--metrics_tls_key=" + pki.server_key,
                              "--metrics_tls_ca=" + pki.ca};
  agent_metrics_flags_ = {"--metrics_tls_cert=" + pki.server_cert,
                          "--metrics_tls_key=" + pki.server_key};
  agents_to_start_ = 1;
  prometheus_tls_ = absl::StrCat("    scheme: https\n    tls_config:\n",
                                 "      ca_file: ", pki.ca, "\n",
                                 "      cert_file: ", pki.client_cert, "\n",
                                 "      key_file: ", pki.client_key, "\n");
  StartJob();
  if (HasFatalFailure()) return;
  // Plain HTTP is not served on the TLS port.
  EXPECT_FALSE(
      HttpRequestForTest("127.0.0.1", scheduler_metrics_, "GET", "/metrics")
          .ok());
  StartPrometheus();
  if (HasFatalFailure()) return;
  ExpectTargetsUp();
  if (HasFatalFailure()) return;
  for (const char* query :
       {"dcp_scheduler_build_info", "dcp_scheduler_world_size",
        "dcp_agent_build_info"}) {
    bool ok = false;
    const std::string seen = WaitForQuery(
        web_port_, query,
        [](const std::vector<Series>& r) {
          return r.size() == 1 && r[0].value > 0;
        },
        &ok);
    EXPECT_TRUE(ok) << query << ": " << seen;
  }
}

}  // namespace
}  // namespace dcp
