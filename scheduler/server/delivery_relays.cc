#include "scheduler/server/delivery_relays.h"

#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

extern char** environ;

namespace dcp::plan_delivery {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// The port the relay wrote to `path`, 0 until it has.
int PortIn(const std::string& path) {
  int port = 0;
  const std::string text = ReadAll(path);
  return absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port) ? port : 0;
}

/// utime + stime of `pid` (/proc/PID/stat fields 14 and 15), in seconds.
double ProcessCpuSeconds(pid_t pid) {
  const std::string stat = ReadAll(absl::StrCat("/proc/", pid, "/stat"));
  // The command may hold spaces: fields are counted after its ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  const std::vector<std::string> fields =
      absl::StrSplit(stat.substr(close + 2), ' ');
  double utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtod(fields[11], &utime) ||
      !absl::SimpleAtod(fields[12], &stime)) {
    return 0;
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> RelayProcesses::Start(
    const std::string& scheduler) {
  char pattern[] = "/tmp/dcp-bench-relays-XXXXXX";
  if (mkdtemp(pattern) == nullptr) {
    return absl::UnavailableError("cannot make a directory for port files");
  }
  dir_ = pattern;
  for (int i = 0; i < count_; ++i) {
    const std::vector<std::string> args = {
        binary_, "--listen=127.0.0.1:0", "--scheduler=" + scheduler,
        absl::StrCat("--port_file=", dir_, "/", i),
        absl::StrCat("--gather_window=", absl::FormatDuration(gather_window_))};
    std::vector<char*> argv;
    for (const std::string& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, binary_.c_str(), nullptr, nullptr, argv.data(),
                    environ) != 0) {
      Stop();
      return absl::UnavailableError(
          absl::StrCat("cannot run the relay binary '", binary_, "'"));
    }
    pids_.push_back(pid);
  }
  std::vector<std::string> addresses;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (int i = 0; i < count_; ++i) {
    int port = 0;
    // A benchmark's start-up, not a test: polling the port file is enough.
    while ((port = PortIn(absl::StrCat(dir_, "/", i))) == 0) {
      if (absl::Now() > deadline || waitpid(pids_[i], nullptr, WNOHANG) != 0) {
        Stop();
        return absl::UnavailableError(
            absl::StrCat("relay ", i, " (", binary_, ") did not start"));
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    addresses.push_back(absl::StrCat("127.0.0.1:", port));
  }
  return addresses;
}

double RelayProcesses::CpuSeconds() const {
  double sum = 0;
  for (pid_t pid : pids_) sum += ProcessCpuSeconds(pid);
  return sum;
}

void RelayProcesses::Stop() {
  for (pid_t pid : pids_) kill(pid, SIGTERM);
  for (pid_t pid : pids_) waitpid(pid, nullptr, 0);
  pids_.clear();
  if (!dir_.empty()) {
    for (int i = 0; i < count_; ++i) unlink(absl::StrCat(dir_, "/", i).c_str());
    rmdir(dir_.c_str());
    dir_.clear();
  }
}

}  // namespace dcp::plan_delivery
