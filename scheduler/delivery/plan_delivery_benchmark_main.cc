// Plan-delivery benchmark of the control plane: how long after a step is
// planned every agent holds its RankStep, and how many steps a second the
// scheduler sustains, with N simulated agents on loopback. The goal:
// step-delivery p99 under 5 ms at 1,024 agents, at least 10 steps/s.
//
//   bazel run -c opt //scheduler/delivery:plan_delivery_benchmark --
//     --agents=256,1024 --steps=100 [--step_ms=100] [--channels=8]
//     [--fanout_threads=-1] [--ranks_per_stream=8]
//
// Per row it starts an in-process SchedulerServer on 127.0.0.1:0 (bundled
// Wikipedia trace, llama3-8b, world = N, N * --tokens_per_rank tokens a
// step), registers N agents and opens their plan streams (N StreamPlans
// streams, or with --ranks_per_stream=k one StreamNodePlans stream per k
// ranks, a node-level agent's, with its reports batched), multiplexed over
// --channels HTTP/2 connections and driven by
// --client_threads completion-queue threads (the async API: real agents are
// separate processes, and a thread per agent would measure the OS scheduler).
// Each agent reports the timings of every step it receives (one TaskTiming
// per task, seconds as the initial cost model predicts them, so refits keep
// the model and the plans where they are): at once by default, so the
// look-ahead advances as fast as the loop allows (the scheduler's ceiling),
// or with --step_ms, on the cadence of a job whose steps take that long (the
// latency at a given rate, without the planner running flat out).
//
// What is measured, per step s (steps planned before the agents connected
// and --warmup_steps more are left out):
//   t0(s)      the end of planning s: the control plane's second clock
//              reading on the planning thread (its `start`, then its end
//              after the per-rank views are cut), taken through an injected
//              Clock and checked against PlannedStepEvent::planning_time;
//   t(a, s)    when agent a's completion-queue thread saw the message;
//   step       max over agents of t(a, s) - t0(s) (a step is delivered when
//              its last rank has it); agent: every t(a, s) - t0(s);
//   spread     last minus first arrival of the step;
//   plan       PlannedStepEvent::planning_time (wall), and the planning
//              thread's CPU time over the same span;
//   fan-out    on_step_planned time - t0(s): the control plane calls it
//              after waking every plan stream on the planning thread, so
//              this is how long (wall, CPU) that thread spent publishing the
//              step; the last stream cannot be written before it ends
//              (with a fan-out pool, --fanout_threads, the wakes only queue
//              the streams and the pool's threads do the writes);
//   steps/s    1 / the least-squares slope of delivery time over step.
//
// With --relay_binary=PATH (a dcp-node-relay), each agent count runs two
// rows: per-rank streams straight to the scheduler, then through real relay
// processes, one per --ranks_per_relay ranks (delivery_relays.h), whose CPU
// is the "relay cpu" column; the agents' own gRPC client work stays in this
// process, in "server cpu", in both rows.
//
// With --scheduler_binary=PATH (a dcp-scheduler), the scheduler of every row
// is that binary, a child process on 127.0.0.1:0 with the row's settings as
// flags and its metrics on 127.0.0.1:0 (delivery_processes.h); the rows are
// as with --relay_binary (per-rank streams straight to it, then through the
// relays when --relay_binary is given too). Its CPU is then its own: over
// the measured span (agents started to last step received), "scheduler cpu"
// is its /proc/PID/stat utime + stime per step delivered, "planning cpu"
// the growth of its dcp_scheduler_planning_cpu_seconds_total (the planning
// thread's CPU while planning) per step it planned in the span (the
// look-ahead was planned before), and "rpc cpu" its CPU less that growth,
// per step delivered; the verdict is rpc cpu against
// --goal_rpc_cpu_ms (25) at --goal_agents. The injected t0 clock is out of
// reach in a child, so these rows take each step's planned_at_unix_micros
// (its wall clock as planning ended, the agents' machine's clock too) as
// t0: "step p50/p99" is the last agent's receipt less it; there is no
// fan-out column. steps/s is fitted to when the last agent received each
// step.
//
// This file holds the flags and the printing; delivery_row.h runs a row,
// delivery_processes.h the child scheduler, simulated_agent.h the agents,
// planned_step_log.h the t0 readings and delivery_stats.h the statistics
// and CPU accounting.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/model_spec.h"
#include "common/status_macros.h"
#include "scheduler/cli/job_config.h"
#include "scheduler/delivery/delivery_relays.h"
#include "scheduler/delivery/delivery_row.h"
#include "scheduler/delivery/delivery_stats.h"

