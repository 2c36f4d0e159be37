#include "worker_agent/agent_metrics.h"

#include <string>
#include <utility>
#include <vector>

#include "common/metrics/build_info_metric.h"
#include "common/status_macros.h"

namespace dcp {

absl::StatusOr<std::unique_ptr<AgentMetrics>> AgentMetrics::Create(
    MetricsRegistry* registry, BuildInfo build) {
  if (registry == nullptr) {
    return absl::InvalidArgumentError("AgentMetrics needs a registry");
  }
  std::unique_ptr<AgentMetrics> metrics(
      new AgentMetrics(registry, std::move(build)));
  RETURN_IF_ERROR(metrics->Register());
  return metrics;
}

absl::Status AgentMetrics::Register() {
  RETURN_IF_ERROR(RegisterExecuteFamilies());
  RETURN_IF_ERROR(RegisterTimingFamilies());
  registry_->AddCollectHook([this] { TakeSnapshot(); });
  RETURN_IF_ERROR(RegisterIdentityFamilies());
  RETURN_IF_ERROR(RegisterStreamFamilies());
  return RegisterGroupFamilies();
}

// The execute mode's steps and tasks, fed by OnStepExecuted.
absl::Status AgentMetrics::RegisterExecuteFamilies() {
  MetricsRegistry& r = *registry_;
  // Task times span CPU test runs (ms) to long GPU tasks (tens of seconds).
  const std::vector<double> seconds_buckets = {
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
      0.5,   1,      2.5,   5,    10,    25,   60,  120};
  ASSIGN_OR_RETURN(steps_executed_,
                   r.AddCounter("dcp_agent_steps_executed_total",
                                "Steps this rank ran itself (execute mode)."));
  ASSIGN_OR_RETURN(tasks_executed_,
                   r.AddCounter("dcp_agent_tasks_executed_total",
                                "Tasks this rank ran itself (execute mode)."));
  ASSIGN_OR_RETURN(
      task_seconds_,
      r.AddHistogram("dcp_agent_task_seconds",
                     "Measured time of each task this rank ran (what it "
                     "reports to the scheduler).",
                     seconds_buckets));
  ASSIGN_OR_RETURN(
      step_seconds_,
      r.AddHistogram("dcp_agent_step_seconds",
                     "Wall time of each step this rank trained: its tasks, the "
                     "gradient all-reduce and the optimizer step.",
                     seconds_buckets));
  ASSIGN_OR_RETURN(
      training_loss_,
      r.AddGauge("dcp_agent_training_loss",
                 "Loss of the last step this rank trained (over the global "
                 "batch: the same on every rank)."));

  return absl::OkStatus();
}

// The build, plan delivery and communicator formation.
absl::Status AgentMetrics::RegisterTimingFamilies() {
  MetricsRegistry& r = *registry_;
  RETURN_IF_ERROR(AddBuildInfoGauge(r, "dcp_agent_build_info", build_));
  ASSIGN_OR_RETURN(
      plan_delivery_,
      r.AddHistogram(
          "dcp_agent_plan_delivery_seconds",
          "Seconds from the scheduler planning a step to this agent "
          "receiving it, by the scheduler's and this host's wall clocks "
          "(their skew included; negative values count as 0).",
          {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
           2.5, 5, 10, 30, 60, 120}));
  ASSIGN_OR_RETURN(
      clock_skew_,
      r.AddCounter("dcp_agent_plan_delivery_clock_skew_total",
                   "Steps received before they were planned by the two "
                   "clocks (this host's clock behind the scheduler's)."));
  ASSIGN_OR_RETURN(
      formation_,
      r.AddHistogram("dcp_agent_communicator_formation_seconds",
                     "Seconds to form each process group this rank formed "
                     "(the rendezvous and the Gloo connections).",
                     {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                      1, 2.5, 5, 10, 30, 60, 120}));
  return absl::OkStatus();
}

// Who this agent is, from the snapshot at each scrape.
absl::Status AgentMetrics::RegisterIdentityFamilies() {
  MetricsRegistry& r = *registry_;
  RETURN_IF_ERROR(r.AddCallbackFamily(
      MetricType::kGauge, "dcp_agent_info",
      "Always 1; labels name the scheduler's session and the mode.",
      {"session_id", "mode"}, [this]() -> std::vector<CollectedValue> {
        absl::MutexLock lock(&mu_);
        if (!snapshot_.has_value()) return {};
        return {{{identity_.session_id, identity_.mode}, 1.0}};
      }));
  // A value, not a label: the deploy config's targets carry a `rank` label
  // already, and a scraped label of the same name would be renamed.
  RETURN_IF_ERROR(r.AddCallbackFamily(
      MetricType::kGauge, "dcp_agent_rank", "The global rank this agent runs.",
      {}, [this]() -> std::vector<CollectedValue> {
        absl::MutexLock lock(&mu_);
        if (!snapshot_.has_value()) return {};
        return {{{}, static_cast<double>(identity_.rank)}};
      }));
  return absl::OkStatus();
}

// The plan stream, reports and profiles, from the snapshot.
absl::Status AgentMetrics::RegisterStreamFamilies() {
  MetricsRegistry& r = *registry_;
  RETURN_IF_ERROR(
      AddStatsCounter("dcp_agent_steps_received_total",
                      "Steps received on the plan stream and queued.",
                      [](const AgentStats& s) { return s.steps_received; }));
  RETURN_IF_ERROR(AddStatsCounter(
      "dcp_agent_steps_delivered_total",
      "Steps handed out to the runner (execute loop or trainer).",
      [](const AgentStats& s) { return s.steps_delivered; }));
  RETURN_IF_ERROR(AddStatsCounter(
      "dcp_agent_stale_steps_dropped_total",
      "Steps dropped as stale (not newer than one received or delivered).",
      [](const AgentStats& s) { return s.stale_dropped; }));
  RETURN_IF_ERROR(AddStatsCounter(
      "dcp_agent_reconnects_total", "Plan streams reopened after a break.",
      [](const AgentStats& s) { return s.reconnects; }));
  RETURN_IF_ERROR(
      AddStatsCounter("dcp_agent_timing_reports_sent_total",
                      "Timing reports the scheduler took.",
                      [](const AgentStats& s) { return s.reports_sent; }));
  RETURN_IF_ERROR(AddStatsCounter(
      "dcp_agent_timing_report_fallbacks_total",
      "Timing reports the scheduler took over a ReportTimings call after "
      "the report stream could not deliver them.",
      [](const AgentStats& s) { return s.report_fallbacks; }));
  RETURN_IF_ERROR(r.AddCallbackFamily(
      MetricType::kCounter, "dcp_agent_profile_runs_total",
      "Profile requests run, by result (reported, or failed to run or "
      "report).",
      {"result"}, [this]() -> std::vector<CollectedValue> {
        absl::MutexLock lock(&mu_);
        if (!snapshot_.has_value()) return {};
        return {{{"reported"}, static_cast<double>(snapshot_->profiles_sent)},
                {{"failed"}, static_cast<double>(snapshot_->profile_failures)}};
      }));
  return absl::OkStatus();
}

// The rank's process groups, from the snapshot (the metric names keep
// "communicator": dashboards and alerts query them).
absl::Status AgentMetrics::RegisterGroupFamilies() {
  MetricsRegistry& r = *registry_;
  RETURN_IF_ERROR(AddStatsCounter(
      "dcp_agent_communicator_cache_hits_total",
      "Group requests served by a group already formed or forming.",
      [](const AgentStats& s) { return s.cache_hits; }));
  RETURN_IF_ERROR(
      AddStatsCounter("dcp_agent_communicator_cache_misses_total",
                      "Group requests that formed their group on demand.",
                      [](const AgentStats& s) { return s.cache_misses; }));
  RETURN_IF_ERROR(
      AddStatsCounter("dcp_agent_communicator_groups_warmed_total",
                      "Groups formed ahead of use, as steps arrived.",
                      [](const AgentStats& s) { return s.groups_warmed; }));
  RETURN_IF_ERROR(
      AddStatsCounter("dcp_agent_communicator_group_failures_total",
                      "Group formations that failed.",
                      [](const AgentStats& s) { return s.group_failures; }));
  RETURN_IF_ERROR(r.AddCallbackFamily(
      MetricType::kGauge, "dcp_agent_communicator_groups",
      "Process groups held now (formed or forming).", {},
      [this]() -> std::vector<CollectedValue> {
        absl::MutexLock lock(&mu_);
        if (!snapshot_.has_value()) return {};
        return {{{}, static_cast<double>(snapshot_->groups_live)}};
      }));
  return absl::OkStatus();
}

void AgentMetrics::SetStatsSource(std::function<AgentStats()> stats,
                                  AgentIdentity identity) {
  absl::MutexLock lock(&mu_);
  source_ = std::move(stats);
  identity_ = std::move(identity);
}

void AgentMetrics::OnStepExecuted(const StepExecution& step,
                                  absl::Duration wall_time) {
  steps_executed_->Increment();
  for (const ExecutedTask& task : step.tasks) {
    tasks_executed_->Increment();
    task_seconds_->Observe(task.seconds);
  }
  step_seconds_->Observe(absl::ToDoubleSeconds(wall_time));
  training_loss_->Set(step.loss);
}

void AgentMetrics::OnStepReceived(absl::Time planned, absl::Time received) {
  double seconds = absl::ToDoubleSeconds(received - planned);
  if (seconds < 0) {
    clock_skew_->Increment();
    seconds = 0;
  }
  plan_delivery_->Observe(seconds);
}

void AgentMetrics::OnGroupFormed(absl::Duration formation) {
  formation_->Observe(absl::ToDoubleSeconds(formation));
}

void AgentMetrics::TakeSnapshot() {
  std::function<AgentStats()> source;
  {
    absl::MutexLock lock(&mu_);
    source = source_;
  }
  // Stats() takes the agent's lock: not under ours.
  std::optional<AgentStats> snapshot;
  if (source) snapshot = source();
  absl::MutexLock lock(&mu_);
  snapshot_ = std::move(snapshot);
}

absl::Status AgentMetrics::AddStatsCounter(
    const char* name, const char* help,
    std::function<double(const AgentStats&)> value) {
  return registry_->AddCallbackFamily(
      MetricType::kCounter, name, help, {},
      [this, value = std::move(value)]() -> std::vector<CollectedValue> {
        absl::MutexLock lock(&mu_);
        if (!snapshot_.has_value()) return {};
        return {{{}, value(*snapshot_)}};
      });
}

}  // namespace dcp
