#ifndef DCP_TESTS_CHILD_PROCESS_H_
#define DCP_TESTS_CHILD_PROCESS_H_

// Child processes for the cross-process tests: the real binaries from the
// test's runfiles, stdout and stderr in files under TEST_TMPDIR (testonly).

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dcp {
namespace testing_process {

/// `name` under the test's TEST_TMPDIR.
std::string TmpPath(const std::string& name);
/// A binary of this workspace from the test's runfiles ("scheduler/dcp-ctl").
std::string Binary(const std::string& path);
/// The whole file ("" when it cannot be read).
std::string ReadFile(const std::string& path);
/// Writes `text` to `path`; false on failure.
bool WriteFile(const std::string& path, const std::string& text);

/// A child process with stdout and stderr in files.
struct Child {
  std::string name;
  pid_t pid = -1;
  std::string out_path;
  std::string err_path;
  /// -1 while running or when killed by a signal.
  int exit_code = -1;
  bool done = false;
};

/// Starts `argv` (argv[0] is the binary's path) as `name`.
Child Spawn(const std::string& name, const std::vector<std::string>& argv);
/// Reaps `child` if it has exited; true when it has.
bool Poll(Child& child);
/// Waits for every child up to `deadline`; false when some still run.
bool WaitAll(std::vector<Child>& children, absl::Time deadline);
/// SIGKILLs every child still running and reaps them all.
void KillAll(std::vector<Child>& children);
/// Every child's name, exit code and stderr, for failure messages.
std::string Describe(const std::vector<Child>& children);
/// Runs a short command to completion (30 s at most); its stdout, or "" and
/// a test failure.
std::string RunToEnd(const std::string& name,
                     const std::vector<std::string>& argv);

/// Starts dcp-scheduler with `flags` plus `--listen=127.0.0.1:0` and a port
/// file; returns its port once it serves (0 and a test failure when it does
/// not start).
int StartScheduler(const std::string& name,
                   const std::vector<std::string>& flags,
                   std::vector<Child>& scheduler);
/// Stops the scheduler with `dcp-ctl stop`; it must exit 0.
void StopScheduler(const std::string& address, std::vector<Child>& scheduler);

}  // namespace testing_process
}  // namespace dcp

#endif  // DCP_TESTS_CHILD_PROCESS_H_
