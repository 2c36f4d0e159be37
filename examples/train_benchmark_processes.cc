#include "examples/train_benchmark_processes.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"

namespace dcp::train_benchmark {
namespace {

// Reaps `child` if it has exited; true when it has.
bool Poll(Child& child) {
  if (child.done) return true;
  int status = 0;
  if (waitpid(child.pid, &status, WNOHANG) != child.pid) return false;
  child.done = true;
  child.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return true;
}

// The last `max_bytes` of a file.
std::string Tail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  return all.size() <= max_bytes ? all : all.substr(all.size() - max_bytes);
}

}  // namespace

Children::~Children() { KillAll(); }

absl::Status Children::Spawn(const std::string& name,
                             const std::vector<std::string>& argv,
                             const std::string& dir) {
  Child child;
  child.name = name;
  child.err_path = absl::StrCat(dir, "/", name, ".err");
  const std::string out_path = absl::StrCat(dir, "/", name, ".out");
  // Everything the child needs is made before fork: after it, only
  // async-signal-safe calls.
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork for ", name));
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err =
        open(child.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) {
      _exit(126);
    }
    execv(args[0], args.data());
    _exit(127);
  }
  child.pid = pid;
  children_.push_back(std::move(child));
  return absl::OkStatus();
}

absl::Status Children::WaitAll(absl::Time deadline) {
  while (true) {
    bool all = true;
    bool failed = false;
    for (Child& c : children_) {
      all = Poll(c) && all;
      failed = failed || (c.done && c.exit_code != 0);
    }
    if (all && !failed) return absl::OkStatus();
    // One failed rank leaves its peers waiting for it until their timeout:
    // stop them all at once.
    if (failed || absl::Now() > deadline) {
      KillAll();
      return absl::InternalError(absl::StrCat(
          failed ? "a child process failed" : "child processes timed out",
          ":\n", Describe()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

void Children::KillAll() {
  for (Child& c : children_) {
    if (!Poll(c)) kill(c.pid, SIGKILL);
  }
  for (Child& c : children_) {
    if (c.done) continue;
    int status = 0;
    waitpid(c.pid, &status, 0);
    c.done = true;
  }
}

std::string Children::Describe() const {
  std::string out;
  for (const Child& c : children_) {
    absl::StrAppend(&out, "  ", c.name, ": ",
                    c.exit_code >= 0 ? absl::StrCat("exit ", c.exit_code)
                                     : std::string("killed"),
                    "\n", Tail(c.err_path, 2000), "\n");
  }
  return out;
}

}  // namespace dcp::train_benchmark
