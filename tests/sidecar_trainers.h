#ifndef DCP_TESTS_SIDECAR_TRAINERS_H_
#define DCP_TESTS_SIDECAR_TRAINERS_H_

// Trainers of the cross-process tests that use client_lib's sidecar mode
// against serve-mode dcp-agent processes (testonly).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client_lib/client.h"

namespace dcp {
namespace testing_process {

/// What the sidecar trainers of a job got, per rank.
struct SidecarRun {
  /// The steps each trainer got, in order.
  std::vector<std::vector<int64_t>> steps;
  /// How each trainer ended: OK once it was told the job is drained, else
  /// the first error it got.
  std::vector<absl::Status> results;
};

/// Runs one sidecar trainer a socket, as threads of this process (rank r on
/// `sockets[r]`, a serve-mode dcp-agent's), until the job is drained or a
/// call fails, and returns once all have ended. Each takes its step's tasks
/// and reports 10 ms for each. `options` gives the timeouts; the mode, the
/// socket and the rank are set here.
///
///   ClientOptions options;
///   options.step_timeout = absl::Seconds(30);
///   const SidecarRun run = RunSidecarTrainers(serving.sockets, options);
SidecarRun RunSidecarTrainers(const std::vector<std::string>& sockets,
                              const ClientOptions& options);

}  // namespace testing_process
}  // namespace dcp

#endif  // DCP_TESTS_SIDECAR_TRAINERS_H_
