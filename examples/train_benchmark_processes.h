#ifndef DCP_EXAMPLES_TRAIN_BENCHMARK_PROCESSES_H_
#define DCP_EXAMPLES_TRAIN_BENCHMARK_PROCESSES_H_

// The process plumbing of dcp-train-bench: the binary re-runs itself as each
// rank, the ranks form their c10d groups through the rendezvous store of a
// SchedulerServer the parent serves on 127.0.0.1:0.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/model_spec.h"
#include "examples/rank_processes.h"
#include "examples/rendezvous_ranks.h"

namespace dcp::train_benchmark {

/// This process's binary, for re-running it as a rank.
using examples::SelfExecutable;

/// A child process with stdout and stderr in files.
struct Child {
  std::string name;
  pid_t pid = -1;
  std::string err_path;
  /// -1 while running or when killed by a signal.
  int exit_code = -1;
  bool done = false;
};

/// Child processes of one phase, SIGKILLed and reaped when the object goes
/// out of scope if still running, so that an early return leaves none
/// behind. Move-only; not thread-safe.
///
///   Children ranks;
///   RETURN_IF_ERROR(ranks.Spawn("rank0", {self, "--rank_job", ...}, dir));
///   RETURN_IF_ERROR(ranks.WaitAll(absl::Now() + absl::Minutes(5)));
class Children {
 public:
  Children() = default;
  Children(Children&&) = default;
  Children& operator=(Children&&) = default;
  ~Children();

  /// Starts `argv` (argv[0] is the binary's path) as `name`, stdout and
  /// stderr in `<dir>/<name>.out` and `.err`. INTERNAL when fork fails.
  absl::Status Spawn(const std::string& name,
                     const std::vector<std::string>& argv,
                     const std::string& dir);

  /// Waits for every child until `deadline`. OK when all exited 0;
  /// otherwise (a child failed, or the deadline passed, after which all are
  /// killed) an error with each failed child's name, state and stderr tail.
  absl::Status WaitAll(absl::Time deadline);

 private:
  void KillAll();
  std::string Describe() const;

  std::vector<Child> children_;
};

using examples::ConnectRankGroups;
using examples::RankGroups;
using examples::StartRendezvousServer;

}  // namespace dcp::train_benchmark

#endif  // DCP_EXAMPLES_TRAIN_BENCHMARK_PROCESSES_H_
