// Metrics end to end: the real dcp-scheduler and two real dcp-agent
// processes (execute mode) serve /metrics on 127.0.0.1:0, and a real
// Prometheus server scrapes them every second with the deploy
// configuration (deploy/prometheus/prometheus.yml, targets written by the
// test). The test asks Prometheus' HTTP query API for what it scraped: every
// target up, and values that show the job ran (steps planned and completed,
// timings accepted, agents connected, tasks executed and timed). Skips
// when Prometheus is not installed (tools/setup.sh installs it).

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/metrics_testing.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dcp {
namespace {

constexpr int kWorld = 2;
/// Bounds waits for things that take a few seconds; only reached on failure.
constexpr absl::Duration kPatience = absl::Seconds(60);

std::string EnvOrEmpty(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

std::string TmpPath(const std::string& name) {
  return EnvOrEmpty("TEST_TMPDIR") + "/" + name;
}

std::string Runfile(const std::string& path) {
  return EnvOrEmpty("TEST_SRCDIR") + "/dcp/" + path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  return out.good();
}

// ------------------------------------------------------------- processes

/// A child process with stdout and stderr in files.
struct Child {
  std::string name;
  pid_t pid = -1;
  std::string err_path;
  int exit_code = -1;  // -1 while running or when killed by a signal
  bool done = false;
};

Child Spawn(const std::string& name, const std::vector<std::string>& argv) {
  Child child;
  child.name = name;
  child.err_path = TmpPath(name + ".err");
  const std::string out_path = TmpPath(name + ".out");
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err =
        open(child.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(126);
    execv(args[0], args.data());
    _exit(127);
  }
  child.pid = pid;
  return child;
}

bool Poll(Child& child) {
  if (child.done) return true;
  int status = 0;
  if (waitpid(child.pid, &status, WNOHANG) != child.pid) return false;
  child.done = true;
  child.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return true;
}

bool WaitAll(std::vector<Child*> children, absl::Time deadline) {
  while (true) {
    bool all = true;
    for (Child* c : children) all = Poll(*c) && all;
    if (all) return true;
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(50));
  }
}

/// Every child's name, exit code and the end of its stderr.
std::string Describe(const std::vector<Child*>& children) {
  std::string out;
  for (const Child* c : children) {
    std::string err = ReadFile(c->err_path);
    if (err.size() > 3000) err = "..." + err.substr(err.size() - 3000);
    absl::StrAppend(&out, "--- ", c->name, " (",
                    c->done ? absl::StrCat("exit ", c->exit_code) : "running",
                    "):\n", err, "\n");
  }
  return out;
}

/// Kills what still runs on every way out of the test.
class Reaper {
 public:
  void Add(Child* child) { children_.push_back(child); }
  const std::vector<Child*>& children() const { return children_; }
  ~Reaper() {
    for (Child* c : children_) {
      if (!Poll(*c)) kill(c->pid, SIGKILL);
    }
    for (Child* c : children_) {
      if (!c->done) waitpid(c->pid, nullptr, 0);
    }
  }

 private:
  std::vector<Child*> children_;
};

/// The number in `path` once `child` wrote it; 0 if it exited first or
/// `kPatience` passed.
int WaitForPortFile(const std::string& path, Child& child) {
  const absl::Time deadline = absl::Now() + kPatience;
  while (absl::Now() < deadline) {
    int port = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(path)), &port) &&
        port > 0) {
      return port;
    }
    if (Poll(child)) return 0;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return 0;
}

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

/// A model whose heads every group size of a world of 2 divides.
constexpr char kModelJson[] =
    R"({"name": "tiny-metrics", "layers": 1, "hidden": 256, "heads": 8,
        "kv_heads": 8, "ffn": 512, "vocab": 1000, "causal": true})";

/// Mostly short samples, a few long ones; deterministic.
std::string Trace(int n) {
  std::string out;
  uint64_t x = 12345;
  for (int i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const int r = static_cast<int>((x >> 33) % 100);
    absl::StrAppend(&out, r < 90 ? 64 + r * 20 : 4000 + r * 40, "\n");
  }
  return out;
}

