#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

extern char** environ;

namespace dcp::subprocess {
namespace {

// Where pidfds are refused (an old kernel, too many open files), how long
// a wait sleeps between looks at the children.
constexpr absl::Duration kPollInterval = absl::Milliseconds(20);

// Closes the file descriptors it holds when it goes out of scope.
class FdCloser {
 public:
  FdCloser() = default;
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  ~FdCloser() {
    for (int fd : fds_) close(fd);
  }
  void Add(int fd) { fds_.push_back(fd); }

 private:
  std::vector<int> fds_;
};

// Opens `path` for one of the child's standard streams, with `flags`
// besides close-on-exec (the child gets it through a dup2, which clears the
// flag on the copy); `closer` closes this process's copy when `Start`
// returns.
absl::StatusOr<int> OpenForChild(const std::string& path, int flags,
                                 FdCloser& closer) {
  const int fd = open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::ErrnoToStatus(
        errno,
        absl::StrCat((flags & O_TRUNC) != 0 ? "cannot create " : "cannot open ",
                     path));
  }
  closer.Add(fd);
  return fd;
}

// What `posix_spawn` is to do in the child before it runs the binary: its
// stdin, stdout and stderr from `in`, `out` and `err` where >= 0, and its
// working directory. An errno value, 0 when all were queued.
int QueueActions(int in, int out, int err, const std::string& working_dir,
                 posix_spawn_file_actions_t& actions) {
  const std::pair<int, int> dups[] = {{in, 0}, {out, 1}, {err, 2}};
  for (const auto& [fd, to] : dups) {
    if (fd < 0) continue;
    const int error = posix_spawn_file_actions_adddup2(&actions, fd, to);
    if (error != 0) return error;
  }
  if (working_dir.empty()) return 0;
  return posix_spawn_file_actions_addchdir_np(&actions, working_dir.c_str());
}

void Record(Child& child, int status) {
  child.done = true;
  child.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  child.term_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

bool Failed(const Child& child) { return child.done && child.exit_code != 0; }

// Blocks until one of the running `children` exits or `deadline` passes.
void AwaitAnExit(const std::vector<Child>& children, absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return;
  FdCloser closer;
  std::vector<pollfd> exits;
  for (const Child& c : children) {
    if (c.done) continue;
    // Through syscall: glibc 2.36's <sys/pidfd.h> declares pidfd_open
    // without C linkage.
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, c.pid, 0));
    if (fd < 0) {
      absl::SleepFor(std::min(left, kPollInterval));
      return;
    }
    closer.Add(fd);
    exits.push_back({fd, POLLIN, 0});
  }
  // Rounded up, so that a wait never ends just short of the deadline; an
  // infinite one wakes every few weeks.
  const int64_t ms = std::min<int64_t>(absl::ToInt64Milliseconds(left),
                                       std::numeric_limits<int>::max() - 1);
  poll(exits.data(), exits.size(), static_cast<int>(ms + 1));
}

// Reaps `children` as they exit until all have, one has failed (with
// `until_failure`), or `deadline` passes. The index of the failed child,
// or -1.
int Reap(std::vector<Child>& children, absl::Time deadline,
         bool until_failure) {
  while (true) {
    bool all = true;
    for (size_t i = 0; i < children.size(); ++i) {
      if (!Poll(children[i])) {
        all = false;
      } else if (until_failure && Failed(children[i])) {
        return static_cast<int>(i);
      }
    }
    if (all || absl::Now() >= deadline) return -1;
    AwaitAnExit(children, deadline);
  }
}

}  // namespace

absl::StatusOr<Child> Start(const std::string& name,
                            const std::vector<std::string>& argv,
                            const StartOptions& options) {
  if (argv.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot start ", name, ": empty argv"));
  }
  if (!options.output_dir.empty() && !options.log_path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot start ", name, ": both an output_dir and a log_path"));
  }
  Child child;
  child.name = name;
  FdCloser closer;
  int in = -1;
  int out = -1;
  int err = -1;
  if (!options.stdin_path.empty()) {
    ASSIGN_OR_RETURN(in, OpenForChild(options.stdin_path, O_RDONLY, closer));
  }
  if (!options.output_dir.empty()) {
    child.out_path = absl::StrCat(options.output_dir, "/", name, ".out");
    child.err_path = absl::StrCat(options.output_dir, "/", name, ".err");
    constexpr int kTruncate = O_WRONLY | O_CREAT | O_TRUNC;
    ASSIGN_OR_RETURN(out, OpenForChild(child.out_path, kTruncate, closer));
    ASSIGN_OR_RETURN(err, OpenForChild(child.err_path, kTruncate, closer));
  }
  if (!options.log_path.empty()) {
    child.out_path = child.err_path = options.log_path;
    ASSIGN_OR_RETURN(out, OpenForChild(options.log_path,
                                       O_WRONLY | O_CREAT | O_APPEND, closer));
    err = out;
  }
  std::vector<char*> args;
  for (const std::string& a : argv) {
    args.push_back(const_cast<char*>(a.c_str()));
  }
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  int error = posix_spawn_file_actions_init(&actions);
  if (error == 0) {
    error = QueueActions(in, out, err, options.working_dir, actions);
    if (error == 0) {
      error = posix_spawn(&child.pid, args[0], &actions, nullptr, args.data(),
                          environ);
    }
    posix_spawn_file_actions_destroy(&actions);
  }
  if (error != 0) {
    const std::string where = options.working_dir.empty()
                                  ? ""
                                  : absl::StrCat(" in ", options.working_dir);
    return absl::ErrnoToStatus(
        error, absl::StrCat("cannot start ", name, " (", argv[0], ")", where));
  }
  return child;
}