ABSL_FLAG(std::vector<std::string>, agents,
          std::vector<std::string>({"256", "1024"}),
          "Comma-separated agent counts (world sizes), one row each.");
ABSL_FLAG(int64_t, steps, 100, "Steps measured per row (after warm-up).");
ABSL_FLAG(int, warmup_steps, 4,
          "Steps left out after the ones planned before the agents "
          "connected (the look-ahead).");
ABSL_FLAG(double, max_seconds, 30,
          "Drain a row after this long even if --steps were not reached.");
ABSL_FLAG(int, lookahead_steps, 4, "ControlPlaneOptions::lookahead_steps.");
ABSL_FLAG(int, channels, 8,
          "gRPC channels (TCP connections) the agents' calls share.");
ABSL_FLAG(int, fanout_threads, -1,
          "SchedulerServerOptions::fanout_threads (-1: auto, 0: pump on the "
          "planner thread, N: a pool of N threads).");
ABSL_FLAG(int, client_threads, 2,
          "Threads polling the agents' completion queues.");
ABSL_FLAG(int64_t, tokens_per_rank, 65536,
          "Tokens per rank per step: tokens_per_step = agents * this.");
ABSL_FLAG(bool, report_stream, true,
          "Agents send their timing reports on one StreamReports stream each "
          "(false: a ReportTimings call per step).");
ABSL_FLAG(int, ranks_per_stream, 8,
          "Ranks per agent stream: 1 = a StreamPlans and a StreamReports "
          "stream per rank (one dcp-agent per GPU); N > 1 = each N ranks "
          "(a node's) share one StreamNodePlans and one StreamNodeReports "
          "stream (a node-level agent), so a step costs one plan write and "
          "one report batch per node.");
ABSL_FLAG(std::string, relay_binary, "",
          "A dcp-node-relay binary (bazel-bin/worker_agent/relay/"
          "dcp-node-relay): each agent count then runs two rows, per-rank "
          "streams straight to the scheduler and the same per-rank streams "
          "through real relay processes, one per --ranks_per_relay ranks, "
          "which put them on the node streams (--ranks_per_stream is unused).");
ABSL_FLAG(int, ranks_per_relay, 8, "Ranks per relay process (a node's).");
ABSL_FLAG(std::string, scheduler_binary, "",
          "A dcp-scheduler binary (bazel-bin/scheduler/server/dcp-scheduler): "
          "the scheduler of every row is then that binary as a child "
          "process, so its CPU is its own (the scheduler table); rows as "
          "with --relay_binary (per-rank streams, then through relays when "
          "it is given too).");
ABSL_FLAG(double, step_ms, 0,
          "Simulated compute per step: an agent reports a step this long "
          "after starting it, one step at a time (0 = report on receipt).");
ABSL_FLAG(int, refit_every, 64,
          "ControlPlaneOptions::refit_every (the daemon's default is 64 task "
          "observations; at 1,024 agents a step has thousands of tasks).");
ABSL_FLAG(std::string, lengths, "data/lengths/wikipedia.txt",
          "Length trace (text, one length a line).");
ABSL_FLAG(std::string, model, "llama3-8b", "Built-in model name.");
ABSL_FLAG(int64_t, window, 131072, "Context window.");
ABSL_FLAG(double, goal_p99_ms, 5, "Goal: step-delivery p99 below this.");
ABSL_FLAG(double, goal_steps_per_s, 10, "Goal: sustained steps per second.");
ABSL_FLAG(int, goal_agents, 1024, "The agent count the goal is stated at.");
ABSL_FLAG(double, goal_rpc_cpu_ms, 25,
          "Goal with --scheduler_binary: the scheduler's CPU less planning "
          "at most this many ms a step.");

