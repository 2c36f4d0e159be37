#include "tests/load_run.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/model_spec.h"
#include "common/status_macros.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "proto/scheduler_service.grpc.pb.h"
#include "scheduler/delivery/delivery_stats.h"
#include "scheduler/delivery/simulated_agent.h"
#include "scheduler/planner/cost_model.h"
#include "tests/child_process.h"

namespace dcp::load {
namespace {

namespace tp = ::dcp::testing_process;
using plan_delivery::AgentFleet;
using plan_delivery::AgentRun;
using plan_delivery::CpuSample;
using plan_delivery::ProcessCpuSeconds;
using plan_delivery::QueueThreads;
using Stubs = plan_delivery::SchedulerStubs;

// VmRSS of process `pid`, in bytes; 0 when /proc does not say.
int64_t ProcessRss(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      int64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

absl::StatusOr<v1::StatusResponse> GetStatus(v1::Scheduler::Stub& stub) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  v1::StatusResponse response;
  const grpc::Status status =
      stub.GetStatus(&context, v1::StatusRequest(), &response);
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("GetStatus failed: ", status.error_message()));
  }
  return response;
}

/// Reads the scheduler process and this one every `every` on a thread of
/// its own, from construction until `Stop`. Thread-safe.
class Sampler {
 public:
  Sampler(pid_t scheduler, v1::Scheduler::Stub* stub, absl::Duration every)
      : scheduler_(scheduler), stub_(stub), every_(every) {
    Take();
    thread_ = std::thread([this] {
      while (!stop_.WaitForNotificationWithTimeout(every_)) Take();
    });
  }
  ~Sampler() { Stop(); }

  /// Takes a last sample and joins; the samples in order.
  std::vector<Sample> Stop() {
    if (thread_.joinable()) {
      stop_.Notify();
      thread_.join();
      Take();
    }
    absl::MutexLock lock(&mu_);
    return samples_;
  }

 private:
  void Take() {
    Sample s;
    const CpuSample cpu = CpuSample::Take();
    s.t = absl::ToDoubleSeconds(cpu.wall - start_);
    s.scheduler_rss = ProcessRss(scheduler_);
    s.scheduler_cpu_s = ProcessCpuSeconds(scheduler_);
    s.agents_cpu_s = cpu.process_seconds;
    absl::StatusOr<v1::StatusResponse> status = GetStatus(*stub_);
    s.planned = status.ok() ? status->planned_steps() : -1;
    if (last_.machine_total > 0 && cpu.machine_total > last_.machine_total) {
      s.machine_cores = plan_delivery::OnlineCpus() *
                        static_cast<double>(cpu.machine_busy -
                                            last_.machine_busy) /
                        static_cast<double>(cpu.machine_total -
                                            last_.machine_total);
    }
    last_ = cpu;
    absl::MutexLock lock(&mu_);
    samples_.push_back(s);
  }

  const pid_t scheduler_;
  v1::Scheduler::Stub* const stub_;
  const absl::Duration every_;
  const absl::Time start_ = absl::Now();
  CpuSample last_;  // Only the sampler's thread (and the constructor).
  absl::Notification stop_;
  std::thread thread_;
  absl::Mutex mu_;
  std::vector<Sample> samples_ ABSL_GUARDED_BY(mu_);
};

std::vector<std::string> SchedulerFlags(const LoadOptions& o,
                                        int64_t max_steps) {
  return {
      "--lengths=" + o.lengths_path,
      "--model=" + o.model,
      absl::StrCat("--world_size=", o.agents),
      absl::StrCat("--tokens_per_step=", o.tokens_per_rank * o.agents),
      absl::StrCat("--lookahead_steps=", o.lookahead_steps),
      absl::StrCat("--max_steps=", max_steps),
      // Served (the daemon's real path) but not scraped.
      "--metrics_listen=127.0.0.1:0",
  };
}

// Waits for every agent; when they are not done in three times the planned
// duration plus two minutes, drains, cancels and says so.
absl::Status AwaitAgents(const LoadOptions& o, v1::Scheduler::Stub& stub,
                         AgentFleet& fleet, AgentRun& run) {
  const absl::Duration limit = 3 * o.duration + absl::Minutes(2);
  if (run.all_done.WaitForNotificationWithTimeout(limit)) {
    return absl::OkStatus();
  }
  grpc::ClientContext context;
  v1::DrainResponse drained;
  stub.Drain(&context, v1::DrainRequest(), &drained);
  if (!run.all_done.WaitForNotificationWithTimeout(absl::Seconds(60))) {
    fleet.Cancel();
    run.all_done.WaitForNotification();
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "the agents were not done after ", absl::FormatDuration(limit),
      " (the machine did not hold the rate?); drained after step ",
      drained.last_step()));
}

