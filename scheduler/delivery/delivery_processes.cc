#include "scheduler/delivery/delivery_processes.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "scheduler/delivery/delivery_stats.h"

namespace dcp::plan_delivery {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// The port written to `path`, 0 until there is one.
int PortIn(const std::string& path) {
  int port = 0;
  const std::string text = ReadAll(path);
  return absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port) ? port : 0;
}

}  // namespace

absl::StatusOr<int> AwaitPortFile(const std::string& path,
                                  subprocess::Child& child, absl::Time deadline,
                                  absl::string_view what) {
  int port = 0;
  // A benchmark's start-up, not a test: polling the port file is enough.
  while ((port = PortIn(path)) == 0) {
    if (subprocess::Poll(child)) {
      // It may have written the port just before it exited.
      if ((port = PortIn(path)) != 0) return port;
      return absl::UnavailableError(
          absl::StrCat(what, " exited before writing its port to ", path));
    }
    if (absl::Now() > deadline) {
      return absl::UnavailableError(
          absl::StrCat(what, " wrote no port to ", path, " in time"));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return port;
}

absl::StatusOr<std::string> FetchMetrics(int port, absl::Duration timeout) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError("socket() failed");
  timeval tv = absl::ToTimeval(timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot connect to the metrics port 127.0.0.1:", port));
  }
  const std::string request =
      "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n =
        send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      close(fd);
      return absl::UnavailableError("the metrics request could not be sent");
    }
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buffer[65536];
  ssize_t n = 0;
  while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) {
    response.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  if (n < 0) {
    return absl::UnavailableError("no complete /metrics answer in time");
  }
  const size_t body = response.find("\r\n\r\n");
  if (!absl::StartsWith(response, "HTTP/1.") || body == std::string::npos ||
      response.substr(0, response.find("\r\n")).find(" 200") ==
          std::string::npos) {
    return absl::DataLossError(absl::StrCat(
        "/metrics answered: ", response.substr(0, response.find("\r\n"))));
  }
  return response.substr(body + 4);
}

std::optional<double> SampleValue(absl::string_view exposition,
                                  absl::string_view name) {
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (!absl::ConsumePrefix(&line, name) || !absl::ConsumePrefix(&line, " ")) {
      continue;
    }
    // "value" or "value timestamp".
    const absl::string_view value = line.substr(0, line.find(' '));
    double v = 0;
    if (absl::SimpleAtod(value, &v)) return v;
  }
  return std::nullopt;
}

absl::StatusOr<std::unique_ptr<SchedulerProcess>> SchedulerProcess::Start(
    const std::string& binary, const std::vector<std::string>& flags) {
  auto process = std::unique_ptr<SchedulerProcess>(new SchedulerProcess());
  char pattern[] = "/tmp/dcp-bench-scheduler-XXXXXX";
  if (mkdtemp(pattern) == nullptr) {
    return absl::UnavailableError("cannot make a directory for port files");
  }
  process->dir_ = pattern;
  process->log_path_ = process->dir_ + "/scheduler.log";
  const std::string port_file = process->dir_ + "/port";
  const std::string metrics_port_file = process->dir_ + "/metrics_port";
  std::vector<std::string> argv = {binary};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back("--listen=127.0.0.1:0");
  argv.push_back("--port_file=" + port_file);
  argv.push_back("--metrics_listen=127.0.0.1:0");
  argv.push_back("--metrics_port_file=" + metrics_port_file);
  subprocess::StartOptions options;
  options.log_path = process->log_path_;
  absl::StatusOr<subprocess::Child> child =
      subprocess::Start("scheduler", argv, options);
  if (!child.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot run '", binary, "': ", child.status().message()));
  }
  process->child_ = *std::move(child);
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  absl::StatusOr<int> port =
      AwaitPortFile(port_file, process->child_, deadline, "the scheduler");
  absl::StatusOr<int> metrics_port =
      port.ok() ? AwaitPortFile(metrics_port_file, process->child_, deadline,
                                "the scheduler's metrics")
                : port;
  if (!metrics_port.ok()) {
    const std::string log = subprocess::FileTail(process->log_path_, 2000);
    process->Stop();
    return absl::UnavailableError(absl::StrCat(
        binary, ": ", metrics_port.status().message(), "; its output:\n", log));
  }
  process->address_ = absl::StrCat("127.0.0.1:", *port);
  process->metrics_port_ = *metrics_port;
  return process;
}

SchedulerProcess::~SchedulerProcess() { Stop(); }

double SchedulerProcess::CpuSeconds() const {
  return ProcessCpuSeconds(child_.pid);
}

absl::StatusOr<SchedulerCounters> SchedulerProcess::Counters() const {
  ASSIGN_OR_RETURN(const std::string text,
                   FetchMetrics(metrics_port_, absl::Seconds(10)));
  SchedulerCounters counters;
  const std::pair<const char*, double*> wanted[] = {
      {"dcp_scheduler_planning_seconds_count", &counters.planned_steps},
      {"dcp_scheduler_planning_cpu_seconds_total",
       &counters.planning_cpu_seconds}};
  for (const auto& [name, value] : wanted) {
    const std::optional<double> sample = SampleValue(text, name);
    if (!sample.has_value()) {
      return absl::DataLossError(absl::StrCat(
          "the scheduler's /metrics has no ", name,
          " (a dcp-scheduler older than the planning CPU counter?)"));
    }
    *value = *sample;
  }
  return counters;
}

void SchedulerProcess::Stop() {
  subprocess::Terminate(child_, absl::Seconds(10));
  if (!dir_.empty()) {
    for (const char* name : {"/port", "/metrics_port", "/scheduler.log"}) {
      unlink((dir_ + name).c_str());
    }
    rmdir(dir_.c_str());
    dir_.clear();
  }
}

}  // namespace dcp::plan_delivery