namespace dcp::plan_delivery {
namespace {

/// Everything the flags say, checked.
struct BenchmarkOptions {
  /// One row per count, in order.
  std::vector<int> agent_counts;
  /// The rows' settings; `agents`, `model` and `lengths` are set per run.
  RowConfig row;
  std::string model_name;
  /// As given (printed so), and resolved against the user's directory.
  std::string lengths_flag;
  std::string lengths_path;
  double goal_p99_ms = 0;
  double goal_steps_per_s = 0;
  int goal_agents = 0;
  double goal_rpc_cpu_ms = 0;
  /// Empty: no relay rows.
  std::string relay_binary;
  /// Empty: the scheduler runs in this process.
  std::string scheduler_binary;
  int ranks_per_relay = 0;
};

absl::StatusOr<BenchmarkOptions> OptionsFromFlags() {
  BenchmarkOptions options;
  for (const std::string& s : absl::GetFlag(FLAGS_agents)) {
    int n = 0;
    if (!absl::SimpleAtoi(s, &n) || n <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--agents: '", s, "' is not a positive count"));
    }
    options.agent_counts.push_back(n);
  }
  RowConfig& config = options.row;
  config.steps = absl::GetFlag(FLAGS_steps);
  config.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  config.max_time = absl::Seconds(absl::GetFlag(FLAGS_max_seconds));
  config.lookahead_steps = absl::GetFlag(FLAGS_lookahead_steps);
  config.refit_every = absl::GetFlag(FLAGS_refit_every);
  config.channels = absl::GetFlag(FLAGS_channels);
  config.fanout_threads = absl::GetFlag(FLAGS_fanout_threads);
  config.client_threads = absl::GetFlag(FLAGS_client_threads);
  config.tokens_per_rank = absl::GetFlag(FLAGS_tokens_per_rank);
  config.step_time = absl::Milliseconds(absl::GetFlag(FLAGS_step_ms));
  config.report_stream = absl::GetFlag(FLAGS_report_stream);
  config.ranks_per_stream = absl::GetFlag(FLAGS_ranks_per_stream);
  if (config.ranks_per_stream < 1 ||
      (config.ranks_per_stream > 1 && !config.report_stream)) {
    return absl::InvalidArgumentError(
        "--ranks_per_stream must be >= 1, and 1 with --report_stream=false "
        "(node streams report in batches on StreamNodeReports)");
  }
  config.window = absl::GetFlag(FLAGS_window);
  if (config.steps < 2 || config.warmup_steps < 0 ||
      config.lookahead_steps < 1 || config.refit_every < 1 ||
      config.channels < 1 || config.client_threads < 1 ||
      config.tokens_per_rank < 1 || config.max_time <= absl::ZeroDuration() ||
      config.step_time < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "need --steps >= 2, --warmup_steps >= 0, --lookahead_steps, "
        "--refit_every, --channels, --client_threads, --tokens_per_rank and "
        "--max_seconds >= 1, --step_ms >= 0");
  }
  options.model_name = absl::GetFlag(FLAGS_model);
  options.lengths_flag = absl::GetFlag(FLAGS_lengths);
  // The user's file, else the bundled trace from any working directory.
  options.lengths_path =
      ResolveInput(options.lengths_flag, BazelWorkingDirectory());
  options.goal_p99_ms = absl::GetFlag(FLAGS_goal_p99_ms);
  options.goal_steps_per_s = absl::GetFlag(FLAGS_goal_steps_per_s);
  options.goal_agents = absl::GetFlag(FLAGS_goal_agents);
  options.goal_rpc_cpu_ms = absl::GetFlag(FLAGS_goal_rpc_cpu_ms);
  options.relay_binary = absl::GetFlag(FLAGS_relay_binary);
  options.ranks_per_relay = absl::GetFlag(FLAGS_ranks_per_relay);
  if (!options.relay_binary.empty()) {
    if (options.ranks_per_relay < 1) {
      return absl::InvalidArgumentError("--ranks_per_relay must be >= 1");
    }
    config.ranks_per_stream = 1;
  }
  options.scheduler_binary = absl::GetFlag(FLAGS_scheduler_binary);
  if (!options.scheduler_binary.empty()) {
    if (access(options.scheduler_binary.c_str(), X_OK) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--scheduler_binary: '", options.scheduler_binary,
                       "' is not an executable file"));
    }
    config.ranks_per_stream = 1;
    config.scheduler_binary = options.scheduler_binary;
    config.lengths_path = options.lengths_path;
  }
  return options;
}