TEST(MetricsE2eTest, PrometheusScrapesTheSchedulerAndTheAgents) {
  const std::optional<std::string> prometheus = FindOnPath("prometheus");
  if (!prometheus.has_value()) {
    GTEST_SKIP() << "prometheus is not on PATH; tools/setup.sh installs it "
                    "(Debian package prometheus)";
  }
  const std::string trace = TmpPath("trace.txt");
  const std::string model = TmpPath("model.json");
  ASSERT_TRUE(WriteFile(trace, Trace(3000)));
  ASSERT_TRUE(WriteFile(model, kModelJson));
  Reaper reaper;

  // The job: a scheduler with no step limit (it keeps planning while the
  // test watches) and two agents, every server on 127.0.0.1:0.
  Child scheduler =
      Spawn("scheduler",
            {Runfile("scheduler/dcp-scheduler"), "--lengths=" + trace,
             "--model_config=" + model, absl::StrCat("--world_size=", kWorld),
             "--gpus_per_node=2", "--window=8192", "--tokens_per_step=16384",
             "--lookahead_steps=2", "--refit_every=8", "--prior_weight=0.0001",
             "--listen=127.0.0.1:0", "--port_file=" + TmpPath("scheduler.port"),
             "--metrics_listen=127.0.0.1:0",
             "--metrics_port_file=" + TmpPath("scheduler.metrics_port")});
  reaper.Add(&scheduler);
  const int port = WaitForPortFile(TmpPath("scheduler.port"), scheduler);
  const int scheduler_metrics =
      WaitForPortFile(TmpPath("scheduler.metrics_port"), scheduler);
  ASSERT_GT(port, 0) << Describe(reaper.children());
  ASSERT_GT(scheduler_metrics, 0) << Describe(reaper.children());

  std::vector<Child> agents(kWorld);
  std::vector<int> agent_metrics(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    agents[r] = Spawn(
        absl::StrCat("agent-", r),
        {Runfile("worker_agent/dcp-agent"),
         absl::StrCat("--scheduler=127.0.0.1:", port),
         absl::StrCat("--rank=", r), absl::StrCat("--world_size=", kWorld),
         "--mode=execute", "--model_config=" + model, "--token_scale=64",
         "--metrics_listen=127.0.0.1:0",
         "--metrics_port_file=" + TmpPath(absl::StrCat("agent-", r, ".port"))});
    reaper.Add(&agents[r]);
  }
  for (int r = 0; r < kWorld; ++r) {
    agent_metrics[r] =
        WaitForPortFile(TmpPath(absl::StrCat("agent-", r, ".port")), agents[r]);
    ASSERT_GT(agent_metrics[r], 0) << Describe(reaper.children());
  }

  // Prometheus with the deploy configuration: the targets as the deploy
  // would write them, and a 1 s scrape interval instead of 15 s.
  const std::string config_dir = TmpPath("prometheus");
  ASSERT_EQ(mkdir(config_dir.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((config_dir + "/targets").c_str(), 0755), 0);
  std::string config = ReadFile(Runfile("deploy/prometheus/prometheus.yml"));
  ASSERT_EQ(absl::StrReplaceAll(
                {{"scrape_interval: 15s", "scrape_interval: 1s"}}, &config),
            1)
      << "deploy/prometheus/prometheus.yml no longer sets "
         "'scrape_interval: 15s' once:\n"
      << config;
  ASSERT_TRUE(WriteFile(config_dir + "/prometheus.yml", config));
  ASSERT_TRUE(WriteFile(
      config_dir + "/targets/dcp-scheduler.json",
      nlohmann::json::array(
          {{{"targets", {absl::StrCat("127.0.0.1:", scheduler_metrics)}}}})
          .dump()));
  nlohmann::json agent_targets = nlohmann::json::array();
  for (int r = 0; r < kWorld; ++r) {
    agent_targets.push_back(
        {{"targets", {absl::StrCat("127.0.0.1:", agent_metrics[r])}},
         {"labels", {{"rank", absl::StrCat(r)}}}});
  }
  ASSERT_TRUE(
      WriteFile(config_dir + "/targets/dcp-agent.json", agent_targets.dump()));
  if (const std::optional<std::string> promtool = FindOnPath("promtool")) {
    Child check =
        Spawn("promtool-check-config",
              {*promtool, "check", "config", config_dir + "/prometheus.yml"});
    ASSERT_TRUE(WaitAll({&check}, absl::Now() + kPatience));
    EXPECT_EQ(check.exit_code, 0) << Describe({&check});
  }

  const int web_port = FreePort();
  ASSERT_GT(web_port, 0);
  Child server =
      Spawn("prometheus",
            {*prometheus, "--config.file=" + config_dir + "/prometheus.yml",
             "--storage.tsdb.path=" + TmpPath("tsdb"),
             absl::StrCat("--web.listen-address=127.0.0.1:", web_port),
             "--log.level=warn"});
  reaper.Add(&server);

  // Every target up (Prometheus' own `up`), the agents with their rank.
  bool ok = false;
  std::string seen = WaitForQuery(
      web_port, "up",
      [](const std::vector<Series>& r) {
        int scheduler = 0, agents = 0;
        for (const Series& s : r) {
          if (s.value != 1) return false;
          const std::string job =
              s.labels.count("job") ? s.labels.at("job") : "";
          scheduler += job == "dcp-scheduler";
          agents += job == "dcp-agent" && s.labels.count("rank") == 1;
        }
        return scheduler == 1 && agents == kWorld;
      },
      &ok);
  ASSERT_TRUE(ok) << "up: " << seen << "\n" << Describe(reaper.children());

  // Values that only a running job gives, as Prometheus scraped them.
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
       }) {
    seen = WaitForQuery(web_port, query, positive, &ok);
    EXPECT_TRUE(ok) << query << ": " << seen;
  }
  seen = WaitForQuery(
      web_port, "dcp_scheduler_connected_agents",
      [](const std::vector<Series>& r) {
        return r.size() == 1 && r[0].value == kWorld;
      },
      &ok);
  EXPECT_TRUE(ok) << "dcp_scheduler_connected_agents: " << seen;
  seen = WaitForQuery(
      web_port, "dcp_agent_rank",
      [](const std::vector<Series>& r) {
        if (r.size() != kWorld) return false;
        for (const Series& s : r) {
          if (absl::StrCat(s.value) != s.labels.at("rank")) return false;
        }
        return true;
      },
      &ok);
  EXPECT_TRUE(ok) << "dcp_agent_rank: " << seen;

  // The job ends cleanly with its metrics servers: a drain lets the agents
  // run and report their last steps and exit 0, then the scheduler, with no
  // stream left, exits 0 on SIGTERM.
  Child drain = Spawn("dcp-ctl-drain",
                      {Runfile("scheduler/dcp-ctl"),
                       absl::StrCat("--scheduler=127.0.0.1:", port), "drain"});
  ASSERT_TRUE(WaitAll({&drain}, absl::Now() + kPatience)) << Describe({&drain});
  EXPECT_EQ(drain.exit_code, 0) << Describe({&drain});
  std::vector<Child*> agent_children;
  for (Child& a : agents) agent_children.push_back(&a);
  ASSERT_TRUE(WaitAll(agent_children, absl::Now() + kPatience))
      << Describe(agent_children);
  for (const Child* a : agent_children) {
    EXPECT_EQ(a->exit_code, 0) << Describe(agent_children);
  }
  kill(scheduler.pid, SIGTERM);
  ASSERT_TRUE(WaitAll({&scheduler}, absl::Now() + kPatience))
      << Describe({&scheduler});
  EXPECT_EQ(scheduler.exit_code, 0) << Describe({&scheduler});
  kill(server.pid, SIGTERM);
  EXPECT_TRUE(WaitAll({&server}, absl::Now() + kPatience))
      << Describe({&server});
}

}  // namespace
}  // namespace dcp
