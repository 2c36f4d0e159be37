#include "tests/child_process.h"

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace testing_process {
namespace {

std::string EnvOrEmpty(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

}  // namespace

std::string TmpPath(const std::string& name) {
  return EnvOrEmpty("TEST_TMPDIR") + "/" + name;
}

std::string Binary(const std::string& path) {
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

void KeepOutputs(const std::string& prefix) {
  const std::string kept = EnvOrEmpty("TEST_UNDECLARED_OUTPUTS_DIR");
  if (kept.empty() || prefix.empty()) return;
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator(TmpPath(""), error)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file(error) || name.rfind(prefix, 0) != 0) continue;
    std::filesystem::copy_file(
        entry.path(), std::filesystem::path(kept) / name,
        std::filesystem::copy_options::overwrite_existing, error);
  }
}

Child Spawn(const std::string& name, const std::vector<std::string>& argv) {
  absl::StatusOr<Child> child =
      subprocess::Start(name, argv, EnvOrEmpty("TEST_TMPDIR"));
  if (!child.ok()) {
    std::fprintf(stderr, "tests/child_process: %s\n",
                 child.status().ToString().c_str());
    std::abort();
  }
  return *std::move(child);
}

bool ExpectAllExit(std::vector<Child>& children, absl::Time deadline,
                   const std::string& what) {
  if (WaitAll(children, deadline)) return true;
  KillAll(children);
  ADD_FAILURE() << what << ":\n" << Describe(children);
  return false;
}

std::string RunToEnd(const std::string& name,
                     const std::vector<std::string>& argv) {
  std::vector<Child> one = {Spawn(name, argv)};
  if (!ExpectAllExit(one, absl::Now() + absl::Seconds(30),
                     name + " did not finish")) {
    return "";
  }
  EXPECT_EQ(one[0].exit_code, 0) << Describe(one);
  return ReadFile(one[0].out_path);
}

FileActivity::FileActivity(const std::vector<std::string>& dirs)
    : fd_(inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {
  EXPECT_GE(fd_, 0) << "inotify_init1 failed";
  for (const std::string& dir : dirs) {
    EXPECT_GE(inotify_add_watch(fd_, dir.c_str(),
                                IN_MODIFY | IN_CREATE | IN_MOVED_TO |
                                    IN_CLOSE_WRITE),
              0)
        << "cannot watch " << dir;
  }
}

FileActivity::~FileActivity() {
  if (fd_ >= 0) close(fd_);
}

bool FileActivity::Await(absl::Time deadline) {
  if (fd_ < 0) return false;
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd ready = {fd_, POLLIN, 0};
    const int timeout_ms =
        static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1,
                                           std::numeric_limits<int>::max()));
    if (poll(&ready, 1, timeout_ms) <= 0) continue;
    // Drain what is queued: one wake-up for any number of changes.
    alignas(inotify_event) char events[4096];
    while (read(fd_, events, sizeof(events)) > 0) {
    }
    return true;
  }
}

namespace {

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

int WaitForPortFile(const std::string& path, Child& child,
                    absl::Time deadline) {
  // The port file and the child's output (closed when it exits).
  FileActivity activity({DirOf(path), DirOf(child.err_path)});
  while (true) {
    int port = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFile(path)), &port) &&
        port > 0) {
      return port;
    }
    if (Poll(child) || !activity.Await(deadline)) return 0;
  }
}

ChildReaper::ChildReaper(std::vector<std::vector<Child>*> groups)
    : groups_(std::move(groups)) {}

ChildReaper::~ChildReaper() {
  for (std::vector<Child>* group : groups_) KillAll(*group);
}

std::string ChildReaper::Describe(size_t max_stderr_bytes) const {
  std::string out;
  for (const std::vector<Child>* group : groups_) {
    absl::StrAppend(&out, testing_process::Describe(*group, max_stderr_bytes));
  }
  return out;
}

int StartScheduler(const std::string& name,
                   const std::vector<std::string>& flags,
                   std::vector<Child>& scheduler) {
  const std::string port_path = TmpPath(name + ".port");
  std::vector<std::string> argv = {Binary("scheduler/server/dcp-scheduler")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back("--listen=127.0.0.1:0");
  argv.push_back("--port_file=" + port_path);
  scheduler = {Spawn(name, argv)};
  // The port file appears once the scheduler serves.
  const int port =
      WaitForPortFile(port_path, scheduler[0], absl::Now() + absl::Seconds(30));
  if (port == 0) {
    KillAll(scheduler);
    ADD_FAILURE() << "the scheduler did not start:\n" << Describe(scheduler);
  }
  return port;
}

int StartSchedulerIncarnation(const std::string& name,
                              const std::vector<std::string>& flags, int port,
                              std::vector<Child>& scheduler) {
  const std::string port_path = TmpPath(name + ".port");
  std::vector<std::string> argv = {Binary("scheduler/server/dcp-scheduler")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back(absl::StrCat("--listen=127.0.0.1:", port));
  argv.push_back("--port_file=" + port_path);
  scheduler.push_back(Spawn(name, argv));
  const int bound = WaitForPortFile(port_path, scheduler.back(),
                                    absl::Now() + absl::Seconds(60));
  EXPECT_GT(bound, 0) << "scheduler " << name << " did not start:\n"
                      << Describe({scheduler.back()});
  return bound;
}

void StopScheduler(const std::string& address, std::vector<Child>& scheduler) {
  RunToEnd("ctl-stop",
           {Binary("scheduler/server/dcp-ctl"), "--scheduler=" + address, "stop"});
  ExpectAllExit(scheduler, absl::Now() + absl::Seconds(30),
                "the scheduler did not stop");
  EXPECT_EQ(scheduler[0].exit_code, 0) << Describe(scheduler);
}

nlohmann::json CtlStatus(const std::string& name, const std::string& address) {
  nlohmann::json status = nlohmann::json::parse(
      RunToEnd(name, {Binary("scheduler/server/dcp-ctl"), "--scheduler=" + address,
                      "--json", "status"}),
      nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(status.is_discarded()) << name << " did not answer JSON";
  return status;
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

}  // namespace testing_process
}  // namespace dcp