// The header line: what every row runs with.
void PrintSettings(const BenchmarkOptions& options, const RowConfig& config,
                   size_t samples) {
  std::printf(
      "plan delivery: %s, %s (%zu samples), %lld tokens/rank/step, window "
      "%lld, lookahead %d, refit every %d, %d channels, %d client threads, "
      "fan-out threads %d (-1 auto), reports on %s, %d ranks per stream, %s, "
      "%d CPUs\n",
      config.model.name.c_str(), options.lengths_flag.c_str(), samples,
      static_cast<long long>(config.tokens_per_rank),
      static_cast<long long>(config.window), config.lookahead_steps,
      config.refit_every, config.channels, config.client_threads,
      config.fanout_threads, config.report_stream ? "a stream" : "unary calls",
      config.ranks_per_stream,
      config.step_time > absl::ZeroDuration()
          ? absl::StrFormat("agents compute %.0f ms a step",
                            absl::ToDoubleMilliseconds(config.step_time))
                .c_str()
          : "agents report on receipt",
      OnlineCpus());
  std::fflush(stdout);
}

// The three tables, one line per row that ran.
void PrintTables(const std::vector<RowResult>& rows) {
  std::printf(
      "\ndelivery latency, ms from end of planning (t0) to receipt\n"
      "agents  steps  step p50  step p99  step max  agent p50  agent p99  "
      "spread p50\n");
  for (const RowResult& r : rows) {
    if (!r.ran || r.scheduler_apart) continue;
    std::printf("%6d  %5lld  %8.2f  %8.2f  %8.2f  %9.2f  %9.2f  %10.2f\n",
                r.agents, static_cast<long long>(r.measured_steps),
                r.step_p50_ms, r.step_p99_ms, r.step_max_ms, r.agent_p50_ms,
                r.agent_p99_ms, r.spread_p50_ms);
  }
  std::printf(
      "\nthroughput, and where the planning thread's time goes (ms per "
      "step; wall, and CPU of that thread)\n"
      "agents  steps/s  plan p50  plan p99  plan cpu  fan-out p50  "
      "fan-out p99  fan-out cpu  tasks/step\n");
  for (const RowResult& r : rows) {
    if (!r.ran || r.scheduler_apart) continue;
    std::printf(
        "%6d  %7.2f  %8.2f  %8.2f  %8.2f  %11.2f  %11.2f  %11.2f  "
        "%10.0f\n",
        r.agents, r.steps_per_s, r.plan_p50_ms, r.plan_p99_ms,
        r.plan_cpu_p50_ms, r.fanout_p50_ms, r.fanout_p99_ms,
        r.fanout_cpu_p50_ms, r.tasks_per_step);
  }
  std::printf(
      "\nload (ms per step: client = wall in the simulated agents' handlers, "
      "agents cpu = CPU of their queue threads, server cpu = the rest of this "
      "process: the scheduler and the gRPC threads both ends share; rpc cpu = "
      "server cpu less the planning thread's mean CPU while planning; relay "
      "cpu = the relay processes, outside this process; cores: CPU / wall)\n"
      "agents  relays  relay cpu  B/msg  client  agents cpu  server cpu  "
      "rpc cpu  proc cores  other cores  machine busy  steal  threads  "
      "register s\n");
  for (const RowResult& r : rows) {
    if (!r.ran || r.scheduler_apart) continue;
    std::printf(
        "%6d  %6d  %9.2f  %5.0f  %6.2f  %10.2f  %10.2f  %7.2f  %10.2f  "
        "%11.2f  %11.0f%%  %4.0f%%  %7d  %10.2f\n",
        r.agents, r.relays, r.relay_cpu_ms_per_step, r.bytes_per_message,
        r.client_ms_per_step, r.agents_cpu_ms_per_step,
        r.server_cpu_ms_per_step, r.rpc_cpu_ms_per_step, r.process_cores,
        r.other_cores, 100 * r.machine_busy, 100 * r.machine_steal, r.threads,
        r.register_s);
  }
}

