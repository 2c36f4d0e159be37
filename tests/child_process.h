#ifndef DCP_TESTS_CHILD_PROCESS_H_
#define DCP_TESTS_CHILD_PROCESS_H_

// Child processes for the cross-process tests: the real binaries from the
// test's runfiles, stdout and stderr in files under TEST_TMPDIR, and what
// the tests expect of them (testonly; common/subprocess.h runs them).

#include <cstddef>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/subprocess.h"
#include "nlohmann/json.hpp"

namespace dcp {
namespace testing_process {

/// `name` under the test's TEST_TMPDIR.
std::string TmpPath(const std::string& name);
/// A file of this workspace from the test's runfiles: a binary
/// ("scheduler/server/dcp-ctl") or a data file the test lists in `data`.
std::string Binary(const std::string& path);
/// The whole file ("" when it cannot be read).
std::string ReadFile(const std::string& path);
/// Writes `text` to `path`; false on failure.
bool WriteFile(const std::string& path, const std::string& text);

/// Copies the files of the test's temporary directory whose names start
/// with `prefix` (its children's output and logs) into Bazel's undeclared
/// outputs (test.outputs/outputs.zip), so that a run that failed on a CI
/// machine can be read after it. A no-op outside `bazel test`.
void KeepOutputs(const std::string& prefix);

/// The process plumbing (common/subprocess.h): a child's record, reaping,
/// waiting until a deadline, killing, and the failure summary.
using subprocess::Child;
using subprocess::Describe;
using subprocess::KillAll;
using subprocess::Poll;
using subprocess::WaitAll;

/// Starts `argv` (argv[0] is the binary's path) as `name`, stdout and
/// stderr in `name`.out and .err under TEST_TMPDIR. When it cannot be
/// started (a binary missing from the runfiles), the test binary stops
/// there with the reason: a child that never ran has no pid to signal.
Child Spawn(const std::string& name, const std::vector<std::string>& argv);
/// Waits for every child up to `deadline`; when some still run, SIGKILLs
/// and reaps them all, fails the test with `what` and every child's stderr,
/// and returns false.
bool ExpectAllExit(std::vector<Child>& children, absl::Time deadline,
                   const std::string& what);
/// Runs a short command to completion (30 s at most); its stdout, or "" and
/// a test failure.
std::string RunToEnd(const std::string& name,
                     const std::vector<std::string>& argv);

/// A notification of what happens to the files of some folders: a file
/// written, created, renamed into one of them, or closed after writing (a
/// child's exit closes its stdout and stderr files). What a test waits on
/// when it waits for a child's output: make it, look at the files, and
/// `Await` the next change if what it looks for is not there yet (changes
/// between the look and the wait are queued, never missed).
class FileActivity {
 public:
  explicit FileActivity(const std::vector<std::string>& dirs);
  ~FileActivity();
  FileActivity(const FileActivity&) = delete;
  FileActivity& operator=(const FileActivity&) = delete;

  /// Blocks until something changed since the last call (or since the
  /// watch began), or until `deadline`; false at the deadline.
  bool Await(absl::Time deadline);

 private:
  int fd_ = -1;
};

/// The port `child` wrote to `path` (the file a `--port_file` or
/// `--metrics_port_file` flag names) once it has; 0 when the child exits
/// first or `deadline` passes.
int WaitForPortFile(const std::string& path, Child& child, absl::Time deadline);

/// SIGKILLs and reaps, when it goes out of scope, every child still running
/// in the groups it watches, so that a test that stops early (a failed
/// ASSERT) leaves no process behind. It only points at the groups: declare
/// it after them, so that they outlive it. Not thread-safe.
///
///   std::vector<Child> scheduler;
///   std::vector<Child> agents;
///   ChildReaper reaper({&scheduler, &agents});
///   scheduler = {Spawn("scheduler", argv)};
class ChildReaper {
 public:
  explicit ChildReaper(std::vector<std::vector<Child>*> groups);
  ChildReaper(const ChildReaper&) = delete;
  ChildReaper& operator=(const ChildReaper&) = delete;
  ~ChildReaper();

  /// `Describe` over every group, in order.
  std::string Describe(size_t max_stderr_bytes = std::string::npos) const;

 private:
  std::vector<std::vector<Child>*> groups_;
};

/// Starts dcp-scheduler with `flags` plus `--listen=127.0.0.1:0` and a port
/// file; returns its port once it serves (0 and a test failure when it does
/// not start).
int StartScheduler(const std::string& name,
                   const std::vector<std::string>& flags,
                   std::vector<Child>& scheduler);
/// Starts a dcp-scheduler incarnation named `name` with `flags` plus
/// `--listen=127.0.0.1:<port>` (0: any) and a port file, appended to
/// `scheduler` (the incarnations before it stay, for their logs); returns
/// its port once it serves (0 and a test failure when it does not within
/// 60 s).
int StartSchedulerIncarnation(const std::string& name,
                              const std::vector<std::string>& flags, int port,
                              std::vector<Child>& scheduler);
/// Stops the scheduler with `dcp-ctl stop`; it must exit 0.
void StopScheduler(const std::string& address, std::vector<Child>& scheduler);
/// `dcp-ctl --json status` against the scheduler at `address`, run as
/// `name`: its answer, or a discarded value and a test failure when the
/// answer is not JSON.
nlohmann::json CtlStatus(const std::string& name, const std::string& address);
/// A number of a proto3 JSON answer such as `CtlStatus`'s (int64 fields
/// are printed as strings); 0 and a test failure when it is neither.
double JsonNumber(const nlohmann::json& j);

}  // namespace testing_process
}  // namespace dcp

#endif  // DCP_TESTS_CHILD_PROCESS_H_
