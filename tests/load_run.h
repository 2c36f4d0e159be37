#ifndef DCP_TESTS_LOAD_RUN_H_
#define DCP_TESTS_LOAD_RUN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

// The load test's run: the real dcp-scheduler binary as a child process on
// 127.0.0.1:0 and N simulated agents (scheduler/delivery/simulated_agent.h) in
// this process, over a few loopback gRPC channels, at a paced step rate;
// what both ends counted, and the scheduler's memory and CPU over time.
namespace dcp::load {

/// What to run (load_test.cc copies its flags into this).
struct LoadOptions {
  int agents = 4096;
  /// How long the job runs at the paced rate: the scheduler plans
  /// max(duration / step_time, lookahead_steps + 2) steps and drains.
  absl::Duration duration = absl::Seconds(60);
  /// Each agent computes a step this long (a job of 1 / step_time steps/s).
  absl::Duration step_time = absl::Seconds(1);
  /// HTTP/2 connections the agents' 2 * agents streams share.
  int channels = 32;
  /// Threads polling the agents' completion queues.
  int client_threads = 2;
  int lookahead_steps = 4;
  int64_t tokens_per_rank = 65536;
  /// The scheduler's resident memory and CPU are read this often.
  absl::Duration sample_every = absl::Seconds(10);
  /// Samples before this (from the agents' start) are left out of the fit.
  absl::Duration warmup = absl::Seconds(20);
  std::string model = "llama3-8b";
  /// The length trace the scheduler plans from (a runfiles path).
  std::string lengths_path;
};

/// One reading of the scheduler process and of this one.
struct Sample {
  /// Seconds since the agents started.
  double t = 0;
  int64_t scheduler_rss = 0;
  double scheduler_cpu_s = 0;
  /// This process: the agents, their gRPC threads and the sampler.
  double agents_cpu_s = 0;
  /// Busy cores of the whole machine since the previous sample.
  double machine_cores = 0;
  /// Steps the scheduler had planned (its GetStatus).
  int64_t planned = 0;
};

/// What a run counted at both ends and measured.
struct LoadResult {
  int64_t max_steps = 0;
  double register_s = 0;
  double run_s = 0;
  // The scheduler's end (GetStatus after the drain).
  int64_t planned_steps = 0;
  int64_t completed_steps = 0;
  int64_t reports_accepted = 0;
  /// Ranks whose last sent step is not planned_steps - 1.
  int64_t ranks_not_sent_all = 0;
  // The agents' end.
  int64_t steps_received = 0;
  /// (rank, step < planned_steps) pairs an agent never received.
  int64_t plans_missing = 0;
  int64_t reports_sent = 0;
  int64_t reports_ok = 0;
  int64_t errors = 0;
  std::string first_error;
  /// Per (rank, step >= lookahead): receipt minus the moment the step that
  /// let the scheduler plan it (step - lookahead) had its last report sent,
  /// in ms; NaN-free. `triggers_missing` counts steps without that moment.
  std::vector<double> delivery_ms;
  int64_t triggers_missing = 0;
  std::vector<Sample> samples;
  std::string load_before, load_after;
};

/// Runs it; an error when something could not start (the scheduler,
/// registration) or the agents did not finish in three times the planned
/// duration plus two minutes. Test failures (gtest) from the child helpers.
absl::StatusOr<LoadResult> RunLoad(const LoadOptions& options);

/// Least-squares slope of y over x; 0 with fewer than two distinct x.
double Slope(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace dcp::load

#endif  // DCP_TESTS_LOAD_RUN_H_