// The rows whose scheduler was a child process (--scheduler_binary).
void PrintApartTable(const std::vector<RowResult>& rows, int ranks_per_relay) {
  std::printf(
      "\nthe scheduler alone, a dcp-scheduler child process (ms per step "
      "delivered: scheduler cpu = its /proc utime+stime over the measured "
      "span; planning cpu = its dcp_scheduler_planning_cpu_seconds_total "
      "over the steps it planned in that span; rpc cpu = scheduler cpu less "
      "that planning CPU; relay cpu = the relay processes; agents cpu = this "
      "process, the simulated agents; step p50/p99 = the last agent's "
      "receipt less the step's planned_at_unix_micros, the scheduler's wall "
      "clock as planning ended)\n"
      "agents  relays  ranks/relay  scheduler cpu  planning cpu  rpc cpu  "
      "relay cpu  agents cpu  steps/s  step p50  step p99  steps  "
      "machine busy\n");
  for (const RowResult& r : rows) {
    if (!r.ran || !r.scheduler_apart) continue;
    std::printf(
        "%6d  %6d  %11d  %13.2f  %12.2f  %7.2f  %9.2f  %10.2f  %7.2f  "
        "%8.2f  %8.2f  %5lld  %11.0f%%\n",
        r.agents, r.relays, r.relays > 0 ? ranks_per_relay : 0,
        r.scheduler_cpu_ms_per_step, r.planning_cpu_ms_per_step,
        r.rpc_cpu_ms_per_step, r.relay_cpu_ms_per_step,
        r.agents_cpu_ms_per_step + r.server_cpu_ms_per_step, r.steps_per_s,
        r.step_p50_ms, r.step_p99_ms, static_cast<long long>(r.measured_steps),
        100 * r.machine_busy);
  }
}

// Per row: the load average around it, its errors, and what was left out.
void PrintNotes(const std::vector<RowResult>& rows) {
  std::printf("\n");
  for (const RowResult& r : rows) {
    if (!r.ran) {
      std::printf("%5d agents: did not run: %s\n", r.agents,
                  r.first_error.c_str());
      continue;
    }
    std::printf("load average %s -> %s", r.load_before.c_str(),
                r.load_after.c_str());
    std::printf(
        " | %5d agents: %lld errors%s%s", r.agents,
        static_cast<long long>(r.errors),
        r.first_error.empty() ? "" : ", first: ", r.first_error.c_str());
    if (r.incomplete_steps > 0 || r.inexact_t0 > 0) {
      std::printf(
          " | %lld steps not delivered to every agent, %lld with t0 "
          "from the callback",
          static_cast<long long>(r.incomplete_steps),
          static_cast<long long>(r.inexact_t0));
    }
    std::printf("\n");
  }
}

/// One line per row against the goal, from the measured numbers. With
/// paced agents (`step_time` > 0) the agents cap the rate at 1 / step_time,
/// so the rate part asks whether the scheduler kept that pace (within 1%,
/// the fit's noise) and is only judged when the pace reaches the goal.
std::string Verdict(const RowResult& r, double goal_p99_ms,
                    double goal_steps_per_s, int goal_agents,
                    absl::Duration step_time) {
  if (!r.ran) return absl::StrFormat("%5d agents: did not run", r.agents);
  if (r.measured_steps == 0) {
    return absl::StrFormat(
        "%5d agents: NO DATA (no step was delivered to "
        "every agent)",
        r.agents);
  }
  const bool latency_ok = r.step_p99_ms < goal_p99_ms;
  std::string rate;
  bool rate_ok = false;
  if (step_time <= absl::ZeroDuration()) {
    rate_ok = r.steps_per_s >= goal_steps_per_s;
    rate = absl::StrFormat("%.1f steps/s %s %.0f -> %s", r.steps_per_s,
                           rate_ok ? ">=" : "<", goal_steps_per_s,
                           rate_ok ? "MET" : "MISSED");
  } else {
    const double pace = 1 / absl::ToDoubleSeconds(step_time);
    if (pace < goal_steps_per_s) {
      rate = absl::StrFormat(
          "%.1f steps/s, not judged (agents paced at %.1f < %.0f steps/s)",
          r.steps_per_s, pace, goal_steps_per_s);
    } else {
      rate_ok = r.steps_per_s >= 0.99 * pace;
      rate = absl::StrFormat("%.2f steps/s %s the agents' pace of %.1f -> %s",
                             r.steps_per_s, rate_ok ? "kept" : "fell behind",
                             pace, rate_ok ? "MET" : "MISSED");
    }
  }
  return absl::StrFormat(
      "%5d agents: step-delivery p99 %.2f ms %s %.0f ms -> %s; %s; overall "
      "%s%s",
      r.agents, r.step_p99_ms, latency_ok ? "<" : ">=", goal_p99_ms,
      latency_ok ? "MET" : "MISSED", rate,
      latency_ok && rate_ok ? "GOAL MET" : "GOAL MISSED",
      r.agents == goal_agents
          ? ""
          : absl::StrFormat(" (the goal is stated at %d agents)", goal_agents));
}