// The scheduler's and the agents' counts, and the delivery latencies.
void Reduce(const LoadOptions& o, const v1::StatusResponse& status,
            const AgentFleet& fleet, const AgentRun& run, LoadResult* r) {
  r->planned_steps = status.planned_steps();
  r->completed_steps = status.completed_steps();
  r->reports_accepted = status.timing_reports();
  for (const v1::RankStatus& rank : status.ranks()) {
    if (rank.last_sent_step() != r->planned_steps - 1) ++r->ranks_not_sent_all;
  }
  r->ranks_not_sent_all += o.agents - status.ranks_size();
  r->steps_received = run.steps_received.load();
  r->reports_sent = run.reports_sent.load();
  r->reports_ok = run.reports_ok.load();
  r->errors = run.errors.load();
  const int64_t steps = std::min(r->planned_steps, run.max_steps);
  r->delivery_ms.reserve(static_cast<size_t>(steps) * o.agents);
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t trigger =
        s >= o.lookahead_steps ? run.last_report_ns[s - o.lookahead_steps].load()
                               : -1;
    if (trigger == 0) ++r->triggers_missing;
    for (int rank = 0; rank < o.agents; ++rank) {
      const absl::Time t = fleet.received(rank, s);
      if (t == absl::InfinitePast()) {
        ++r->plans_missing;
      } else if (trigger > 0) {
        r->delivery_ms.push_back(absl::ToDoubleMilliseconds(
            t - absl::FromUnixNanos(trigger)));
      }
    }
  }
}

// The agents' part of a run against the scheduler at `address`.
absl::Status RunAgents(const LoadOptions& o, int64_t max_steps, pid_t pid,
                       const std::string& address, LoadResult* result) {
  const Stubs stubs = plan_delivery::OpenSchedulerStubs(address, o.channels);
  const absl::Time register_start = absl::Now();
  ASSIGN_OR_RETURN(const std::string session_id,
                   plan_delivery::RegisterSimulatedAgents(o.agents, stubs, "load-test"));
  result->register_s = absl::ToDoubleSeconds(absl::Now() - register_start);
  ASSIGN_OR_RETURN(const ModelSpec model, BuiltinModel(o.model));
  const ClusterSpec cluster = ClusterSpec::H200();
  AgentRun run(o.agents, max_steps,
               CostModel::FromSpecs(cluster, model, o.agents),
               cluster.gpus_per_node, o.step_time, /*report_stream=*/true);
  QueueThreads queues(o.client_threads);
  AgentFleet fleet(o.agents, stubs, &queues, &run);
  result->load_before = plan_delivery::LoadAverage();
  const absl::Time start = absl::Now();
  absl::Status awaited;
  {
    Sampler sampler(pid, stubs[0].get(), o.sample_every);
    fleet.Start(session_id);
    awaited = AwaitAgents(o, *stubs[0], fleet, run);
    result->run_s = absl::ToDoubleSeconds(absl::Now() - start);
    result->samples = sampler.Stop();
  }
  result->load_after = plan_delivery::LoadAverage();
  queues.Stop();
  {
    absl::MutexLock lock(&run.mu);
    result->first_error = run.first_error;
  }
  ASSIGN_OR_RETURN(const v1::StatusResponse status, GetStatus(*stubs[0]));
  Reduce(o, status, fleet, run, result);
  return awaited;
}

}  // namespace

absl::StatusOr<LoadResult> RunLoad(const LoadOptions& o) {
  if (o.agents < 1 || o.channels < 1 || o.client_threads < 1 ||
      o.lookahead_steps < 1 || o.step_time <= absl::ZeroDuration() ||
      o.sample_every <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "need agents, channels, client_threads, lookahead_steps >= 1 and a "
        "positive step_time and sample_every");
  }
  LoadResult result;
  result.max_steps = std::max<int64_t>(
      o.lookahead_steps + 2,
      static_cast<int64_t>(absl::FDivDuration(o.duration, o.step_time)));
  std::vector<tp::Child> scheduler;
  tp::ChildReaper reaper({&scheduler});
  const int port = tp::StartScheduler(
      "load-scheduler", SchedulerFlags(o, result.max_steps), scheduler);
  if (port == 0) return absl::UnavailableError("dcp-scheduler did not start");
  const std::string address = absl::StrCat("127.0.0.1:", port);
  const absl::Status ran =
      RunAgents(o, result.max_steps, scheduler[0].pid, address, &result);
  tp::StopScheduler(address, scheduler);
  RETURN_IF_ERROR(ran);
  return result;
}

double Slope(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = std::min(x.size(), y.size());
  if (n < 2) return 0;
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) {
    mx += x[i] / n;
    my += y[i] / n;
  }
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < n; ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
  }
  return sxx > 0 ? sxy / sxx : 0;
}

}  // namespace dcp::load
