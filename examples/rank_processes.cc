#include "examples/rank_processes.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

extern char** environ;

namespace dcp::examples {
namespace {

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) {
    return absl::StrCat("exited with status ", WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    return absl::StrCat("was killed by signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("ended with wait status ", status);
}

absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) {
    args.push_back(const_cast<char*>(a.c_str()));
  }
  args.push_back(nullptr);
  pid_t pid = -1;
  const int error =
      posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ);
  if (error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot start ", argv[0], ": ", std::strerror(error)));
  }
  return pid;
}

}  // namespace

absl::StatusOr<std::string> SelfExecutable() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read /proc/self/exe: ", std::strerror(errno)));
  }
  return std::string(path, n);
}

absl::StatusOr<std::unique_ptr<RankProcesses>> RankProcesses::Start(
    const std::vector<std::vector<std::string>>& argvs) {
  if (argvs.empty()) return absl::InvalidArgumentError("no ranks to start");
  std::unique_ptr<RankProcesses> ranks(new RankProcesses());
  for (size_t r = 0; r < argvs.size(); ++r) {
    if (argvs[r].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, ": empty argv"));
    }
    absl::StatusOr<pid_t> pid = Spawn(argvs[r]);
    if (!pid.ok()) {
      return absl::UnavailableError(
          absl::StrCat("rank ", r, ": ", pid.status().message()));
    }
    ranks->pids_.push_back(*pid);
  }
  return ranks;
}

RankProcesses::~RankProcesses() { KillRemaining(); }

absl::StatusOr<std::pair<int, int>> RankProcesses::ReapOne() {
  while (true) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(
          absl::StrCat("waitpid: ", std::strerror(errno)));
    }
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (pids_[r] != pid) continue;
      pids_[r] = -1;
      return std::make_pair(static_cast<int>(r), status);
    }
    // Not a rank (no other children are expected): keep waiting.
  }
}

absl::Status RankProcesses::Wait() {
  for (size_t exited = 0; exited < pids_.size(); ++exited) {
    absl::StatusOr<std::pair<int, int>> reaped = ReapOne();
    if (!reaped.ok()) {
      KillRemaining();
      return reaped.status();
    }
    const auto [rank, status] = *reaped;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    std::vector<int> running;
    for (size_t r = 0; r < pids_.size(); ++r) {
      if (pids_[r] >= 0) running.push_back(static_cast<int>(r));
    }
    KillRemaining();
    return absl::AbortedError(absl::StrCat(
        "rank ", rank, " ", DescribeExit(status),
        running.empty() ? ""
                        : absl::StrCat("; killed the ranks still running (",
                                       absl::StrJoin(running, ", "), ")")));
  }
  return absl::OkStatus();
}

void RankProcesses::KillRemaining() {
  for (pid_t pid : pids_) {
    if (pid >= 0) kill(pid, SIGKILL);
  }
  for (pid_t& pid : pids_) {
    if (pid < 0) continue;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    pid = -1;
  }
}

}  // namespace dcp::examples