/// One line per row of the scheduler alone against the CPU goal.
std::string RpcCpuVerdict(const RowResult& r, double goal_ms, int goal_agents) {
  if (!r.ran) return absl::StrFormat("%5d agents: did not run", r.agents);
  if (r.measured_steps == 0) {
    return absl::StrFormat(
        "%5d agents: NO DATA (no step was delivered to every agent)", r.agents);
  }
  const bool ok = r.rpc_cpu_ms_per_step <= goal_ms;
  return absl::StrFormat(
      "%5d agents, %s: rpc cpu %.2f ms/step %s %.0f ms -> %s%s", r.agents,
      r.relays > 0 ? absl::StrFormat("%d relays", r.relays) : "per-rank direct",
      r.rpc_cpu_ms_per_step, ok ? "<=" : ">", goal_ms, ok ? "MET" : "MISSED",
      r.agents == goal_agents
          ? ""
          : absl::StrFormat(" (the goal is stated at %d agents)", goal_agents));
}

/// `RunRow`, or a row that says why it did not run.
RowResult RunOneRow(const RowConfig& config) {
  std::fprintf(stderr, "running %d agents%s...\n", config.agents,
               config.relays != nullptr ? " through relays" : "");
  absl::StatusOr<RowResult> row = RunRow(config);
  if (row.ok()) return *std::move(row);
  std::fprintf(stderr, "  %d agents failed: %s\n", config.agents,
               row.status().ToString().c_str());
  RowResult failed;
  failed.agents = config.agents;
  failed.first_error = row.status().ToString();
  return failed;
}

absl::Status Run(const BenchmarkOptions& options) {
  RowConfig config = options.row;
  ASSIGN_OR_RETURN(config.model, BuiltinModel(options.model_name));
  ASSIGN_OR_RETURN(const std::vector<int32_t> lengths,
                   LoadLengths(options.lengths_path, "auto", ""));
  config.lengths = &lengths;
  PrintSettings(options, config, lengths.size());

  std::vector<RowResult> rows;
  for (int n : options.agent_counts) {
    config.agents = n;
    config.relays = nullptr;
    rows.push_back(RunOneRow(config));
    if (options.relay_binary.empty()) continue;
    const int count =
        (n + options.ranks_per_relay - 1) / options.ranks_per_relay;
    RelayProcesses relays(options.relay_binary, count, absl::Seconds(1));
    config.relays = &relays;
    rows.push_back(RunOneRow(config));
  }

  if (options.scheduler_binary.empty()) {
    PrintTables(rows);
  } else {
    PrintApartTable(rows, options.ranks_per_relay);
  }
  PrintNotes(rows);
  if (!options.scheduler_binary.empty()) {
    std::printf(
        "\nverdict (goal: the scheduler's rpc cpu <= %.0f ms a step at %d "
        "agents)\n",
        options.goal_rpc_cpu_ms, options.goal_agents);
    for (const RowResult& r : rows) {
      std::printf("%s\n",
                  RpcCpuVerdict(r, options.goal_rpc_cpu_ms, options.goal_agents)
                      .c_str());
    }
    return absl::OkStatus();
  }
  std::printf(
      "\nverdict (goal: step-delivery p99 < %.0f ms, >= %.0f "
      "steps/s at %d agents)\n",
      options.goal_p99_ms, options.goal_steps_per_s, options.goal_agents);
  for (const RowResult& r : rows) {
    std::printf("%s\n",
                Verdict(r, options.goal_p99_ms, options.goal_steps_per_s,
                        options.goal_agents, config.step_time)
                    .c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace dcp::plan_delivery

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Plan delivery latency and throughput of dcp-scheduler's control "
      "plane with N simulated agents on loopback.\n"
      "  plan_delivery_benchmark --agents=256,1024 [--steps=100] "
      "[--channels=8] [--client_threads=2] [--lookahead_steps=4]");
  absl::ParseCommandLine(argc, argv);
  // As in the daemons: Debian's Abseil is built with the mutex deadlock
  // detector on, which records every lock order in a global graph (a few %
  // of the CPU here); tests keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::StatusOr<dcp::plan_delivery::BenchmarkOptions> options =
      dcp::plan_delivery::OptionsFromFlags();
  const absl::Status s =
      options.ok() ? dcp::plan_delivery::Run(*options) : options.status();
  if (!s.ok()) {
    std::fprintf(stderr, "plan_delivery_benchmark: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
