#include "tests/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

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

Child Spawn(const std::string& name, const std::vector<std::string>& argv) {
  Child child;
  child.name = name;
  child.out_path = TmpPath(name + ".out");
  child.err_path = TmpPath(name + ".err");
  // Everything the child needs is made before fork: after it, only
  // async-signal-safe calls.
  std::vector<char*> args;
  for (const std::string& a : argv) {
    args.push_back(const_cast<char*>(a.c_str()));
  }
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int out =
        open(child.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err =
        open(child.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) {
      _exit(126);
    }
    execv(args[0], args.data());
    _exit(127);
  }
  child.pid = pid;
  return child;
}

bool Poll(Child& child) {
  if (child.done) return true;
  int status = 0;
  const pid_t r = waitpid(child.pid, &status, WNOHANG);
  if (r != child.pid) return false;
  child.done = true;
  child.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return true;
}

bool WaitAll(std::vector<Child>& children, absl::Time deadline) {
  while (true) {
    bool all = true;
    for (Child& c : children) all = Poll(c) && all;
    if (all) return true;
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(50));
  }
}

void KillAll(std::vector<Child>& children) {
  for (Child& c : children) {
    if (!Poll(c)) kill(c.pid, SIGKILL);
  }
  for (Child& c : children) {
    if (!c.done) {
      int status = 0;
      waitpid(c.pid, &status, 0);
      c.done = true;
    }
  }
}

std::string Describe(const std::vector<Child>& children) {
  std::string out;
  for (const Child& c : children) {
    absl::StrAppend(&out, "---- ", c.name, " (exit ", c.exit_code, ")\n",
                    ReadFile(c.err_path), "\n");
  }
  return out;
}

std::string RunToEnd(const std::string& name,
                     const std::vector<std::string>& argv) {
  std::vector<Child> one = {Spawn(name, argv)};
  if (!WaitAll(one, absl::Now() + absl::Seconds(30))) {
    KillAll(one);
    ADD_FAILURE() << name << " did not finish:\n" << Describe(one);
    return "";
  }
  EXPECT_EQ(one[0].exit_code, 0) << Describe(one);
  return ReadFile(one[0].out_path);
}

int StartScheduler(const std::string& name,
                   const std::vector<std::string>& flags,
                   std::vector<Child>& scheduler) {
  const std::string port_path = TmpPath(name + ".port");
  std::vector<std::string> argv = {Binary("scheduler/dcp-scheduler")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.push_back("--listen=127.0.0.1:0");
  argv.push_back("--port_file=" + port_path);
  scheduler = {Spawn(name, argv)};
  // The port file appears once the scheduler serves.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (true) {
    int port = 0;
    const std::string text = ReadFile(port_path);
    if (!text.empty() &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port)) {
      return port;
    }
    if (Poll(scheduler[0]) || absl::Now() > deadline) {
      KillAll(scheduler);
      ADD_FAILURE() << "the scheduler did not start:\n" << Describe(scheduler);
      return 0;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

void StopScheduler(const std::string& address, std::vector<Child>& scheduler) {
  RunToEnd("ctl-stop",
           {Binary("scheduler/dcp-ctl"), "--scheduler=" + address, "stop"});
  if (!WaitAll(scheduler, absl::Now() + absl::Seconds(30))) {
    KillAll(scheduler);
    ADD_FAILURE() << "the scheduler did not stop:\n" << Describe(scheduler);
  }
  EXPECT_EQ(scheduler[0].exit_code, 0) << Describe(scheduler);
}

}  // namespace testing_process
}  // namespace dcp
