#ifndef DCP_SCHEDULER_DELIVERY_DELIVERY_ROW_H_
#define DCP_SCHEDULER_DELIVERY_DELIVERY_ROW_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/model_spec.h"
#include "scheduler/delivery/delivery_relays.h"

// One row of the plan-delivery benchmark: a scheduler and its simulated
// agents run to the end, and what was measured.
namespace dcp::plan_delivery {

/// One row of the benchmark: a fresh scheduler on 127.0.0.1:0 and `agents`
/// simulated agents (see plan_delivery_benchmark_main.cc for what each
/// field means; each is copied from the flag of the same name).
struct RowConfig {
  int agents = 0;
  int64_t steps = 0;
  int warmup_steps = 0;
  absl::Duration max_time;
  int lookahead_steps = 0;
  int refit_every = 0;
  int channels = 0;
  /// SchedulerServerOptions::fanout_threads (-1: auto).
  int fanout_threads = -1;
  int client_threads = 0;
  int64_t tokens_per_rank = 0;
  absl::Duration step_time;
  bool report_stream = true;
  /// Ranks per simulated agent stream (1: StreamPlans per rank; more: a
  /// node's ranks on StreamNodePlans and StreamNodeReports).
  int ranks_per_stream = 1;
  int64_t window = 0;
  /// When set, the agents reach the scheduler through these relays (one
  /// channel each, rank r through relay r % count; `channels` is then
  /// unused), which the row starts once the scheduler serves and stops at
  /// its end. Not owned.
  RelayProcesses* relays = nullptr;
  /// When set, the scheduler is this dcp-scheduler binary, run as a child
  /// process (delivery_processes.h) with the row's settings as flags,
  /// instead of a SchedulerServer in this process: its CPU is then its own,
  /// and its injected t0 clock is out of reach: the latencies are taken from
  /// each step's planned_at_unix_micros, and the per-step planning and
  /// fan-out columns stay empty. `lengths_path` is the trace it is given
  /// (the one `lengths` was read from).
  std::string scheduler_binary;
  std::string lengths_path;
  ModelSpec model;
  const std::vector<int32_t>* lengths = nullptr;
};

/// What a row measured (milliseconds unless named otherwise).
struct RowResult {
  int agents = 0;
  /// False when the row could not start (then only `first_error` is set).
  bool ran = false;
  int64_t measured_steps = 0;
  int64_t incomplete_steps = 0;
  int64_t inexact_t0 = 0;
  double step_p50_ms = 0, step_p99_ms = 0, step_max_ms = 0;
  double agent_p50_ms = 0, agent_p99_ms = 0;
  double spread_p50_ms = 0;
  double steps_per_s = 0;
  double plan_p50_ms = 0, plan_p99_ms = 0;
  double fanout_p50_ms = 0, fanout_p99_ms = 0;
  double plan_cpu_p50_ms = 0, fanout_cpu_p50_ms = 0;
  double tasks_per_step = 0;
  double bytes_per_message = 0;
  double client_ms_per_step = 0;
  /// CPU ms per step of the agents' queue threads, and of the rest of the
  /// process: the scheduler, plus gRPC threads both ends share.
  double agents_cpu_ms_per_step = 0;
  double server_cpu_ms_per_step = 0;
  /// `server_cpu_ms_per_step` less the planning thread's CPU while
  /// planning (its mean over the row's steps): the gRPC work both ends
  /// share, fan-out included, and the control plane's handling of reports.
  double rpc_cpu_ms_per_step = 0;
  /// With `RowConfig::scheduler_binary`: true, and the scheduler process's
  /// CPU ms per step, all of it and its planning thread's while planning
  /// (dcp_scheduler_planning_cpu_seconds_total); `rpc_cpu_ms_per_step` is
  /// then their difference, and `server_cpu_ms_per_step` this process's CPU
  /// (the simulated agents) less the queue threads'.
  bool scheduler_apart = false;
  double scheduler_cpu_ms_per_step = 0;
  double planning_cpu_ms_per_step = 0;
  /// Relays in front of the scheduler (0: none), and their CPU ms per step.
  int relays = 0;
  double relay_cpu_ms_per_step = 0;
  double process_cores = 0;
  double machine_busy = 0;
  double machine_steal = 0;
  /// Cores busy outside this process (other users of the machine).
  double other_cores = 0;
  int threads = 0;
  double register_s = 0;
  int64_t errors = 0;
  std::string first_error;
  std::string load_before, load_after;
};

/// Runs one row: starts the scheduler (in this process, or as a child with
/// `scheduler_binary`), registers and starts the agents, drains after
/// `max_time`, and reduces what the agents saw. The error of a
/// row that could not start (file descriptors, the server, registration).
absl::StatusOr<RowResult> RunRow(const RowConfig& config);

}  // namespace dcp::plan_delivery

#endif  // DCP_SCHEDULER_DELIVERY_DELIVERY_ROW_H_
