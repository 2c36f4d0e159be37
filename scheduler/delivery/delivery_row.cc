#include "scheduler/delivery/delivery_row.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "proto/scheduler_service.grpc.pb.h"
#include "scheduler/control/control_plane.h"
#include "scheduler/delivery/delivery_processes.h"
#include "scheduler/delivery/delivery_stats.h"
#include "scheduler/delivery/planned_step_log.h"
#include "scheduler/delivery/simulated_agent.h"
#include "scheduler/planner/cost_model.h"
#include "scheduler/server/scheduler_server.h"

namespace dcp::plan_delivery {
namespace {

using Stubs = SchedulerStubs;

/// Each channel is a loopback TCP connection, so two sockets in this
/// process (client and server end). Raises the soft limit on open files to
/// the hard one when that is needed, and says what to do when even that is
/// too low (with 1,024 channels the common default of 1,024 is).
absl::Status EnsureFileDescriptors(int channels) {
  const rlim_t needed = 2 * static_cast<rlim_t>(channels) + 64;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return absl::OkStatus();
  if (limit.rlim_cur >= needed) return absl::OkStatus();
  if (limit.rlim_max >= needed) {
    limit.rlim_cur = needed;
    if (setrlimit(RLIMIT_NOFILE, &limit) == 0) return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "--channels=", channels, " needs about ", needed,
      " open files but the limit is ", limit.rlim_cur, " (hard ",
      limit.rlim_max, "); raise it (ulimit -n) or use fewer --channels"));
}

// The scheduler of a row: world = agents, planning through `clock` and
// reporting every planned step to `log`.
SchedulerServerOptions ServerOptions(const RowConfig& config, int64_t max_steps,
                                     PlanningClock* clock, StepLog* log) {
  const int n = config.agents;
  SchedulerServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.shutdown_grace = absl::Seconds(1);
  options.stop_grace = absl::Seconds(1);
  options.fanout_threads = config.fanout_threads;
  ControlPlaneOptions& cp = options.control_plane;
  cp.lengths = *config.lengths;
  cp.window = config.window;
  cp.model = config.model;
  cp.world_size = n;
  cp.tokens_per_step = int64_t{n} * config.tokens_per_rank;
  cp.lookahead_steps = config.lookahead_steps;
  cp.refit_every = config.refit_every;
  cp.max_steps = max_steps;
  cp.clock = clock;
  cp.on_step_planned = [log](const PlannedStepEvent& e) { log->Add(e); };
  return options;
}

// Waits for every agent to end: drains when `max_time` is up, and cuts
// everything off well after that.
void AwaitAgents(const RowConfig& config, SchedulerServer& server,
                 AgentFleet& fleet, AgentRun& run) {
  const int n = config.agents;
  if (run.all_done.WaitForNotificationWithTimeout(config.max_time)) return;
  const int64_t last = server.control_plane().Drain(/*stop=*/false);
  std::fprintf(stderr,
               "  %d agents: --max_seconds reached, drained after step "
               "%lld\n",
               n, static_cast<long long>(last));
  if (run.all_done.WaitForNotificationWithTimeout(absl::Seconds(30))) return;
  std::fprintf(stderr,
               "  %d agents: not done 30 s after the drain; "
               "cancelling\n",
               n);
  server.Shutdown();
  fleet.Cancel();
  run.all_done.WaitForNotification();
}

// The latency columns from each measured step's delivery (its last agent's
// arrival less t0), each agent's, and the step's first-to-last spread.
void SetLatencies(const std::vector<double>& step_ms,
                  const std::vector<double>& agent_ms,
                  const std::vector<double>& spread_ms, RowResult* result) {
  result->step_p50_ms = Percentile(step_ms, 0.5);
  result->step_p99_ms = Percentile(step_ms, 0.99);
  result->step_max_ms = Percentile(step_ms, 1.0);
  result->agent_p50_ms = Percentile(agent_ms, 0.5);
  result->agent_p99_ms = Percentile(agent_ms, 0.99);
  result->spread_p50_ms = Percentile(spread_ms, 0.5);
}

// When the first and the last agent of a fleet received a step.
struct Arrivals {
  absl::Time earliest;
  absl::Time latest;
};

// `step`'s arrivals, or nullopt while an agent has not received it.
std::optional<Arrivals> ArrivalsOf(const AgentFleet& fleet, int64_t step) {
  Arrivals out{absl::InfiniteFuture(), absl::InfinitePast()};
  for (int rank = 0; rank < fleet.size(); ++rank) {
    const absl::Time t = fleet.received(rank, step);
    if (t == absl::InfinitePast()) return std::nullopt;
    out.earliest = std::min(out.earliest, t);
    out.latest = std::max(out.latest, t);
  }
  return out;
}

// A delivered step's latencies from `planned`: the last agent's, every
// agent's, and the spread between the first and the last.
void AddLatencies(const AgentFleet& fleet, int64_t step, absl::Time planned,
                  const Arrivals& arrived, std::vector<double>* step_ms,
                  std::vector<double>* agent_ms,
                  std::vector<double>* spread_ms) {
  for (int rank = 0; rank < fleet.size(); ++rank) {
    agent_ms->push_back(
        absl::ToDoubleMilliseconds(fleet.received(rank, step) - planned));
  }
  step_ms->push_back(absl::ToDoubleMilliseconds(arrived.latest - planned));
  spread_ms->push_back(
      absl::ToDoubleMilliseconds(arrived.latest - arrived.earliest));
}

// Per step: t0, and the first and last arrival over the agents, of the
// steps in [first_measured, max_steps); `start` is when the agents started.
void ReduceSteps(const std::vector<PlannedStep>& planned,
                 const AgentFleet& fleet, int64_t first_measured,
                 int64_t max_steps, absl::Time start, RowResult* result) {
  std::vector<double> step_ms, agent_ms, spread_ms, plan_ms, fanout_ms;
  std::vector<double> plan_cpu_ms, fanout_cpu_ms;
  double tasks = 0;
  // (step, delivery time) of every fully delivered step, for the rate.
  std::vector<std::pair<double, double>> delivered;
  for (const PlannedStep& p : planned) {
    if (p.step < first_measured || p.step >= max_steps) continue;
    if (!p.exact) ++result->inexact_t0;
    const std::optional<Arrivals> arrived = ArrivalsOf(fleet, p.step);
    if (!arrived.has_value()) {
      ++result->incomplete_steps;
      continue;
    }
    ++result->measured_steps;
    AddLatencies(fleet, p.step, p.planned, *arrived, &step_ms, &agent_ms,
                 &spread_ms);
    plan_ms.push_back(absl::ToDoubleMilliseconds(p.planning_time));
    fanout_ms.push_back(absl::ToDoubleMilliseconds(p.callback - p.planned));
    if (p.exact) {
      plan_cpu_ms.push_back(absl::ToDoubleMilliseconds(p.planning_cpu));
      fanout_cpu_ms.push_back(absl::ToDoubleMilliseconds(p.fanout_cpu));
    }
    tasks += p.tasks;
    delivered.emplace_back(static_cast<double>(p.step),
                           absl::ToDoubleSeconds(arrived->latest - start));
  }
  SetLatencies(step_ms, agent_ms, spread_ms, result);
  result->plan_p50_ms = Percentile(plan_ms, 0.5);
  result->plan_p99_ms = Percentile(plan_ms, 0.99);
  result->fanout_p50_ms = Percentile(fanout_ms, 0.5);
  result->fanout_p99_ms = Percentile(fanout_ms, 0.99);
  result->plan_cpu_p50_ms = Percentile(plan_cpu_ms, 0.5);
  result->fanout_cpu_p50_ms = Percentile(fanout_cpu_ms, 0.5);
  if (result->measured_steps > 0) {
    result->tasks_per_step = tasks / result->measured_steps;
  }
  result->steps_per_s = StepsPerSecond(delivered);
}

// The load columns: the machine and this process between the samples, and
// per planned step the agents' queue threads (`agents_cpu` CPU seconds,
// stopped `queues`) and the rest of the process.
void ReduceLoad(const CpuSample& start, const CpuSample& end, double agents_cpu,
                const QueueThreads& queues, int64_t planned_steps,
                const AgentRun& run, RowResult* result) {
  const CpuLoad load = LoadBetween(start, end);
  result->process_cores = load.process_cores;
  result->machine_busy = load.machine_busy;
  result->machine_steal = load.machine_steal;
  result->other_cores = load.other_cores;
  const int64_t messages = run.messages.load();
  result->bytes_per_message =
      messages > 0 ? static_cast<double>(run.bytes.load()) / messages : 0;
  if (planned_steps > 0) {
    const double steps = static_cast<double>(planned_steps);
    result->client_ms_per_step = 1e3 * queues.BusySeconds() / steps;
    result->agents_cpu_ms_per_step = 1e3 * agents_cpu / steps;
    result->server_cpu_ms_per_step =
        1e3 * (end.process_seconds - start.process_seconds - agents_cpu) /
        steps;
  }
}

// The planning thread's CPU while planning, ms per step, over the steps
// whose reading is exact.
double MeanPlanningCpuMs(const std::vector<PlannedStep>& planned) {
  double sum = 0;
  int64_t n = 0;
  for (const PlannedStep& p : planned) {
    if (!p.exact) continue;
    sum += absl::ToDoubleMilliseconds(p.planning_cpu);
    ++n;
  }
  return n > 0 ? sum / n : 0;
}

/// The agents' stubs: `config.channels` to the scheduler at `address`, or
/// one to each of the relays the config names, started in front of it.
absl::StatusOr<Stubs> OpenStubs(const RowConfig& config,
                                const std::string& address) {
  if (config.relays == nullptr) {
    return OpenSchedulerStubs(address, config.channels);
  }
  ASSIGN_OR_RETURN(const std::vector<std::string> relays,
                   config.relays->Start(address));
  Stubs stubs;
  for (const std::string& relay : relays) {
    for (auto& stub : OpenSchedulerStubs(relay, 1)) {
      stubs.push_back(std::move(stub));
    }
  }
  return stubs;
}

double RelayCpuSeconds(const RowConfig& config) {
  return config.relays != nullptr ? config.relays->CpuSeconds() : 0;
}

// The dcp-scheduler flags of a row's child scheduler: the settings
// `ServerOptions` gives the in-process one, and a short stop.
std::vector<std::string> SchedulerFlags(const RowConfig& config,
                                        int64_t max_steps) {
  const int n = config.agents;
  return {
      "--lengths=" + config.lengths_path,
      "--model=" + config.model.name,
      absl::StrCat("--world_size=", n),
      absl::StrCat("--window=", config.window),
      absl::StrCat("--tokens_per_step=", int64_t{n} * config.tokens_per_rank),
      absl::StrCat("--lookahead_steps=", config.lookahead_steps),
      absl::StrCat("--refit_every=", config.refit_every),
      absl::StrCat("--max_steps=", max_steps),
      absl::StrCat("--fanout_threads=", config.fanout_threads),
      "--stop_grace=1s",
  };
}

// Waits for every agent to end; cancels them when `max_time` is up (a
// child scheduler is not drained from here: the row keeps what arrived).
void AwaitAgentsApart(const RowConfig& config, AgentFleet& fleet,
                      AgentRun& run) {
  if (run.all_done.WaitForNotificationWithTimeout(config.max_time)) return;
  std::fprintf(stderr,
               "  %d agents: --max_seconds reached, cancelling the agents\n",
               config.agents);
  fleet.Cancel();
  run.all_done.WaitForNotification();
}

// With the scheduler in another process: per step in [first_measured,
// max_steps), whether every agent has it, the rate from when the last one
// did, and the latencies from its planned_at_unix_micros (the scheduler's
// wall clock at the end of planning, this machine's clock too; a
// microsecond's resolution; a little earlier than the in-process t0, which
// is read after the per-rank views are cut).
void ReduceArrivals(const AgentFleet& fleet, const AgentRun& run,
                    int64_t first_measured, int64_t max_steps,
                    absl::Time start, RowResult* result) {
  std::vector<std::pair<double, double>> delivered;
  std::vector<double> step_ms, agent_ms, spread_ms;
  for (int64_t step = first_measured; step < max_steps; ++step) {
    const std::optional<Arrivals> arrived = ArrivalsOf(fleet, step);
    if (!arrived.has_value()) {
      ++result->incomplete_steps;
      continue;
    }
    ++result->measured_steps;
    delivered.emplace_back(static_cast<double>(step),
                           absl::ToDoubleSeconds(arrived->latest - start));
    const int64_t planned_us = run.planned_at_us[step].load();
    if (planned_us <= 0) continue;
    AddLatencies(fleet, step, absl::FromUnixMicros(planned_us), *arrived,
                 &step_ms, &agent_ms, &spread_ms);
  }
  result->steps_per_s = StepsPerSecond(delivered);
  SetLatencies(step_ms, agent_ms, spread_ms, result);
}

// A row whose scheduler is a child process (`config.scheduler_binary`).
absl::StatusOr<RowResult> RunRowApart(const RowConfig& config) {
  RETURN_IF_ERROR(EnsureFileDescriptors(config.channels));
  const int n = config.agents;
  const int64_t first_measured = config.lookahead_steps + config.warmup_steps;
  const int64_t max_steps = first_measured + config.steps;
  // The daemon's cluster is the control plane's default, as in-process.
  const ControlPlaneOptions defaults;
  const CostModel model =
      CostModel::FromSpecs(defaults.cluster, config.model, n);
  ASSIGN_OR_RETURN(std::unique_ptr<SchedulerProcess> scheduler,
                   SchedulerProcess::Start(config.scheduler_binary,
                                           SchedulerFlags(config, max_steps)));
  ASSIGN_OR_RETURN(const Stubs stubs, OpenStubs(config, scheduler->address()));

  RowResult result;
  result.agents = n;
  result.scheduler_apart = true;
  result.relays = config.relays != nullptr ? static_cast<int>(stubs.size()) : 0;
  result.ran = true;
  const absl::Time register_start = absl::Now();
  ASSIGN_OR_RETURN(const std::string session_id,
                   RegisterSimulatedAgents(n, stubs, "bench"));
  result.register_s = absl::ToDoubleSeconds(absl::Now() - register_start);

  AgentRun run(n, max_steps, model, defaults.cluster.gpus_per_node,
               config.step_time, config.report_stream);
  QueueThreads queues(config.client_threads);
  AgentFleet fleet(n, stubs, &queues, &run, config.ranks_per_stream);
  result.load_before = LoadAverage();
  // The scrape before the CPU readings and the one after them: neither
  // is counted.
  ASSIGN_OR_RETURN(const SchedulerCounters counters_start,
                   scheduler->Counters());
  const double scheduler_cpu_start = scheduler->CpuSeconds();
  const CpuSample cpu_start = CpuSample::Take();
  const double agents_cpu_start = queues.CpuSeconds();
  const double relay_cpu_start = RelayCpuSeconds(config);
  fleet.Start(session_id);
  AwaitAgentsApart(config, fleet, run);
  const CpuSample cpu_end = CpuSample::Take();
  const double agents_cpu = queues.CpuSeconds() - agents_cpu_start;
  const double relay_cpu = RelayCpuSeconds(config) - relay_cpu_start;
  const double scheduler_cpu = scheduler->CpuSeconds() - scheduler_cpu_start;
  const absl::StatusOr<SchedulerCounters> counters_end = scheduler->Counters();
  result.threads = ProcessThreads();
  result.load_after = LoadAverage();
  scheduler->Stop();
  if (config.relays != nullptr) config.relays->Stop();
  queues.Stop();
  RETURN_IF_ERROR(counters_end.status());

  result.errors = run.errors.load();
  {
    absl::MutexLock lock(&run.mu);
    result.first_error = run.first_error;
  }
  // Per step the agents received: the scheduler planned them all (the
  // look-ahead before the agents started, the rest while they ran) and
  // delivered them all in the measured span.
  const int64_t steps = static_cast<int64_t>(counters_end->planned_steps);
  ReduceLoad(cpu_start, cpu_end, agents_cpu, queues, steps, run, &result);
  const double planning_cpu =
      counters_end->planning_cpu_seconds - counters_start.planning_cpu_seconds;
  const double planned_in_span =
      counters_end->planned_steps - counters_start.planned_steps;
  if (steps > 0) {
    result.scheduler_cpu_ms_per_step = 1e3 * scheduler_cpu / steps;
    result.rpc_cpu_ms_per_step = 1e3 * (scheduler_cpu - planning_cpu) / steps;
    result.relay_cpu_ms_per_step = 1e3 * relay_cpu / steps;
  }
  if (planned_in_span > 0) {
    result.planning_cpu_ms_per_step = 1e3 * planning_cpu / planned_in_span;
  }
  ReduceArrivals(fleet, run, first_measured, max_steps, cpu_start.wall,
                 &result);
  return result;
}

}  // namespace

