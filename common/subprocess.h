#ifndef DCP_COMMON_SUBPROCESS_H_
#define DCP_COMMON_SUBPROCESS_H_

// Child processes: starting them (posix_spawn), reaping them, waiting for a
// set of them until a deadline, and stopping or killing what still runs.
// What the launchers (dcp-train's ranks, dcp-train-bench's), the
// plan-delivery benchmark and the cross-process tests run their children
// with.

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace dcp::subprocess {

/// A child process this process started, and how it ended once reaped. A
/// plain record: copying it copies the record, not the process, and
/// whoever reaps the process (`Poll`, `KillAll`, or a caller's own
/// waitpid, which then sets `done`) fills in how it ended.
struct Child {
  std::string name;
  pid_t pid = -1;
  /// The files its stdout and stderr go to (the same one with
  /// `StartOptions::log_path`); empty when it shares this process's.
  std::string out_path;
  std::string err_path;
  /// Its exit status once reaped; -1 while running or when a signal ended
  /// it.
  int exit_code = -1;
  /// The signal that ended it, once reaped; 0 while running or when it
  /// exited.
  int term_signal = 0;
  bool done = false;
};

/// Where a child's standard streams go and where it runs; each left empty,
/// the child shares this process's.
struct StartOptions {
  /// Its stdout and stderr go to `<output_dir>/<name>.out` and `.err`,
  /// created or truncated.
  std::string output_dir;
  /// Its stdout and stderr both go to this one file, appended to (created
  /// when missing): a log that outlives the child or that several share.
  /// Not with `output_dir`.
  std::string log_path;
  /// Its stdin is read from this file.
  std::string stdin_path;
  /// The directory it starts in; a relative argv[0] is found from there,
  /// the files above from this process's.
  std::string working_dir;
};

/// Starts `argv` as `name`: argv[0] is the binary's path (no PATH search);
/// the child gets this process's environment, and its standard streams
/// and working directory as `options` says. INVALID_ARGUMENT for an empty
/// argv or both `output_dir` and `log_path`; otherwise the error met
/// opening a file for it (naming the file) or starting the binary (naming
/// the child, the binary and any working directory: NOT_FOUND when one
/// does not exist, PERMISSION_DENIED, ...).
///
///   StartOptions options;
///   options.log_path = dir + "/scheduler.log";
///   ASSIGN_OR_RETURN(Child child, Start("scheduler", argv, options));
absl::StatusOr<Child> Start(const std::string& name,
                            const std::vector<std::string>& argv,
                            const StartOptions& options);

/// `Start` with only `StartOptions::output_dir` (none when empty).
///
///   ASSIGN_OR_RETURN(Child child, Start("echo", {"/bin/echo", "x"}, dir));
absl::StatusOr<Child> Start(const std::string& name,
                            const std::vector<std::string>& argv,
                            const std::string& output_dir = "");

/// Reaps `child` if it has exited; true when it has (now or before).
bool Poll(Child& child);

/// Reaps `children` as they exit until all have or `deadline` passes; true
/// when all have. Wakes as a child exits (it polls the children's pidfds;
/// every 20 ms where the kernel gives none).
bool WaitAll(std::vector<Child>& children, absl::Time deadline);

/// `Start`s `argv` as `name` and waits until it has ended and is reaped,
/// however long that takes (a caller's own timeout is the bound): the
/// child, its exit status filled in; `Start`'s errors.
///
///   ASSIGN_OR_RETURN(Child done, Run("check", {"/bin/true"}, options));
absl::StatusOr<Child> Run(const std::string& name,
                          const std::vector<std::string>& argv,
                          const StartOptions& options);

/// SIGKILLs every child still running, then reaps them all.
void KillAll(std::vector<Child>& children);

/// Asks every child still running to stop (SIGTERM: a daemon drains on
/// it), reaps them as they exit, and SIGKILLs and reaps those still
/// running once `grace` has passed. Returns as soon as all have ended.
///
///   TerminateAll(relays, absl::Seconds(10));
void TerminateAll(std::vector<Child>& children, absl::Duration grace);

/// `TerminateAll` of one child.
void Terminate(Child& child, absl::Duration grace);

/// How `child` stands: "running", "exit 3", "killed by SIGKILL", or
/// "ended" when it was reaped elsewhere without its status.
std::string DescribeEnd(const Child& child);

/// The last `max_bytes` of the file at `path` (what a child wrote), after
/// "..." when cut; "" when it cannot be read.
std::string FileTail(const std::string& path, size_t max_bytes);

/// For error messages: each child's name and `DescribeEnd`, then what its
/// stderr file holds, of that only the last `max_stderr_bytes` (after
/// "...") for children that log a lot:
///
///   ---- rank1 (exit 3)
///   <stderr>
std::string Describe(const std::vector<Child>& children,
                     size_t max_stderr_bytes = std::string::npos);

/// Child processes started together that end together: `Wait` stops them
/// all once one fails, and the destructor SIGKILLs and reaps whatever
/// still runs, so that an early return leaves no process behind.
/// Move-only; not thread-safe.
///
///   Children ranks;
///   for (int r = 0; r < world; ++r) {
///     RETURN_IF_ERROR(ranks.Start(absl::StrCat("rank", r), argv(r), dir));
///   }
///   RETURN_IF_ERROR(ranks.Wait(absl::Now() + absl::Minutes(5)));
class Children {
 public:
  /// How much of each child's stderr `Wait`'s errors end with.
  static constexpr size_t kStderrTailBytes = 2000;

  Children() = default;
  Children(Children&& other) = default;
  /// Kills and reaps what this one still runs before taking `other`'s.
  Children& operator=(Children&& other);
  ~Children();

  /// `subprocess::Start`, the child kept here.
  absl::Status Start(const std::string& name,
                     const std::vector<std::string>& argv,
                     const std::string& output_dir = "");

  /// Reaps the children until all have exited. OK when each exited 0.
  /// Otherwise, as soon as one exits with another status or is killed by a
  /// signal (its peers may be waiting for it), or once `deadline` passes,
  /// SIGKILLs and reaps those still running and returns ABORTED naming the
  /// child that failed and how, or DEADLINE_EXCEEDED naming those that
  /// were still running; either followed by `Describe` with the last
  /// `kStderrTailBytes` of each stderr, when the children write theirs to
  /// files.
  absl::Status Wait(absl::Time deadline = absl::InfiniteFuture());

  const std::vector<Child>& children() const { return children_; }

 private:
  std::vector<Child> children_;
};

/// The path of this process's binary (/proc/self/exe), for re-running it as
/// a child; FAILED_PRECONDITION when it cannot be read.
absl::StatusOr<std::string> SelfExecutable();

}  // namespace dcp::subprocess

#endif  // DCP_COMMON_SUBPROCESS_H_
