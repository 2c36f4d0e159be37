#ifndef DCP_EXAMPLES_RANK_PROCESSES_H_
#define DCP_EXAMPLES_RANK_PROCESSES_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dcp::examples {

/// The path of this process's binary (/proc/self/exe), for re-running it as
/// a rank; FAILED_PRECONDITION when it cannot be read.
absl::StatusOr<std::string> SelfExecutable();

/// The ranks of a job on this host, one child process each, started with
/// posix_spawn; they share this process's stdout, stderr and environment.
///
/// Thread-compatible. The destructor SIGKILLs and reaps every rank still
/// running, so that no rank outlives a launcher that gave up.
///
///   ASSIGN_OR_RETURN(auto ranks, RankProcesses::Start(argvs));
///   RETURN_IF_ERROR(ranks->Wait());
class RankProcesses {
 public:
  /// Starts rank r as `argvs[r]` (argv[0] is the binary's path).
  /// INVALID_ARGUMENT for no ranks or an empty argv; UNAVAILABLE naming
  /// the rank when it cannot be started (the ranks started before it are
  /// killed).
  static absl::StatusOr<std::unique_ptr<RankProcesses>> Start(
      const std::vector<std::vector<std::string>>& argvs);

  ~RankProcesses();
  RankProcesses(const RankProcesses&) = delete;
  RankProcesses& operator=(const RankProcesses&) = delete;

  /// Blocks until every rank has exited. OK when each exits with status 0.
  /// Otherwise, as soon as the first rank exits with another status or is
  /// killed by a signal, kills the ranks still running (their peers would
  /// wait for the failed one until their collectives time out), reaps them,
  /// and returns ABORTED naming that rank and its exit.
  absl::Status Wait();

  int size() const { return static_cast<int>(pids_.size()); }

 private:
  RankProcesses() = default;

  // Blocks until some rank exits; returns its index and waitpid status.
  absl::StatusOr<std::pair<int, int>> ReapOne();
  void KillRemaining();

  // Per rank; -1 once reaped.
  std::vector<pid_t> pids_;
};

}  // namespace dcp::examples

#endif  // DCP_EXAMPLES_RANK_PROCESSES_H_