absl::StatusOr<RowResult> RunRow(const RowConfig& config) {
  if (!config.scheduler_binary.empty()) return RunRowApart(config);
  RETURN_IF_ERROR(EnsureFileDescriptors(config.channels));
  const int n = config.agents;
  const int64_t first_measured = config.lookahead_steps + config.warmup_steps;
  const int64_t max_steps = first_measured + config.steps;

  PlanningClock clock;
  StepLog log;
  SchedulerServerOptions options =
      ServerOptions(config, max_steps, &clock, &log);
  const CostModel model = CostModel::FromSpecs(options.control_plane.cluster,
                                               options.control_plane.model, n);
  const int gpus_per_node = options.control_plane.cluster.gpus_per_node;
  ASSIGN_OR_RETURN(std::unique_ptr<SchedulerServer> server,
                   SchedulerServer::Start(std::move(options)));
  ASSIGN_OR_RETURN(const Stubs stubs, OpenStubs(config, server->address()));

  RowResult result;
  result.agents = n;
  result.relays = config.relays != nullptr ? static_cast<int>(stubs.size()) : 0;
  result.ran = true;
  const absl::Time register_start = absl::Now();
  ASSIGN_OR_RETURN(const std::string session_id, RegisterSimulatedAgents(n, stubs, "bench"));
  result.register_s = absl::ToDoubleSeconds(absl::Now() - register_start);

  AgentRun run(n, max_steps, model, gpus_per_node, config.step_time,
               config.report_stream);
  QueueThreads queues(config.client_threads);
  AgentFleet fleet(n, stubs, &queues, &run, config.ranks_per_stream);
  result.load_before = LoadAverage();
  const CpuSample cpu_start = CpuSample::Take();
  const double agents_cpu_start = queues.CpuSeconds();
  const double relay_cpu_start = RelayCpuSeconds(config);
  fleet.Start(session_id);
  AwaitAgents(config, *server, fleet, run);
  const CpuSample cpu_end = CpuSample::Take();
  const double agents_cpu = queues.CpuSeconds() - agents_cpu_start;
  const double relay_cpu = RelayCpuSeconds(config) - relay_cpu_start;
  result.threads = ProcessThreads();
  result.load_after = LoadAverage();
  server->Shutdown();
  if (config.relays != nullptr) config.relays->Stop();
  queues.Stop();

  result.errors = run.errors.load();
  {
    absl::MutexLock lock(&run.mu);
    result.first_error = run.first_error;
  }
  const std::vector<PlannedStep> planned = log.Snapshot();
  ReduceLoad(cpu_start, cpu_end, agents_cpu, queues,
             static_cast<int64_t>(planned.size()), run, &result);
  result.rpc_cpu_ms_per_step =
      result.server_cpu_ms_per_step - MeanPlanningCpuMs(planned);
  if (!planned.empty()) {
    result.relay_cpu_ms_per_step = 1e3 * relay_cpu / planned.size();
  }
  ReduceSteps(planned, fleet, first_measured, max_steps, cpu_start.wall,
              &result);
  return result;
}

}  // namespace dcp::plan_delivery