absl::StatusOr<Child> Start(const std::string& name,
                            const std::vector<std::string>& argv,
                            const std::string& output_dir) {
  StartOptions options;
  options.output_dir = output_dir;
  return Start(name, argv, options);
}

absl::StatusOr<Child> Run(const std::string& name,
                          const std::vector<std::string>& argv,
                          const StartOptions& options) {
  ASSIGN_OR_RETURN(Child child, Start(name, argv, options));
  std::vector<Child> one = {std::move(child)};
  WaitAll(one, absl::InfiniteFuture());
  return std::move(one[0]);
}

bool Poll(Child& child) {
  if (child.done) return true;
  if (child.pid <= 0) return false;  // Never started: nothing to reap.
  int status = 0;
  if (waitpid(child.pid, &status, WNOHANG) != child.pid) return false;
  Record(child, status);
  return true;
}

bool WaitAll(std::vector<Child>& children, absl::Time deadline) {
  Reap(children, deadline, /*until_failure=*/false);
  return std::all_of(children.begin(), children.end(),
                     [](const Child& c) { return c.done; });
}

void KillAll(std::vector<Child>& children) {
  for (Child& c : children) {
    if (!Poll(c) && c.pid > 0) kill(c.pid, SIGKILL);
  }
  for (Child& c : children) {
    if (c.done || c.pid <= 0) continue;
    int status = 0;
    pid_t reaped = -1;
    do {
      reaped = waitpid(c.pid, &status, 0);
    } while (reaped < 0 && errno == EINTR);
    if (reaped == c.pid) {
      Record(c, status);
    } else {
      c.done = true;  // Reaped elsewhere: gone, how it ended unknown.
    }
  }
}

void TerminateAll(std::vector<Child>& children, absl::Duration grace) {
  // The children it signals, and where each stands in `children`: those
  // never started or already reaped have nothing to wait for.
  std::vector<Child> running;
  std::vector<size_t> at;
  for (size_t i = 0; i < children.size(); ++i) {
    if (children[i].pid <= 0 || Poll(children[i])) continue;
    kill(children[i].pid, SIGTERM);
    running.push_back(children[i]);
    at.push_back(i);
  }
  if (running.empty()) return;
  WaitAll(running, absl::Now() + grace);
  KillAll(running);
  for (size_t k = 0; k < at.size(); ++k) children[at[k]] = running[k];
}

void Terminate(Child& child, absl::Duration grace) {
  std::vector<Child> one = {child};
  TerminateAll(one, grace);
  child = one[0];
}

std::string DescribeEnd(const Child& child) {
  if (!child.done) return "running";
  if (child.term_signal != 0) {
    const char* abbrev = sigabbrev_np(child.term_signal);
    return abbrev != nullptr
               ? absl::StrCat("killed by SIG", abbrev)
               : absl::StrCat("killed by signal ", child.term_signal);
  }
  if (child.exit_code >= 0) return absl::StrCat("exit ", child.exit_code);
  return "ended";
}

std::string FileTail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  const bool cut = static_cast<uint64_t>(size) > max_bytes;
  in.seekg(cut ? size - static_cast<std::streamoff>(max_bytes) : 0);
  std::string tail((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  return cut ? "..." + tail : tail;
}

std::string Describe(const std::vector<Child>& children,
                     size_t max_stderr_bytes) {
  std::string out;
  for (const Child& c : children) {
    absl::StrAppend(&out, "---- ", c.name, " (", DescribeEnd(c), ")\n");
    if (!c.err_path.empty()) {
      absl::StrAppend(&out, FileTail(c.err_path, max_stderr_bytes), "\n");
    }
  }
  return out;
}

Children& Children::operator=(Children&& other) {
  if (this != &other) {
    KillAll(children_);
    children_ = std::move(other.children_);
    other.children_.clear();
  }
  return *this;
}

Children::~Children() { KillAll(children_); }

absl::Status Children::Start(const std::string& name,
                             const std::vector<std::string>& argv,
                             const std::string& output_dir) {
  absl::StatusOr<Child> child = subprocess::Start(name, argv, output_dir);
  if (!child.ok()) return child.status();
  children_.push_back(*std::move(child));
  return absl::OkStatus();
}

absl::Status Children::Wait(absl::Time deadline) {
  const int failed = Reap(children_, deadline, /*until_failure=*/true);
  std::vector<std::string> running;
  for (const Child& c : children_) {
    if (!c.done) running.push_back(c.name);
  }
  if (failed < 0 && running.empty()) return absl::OkStatus();
  KillAll(children_);
  std::string message;
  if (failed >= 0) {
    const Child& c = children_[failed];
    message = absl::StrCat(c.name, " failed (", DescribeEnd(c), ")");
    if (!running.empty()) {
      absl::StrAppend(&message, "; killed those still running: ",
                      absl::StrJoin(running, ", "));
    }
  } else {
    message = absl::StrCat("still running at the deadline, killed: ",
                           absl::StrJoin(running, ", "));
  }
  const bool in_files =
      std::any_of(children_.begin(), children_.end(),
                  [](const Child& c) { return !c.err_path.empty(); });
  if (in_files) {
    absl::StrAppend(&message, "\n", Describe(children_, kStderrTailBytes));
  }
  return failed >= 0 ? absl::AbortedError(message)
                     : absl::DeadlineExceededError(message);
}

absl::StatusOr<std::string> SelfExecutable() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read /proc/self/exe: ", std::strerror(errno)));
  }
  return std::string(path, n);
}

}  // namespace dcp::subprocess
