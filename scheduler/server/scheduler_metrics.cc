#include "scheduler/server/scheduler_metrics.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/metrics/build_info_metric.h"
#include "common/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "scheduler/control/step_stats.h"

namespace dcp {
namespace {

/// Seconds since the Unix epoch, as Prometheus' `_timestamp_seconds`.
double UnixSeconds(absl::Time t) {
  return absl::ToDoubleSeconds(t - absl::UnixEpoch());
}

/// The codes a timing report is rejected with (ControlPlane::ReportTimings),
/// exported at 0 from the start so that rates and alerts see them.
constexpr const char* kReportRejections[] = {
    "INVALID_ARGUMENT", "FAILED_PRECONDITION", "ALREADY_EXISTS"};

bool IsSchedulerMethod(absl::string_view method) {
  const google::protobuf::ServiceDescriptor* service =
      v1::StatusResponse::descriptor()->file()->FindServiceByName("Scheduler");
  return service != nullptr &&
         service->FindMethodByName(std::string(method)) != nullptr;
}

std::string CodeName(absl::StatusCode code) {
  const std::string name = absl::StatusCodeToString(code);
  return name.empty() ? absl::StrCat(static_cast<int>(code)) : name;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SchedulerMetrics>> SchedulerMetrics::Create(
    MetricsRegistry* registry, Clock* clock, BuildInfo build) {
  if (registry == nullptr) {
    return absl::InvalidArgumentError("SchedulerMetrics needs a registry");
  }
  std::unique_ptr<SchedulerMetrics> metrics(
      new SchedulerMetrics(registry, clock, std::move(build)));
  RETURN_IF_ERROR(metrics->Register());
  return metrics;
}

SchedulerMetrics::SchedulerMetrics(MetricsRegistry* registry, Clock* clock,
                                   BuildInfo build)
    : registry_(registry),
      clock_(clock != nullptr ? clock : &real_clock_),
      build_(std::move(build)) {}

absl::Status SchedulerMetrics::Register() {
  RETURN_IF_ERROR(RegisterEventFamilies());
  RETURN_IF_ERROR(RegisterStepFamilies());
  registry_->AddCollectHook([this] { TakeSnapshot(); });
  RETURN_IF_ERROR(RegisterJobFamilies());
  RETURN_IF_ERROR(RegisterRankFamilies());
  return RegisterModelFamilies();
}

// Families fed by the control plane's events and the RPC hook.
absl::Status SchedulerMetrics::RegisterEventFamilies() {
  MetricsRegistry& r = *registry_;
  ASSIGN_OR_RETURN(
      planning_seconds_,
      r.AddHistogram("dcp_scheduler_planning_seconds",
                     "Time to plan one step (step builder and planner).",
                     {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                      0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}));
  ASSIGN_OR_RETURN(
      planning_cpu_seconds_,
      r.AddCounter("dcp_scheduler_planning_cpu_seconds_total",
                   "CPU time the planning thread spent planning steps (the "
                   "span of dcp_scheduler_planning_seconds): the process's "
                   "CPU less this is what serving the ranks costs."));
  RETURN_IF_ERROR(r.AddCallback(
      MetricType::kCounter, "process_cpu_seconds_total",
      "CPU time (user and system) of the scheduler process, all threads.", [] {
        return absl::ToDoubleSeconds(ProcessCpuClock().Now() -
                                     absl::UnixEpoch());
      }));
  ASSIGN_OR_RETURN(planned_tokens_,
                   r.AddCounter("dcp_scheduler_planned_tokens_total",
                                "Tokens in the steps planned so far."));
  ASSIGN_OR_RETURN(planned_samples_,
                   r.AddCounter("dcp_scheduler_planned_samples_total",
                                "Samples in the steps planned so far."));
  ASSIGN_OR_RETURN(
      predicted_step_seconds_,
      r.AddGauge("dcp_scheduler_predicted_step_seconds",
                 "The planner's predicted time of the last planned step."));
  ASSIGN_OR_RETURN(
      last_step_planned_time_,
      r.AddGauge("dcp_scheduler_last_step_planned_timestamp_seconds",
                 "When the last step was planned (Unix time; 0: none yet)."));
  ASSIGN_OR_RETURN(
      last_refit_time_,
      r.AddGauge("dcp_scheduler_last_refit_timestamp_seconds",
                 "When the cost model was last refitted (Unix time; 0: "
                 "never)."));
  ASSIGN_OR_RETURN(
      rpcs_, r.AddCounterFamily("dcp_scheduler_rpcs_total",
                                "gRPC calls handled (unary calls, reports "
                                "answered on report streams, plan-stream "
                                "calls ended), by method and status code.",
                                {"method", "code"}));
  ASSIGN_OR_RETURN(
      rejected_reports_,
      r.AddCounterFamily("dcp_scheduler_timing_reports_rejected_total",
                         "Timing reports refused, by status code "
                         "(ALREADY_EXISTS: a retried report already taken).",
                         {"code"}));
  for (const char* code : kReportRejections) {
    RETURN_IF_ERROR(rejected_reports_->WithLabels({code}).status());
  }

  return absl::OkStatus();
}

// The build, the planned tasks' mix and the last completed step.
absl::Status SchedulerMetrics::RegisterStepFamilies() {
  MetricsRegistry& r = *registry_;
  RETURN_IF_ERROR(AddBuildInfoGauge(r, "dcp_scheduler_build_info", build_));
  ASSIGN_OR_RETURN(std::vector<double> sizes, ExponentialBuckets(1, 2, 13));
  ASSIGN_OR_RETURN(
      task_group_size_,
      r.AddHistogram("dcp_scheduler_task_group_size",
                     "Sequence-parallel group size of each planned task.",
                     std::move(sizes)));
  ASSIGN_OR_RETURN(
      task_recompute_,
      r.AddHistogram("dcp_scheduler_task_recompute_ratio",
                     "Recompute ratio (fraction of layers recomputed) of "
                     "each planned task.",
                     {0, 0.25, 0.5, 0.75, 1.0}));
  ASSIGN_OR_RETURN(
      step_predicted_seconds_,
      r.AddGauge("dcp_scheduler_step_predicted_seconds",
                 "The planner's predicted time of the last completed step "
                 "(the step of dcp_scheduler_step_measured_seconds)."));
  ASSIGN_OR_RETURN(
      step_measured_seconds_,
      r.AddGauge("dcp_scheduler_step_measured_seconds",
                 "Measured time of the last completed step: its slowest "
                 "rank's task plus sync seconds, as reported."));
  ASSIGN_OR_RETURN(
      step_seconds_,
      r.AddHistogram("dcp_scheduler_step_seconds",
                     "Measured time of each completed step (slowest rank's "
                     "task plus sync seconds).",
                     {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                      1, 2.5, 5, 10, 25, 60, 120, 300}));
  ASSIGN_OR_RETURN(
      GaugeFamily * imbalance,
      r.AddGaugeFamily("dcp_scheduler_step_imbalance_ratio",
                       "Idle fraction of the last completed step, 1 - "
                       "mean/max of the ranks' busy (task) seconds: from the "
                       "plan's predicted task times (source=\"predicted\") "
                       "and from the reports (source=\"measured\").",
                       {"source"}));
  ASSIGN_OR_RETURN(predicted_imbalance_, imbalance->WithLabels({"predicted"}));
  ASSIGN_OR_RETURN(measured_imbalance_, imbalance->WithLabels({"measured"}));
  ASSIGN_OR_RETURN(trained_tokens_,
                   r.AddCounter("dcp_scheduler_trained_tokens_total",
                                "Tokens of the steps completed so far."));
  ASSIGN_OR_RETURN(
      tokens_per_second_,
      r.AddGauge("dcp_scheduler_tokens_per_second",
                 "The last completed step's tokens over its measured "
                 "seconds."));
  return absl::OkStatus();
}

// The job's progress and membership, read from the Status() snapshot at
// each scrape.
absl::Status SchedulerMetrics::RegisterJobFamilies() {
  MetricsRegistry& r = *registry_;
  RETURN_IF_ERROR(r.AddCallbackFamily(
      MetricType::kGauge, "dcp_scheduler_info",
      "Always 1; labels name the session and the model planned for.",
      {"session_id", "model"}, [this]() -> std::vector<CollectedValue> {
        absl::MutexLock lock(&mu_);
        if (!snapshot_.has_value()) return {};
        return {{{snapshot_->session_id(), snapshot_->model()}, 1.0}};
      }));
  RETURN_IF_ERROR(AddStatusCounter(
      "dcp_scheduler_steps_planned_total", "Steps planned so far.",
      [](const v1::StatusResponse& s) { return s.planned_steps(); }));
  RETURN_IF_ERROR(AddStatusCounter(
      "dcp_scheduler_steps_completed_total",
      "Steps every rank has reported timings for.",
      [](const v1::StatusResponse& s) { return s.completed_steps(); }));
  RETURN_IF_ERROR(AddStatusGauge(
      "dcp_scheduler_planned_ahead_steps",
      "Steps planned but not yet completed (the look-ahead in use).",
      [](const v1::StatusResponse& s) {
        return s.planned_steps() - s.completed_steps();
      }));
  RETURN_IF_ERROR(
      AddStatusGauge("dcp_scheduler_epoch", "The plans' epoch.",
                     [](const v1::StatusResponse& s) { return s.epoch(); }));
  RETURN_IF_ERROR(AddStatusGauge(
      "dcp_scheduler_world_size", "Ranks in the job.",
      [](const v1::StatusResponse& s) { return s.world_size(); }));
  RETURN_IF_ERROR(AddStatusGauge(
      "dcp_scheduler_registered_agents", "Ranks whose agent has registered.",
      [](const v1::StatusResponse& s) {
        return std::count_if(
            s.ranks().begin(), s.ranks().end(),
            [](const v1::RankStatus& r) { return r.registered(); });
      }));
  RETURN_IF_ERROR(AddStatusGauge(
      "dcp_scheduler_connected_agents", "Ranks with an open plan stream.",
      [](const v1::StatusResponse& s) {
        return std::count_if(
            s.ranks().begin(), s.ranks().end(),
            [](const v1::RankStatus& r) { return r.connected(); });
      }));
  // Rank failures (--rank_timeout, --on_rank_failure).
  RETURN_IF_ERROR(AddStatusGauge(
      "dcp_scheduler_live_ranks", "Ranks registered and not declared failed.",
      [](const v1::StatusResponse& s) { return s.live_ranks(); }));
  RETURN_IF_ERROR(AddStatusCounter(
      "dcp_scheduler_rank_failures_total",
      "Ranks declared failed (plan stream gone, silent for --rank_timeout).",
      [](const v1::StatusResponse& s) { return s.rank_failures(); }));
  RETURN_IF_ERROR(AddStatusGauge(
      "dcp_scheduler_holding",
      "1 while --on_rank_failure=hold waits for a failed rank to return (no "
      "new step is planned), else 0.",
      [](const v1::StatusResponse& s) { return s.holding() ? 1 : 0; }));
  return absl::OkStatus();
}

// Per-rank statistics, from the snapshot.
absl::Status SchedulerMetrics::RegisterRankFamilies() {
  MetricsRegistry& r = *registry_;
  // Lag statistics over the registered ranks; no sample while none is.
  // Each is the `value` of the rank that comes first (max) or last by
  // `key`.
  using RankField = std::function<double(const v1::RankStatus&)>;
  auto add_rank_gauge = [this, &r](const char* name, const char* help,
                                   RankField key, bool max, RankField value) {
    return r.AddCallbackFamily(
        MetricType::kGauge, name, help, {},
        [this, key = std::move(key), max, value = std::move(value)] {
          return RankStatistic(
              [&key](const v1::RankStatus& a, const v1::RankStatus& b) {
                return key(a) < key(b);
              },
              max, value);
        });
  };
  const RankField lag = [](const v1::RankStatus& r) {
    return static_cast<double>(r.lag_steps());
  };
  RETURN_IF_ERROR(add_rank_gauge(
      "dcp_scheduler_max_rank_lag_steps",
      "Largest lag of a registered rank: steps planned that it has not "
      "reported (the slowest rank's).",
      lag, /*max=*/true, lag));
  RETURN_IF_ERROR(add_rank_gauge(
      "dcp_scheduler_min_rank_lag_steps",
      "Smallest lag of a registered rank (the fastest rank's); max - min is "
      "how far the fastest rank runs ahead of the slowest.",
      lag, /*max=*/false, lag));
  RETURN_IF_ERROR(add_rank_gauge(
      "dcp_scheduler_slowest_rank",
      "The registered rank with the largest lag (the lowest on a tie).", lag,
      /*max=*/true,
      [](const v1::RankStatus& r) { return static_cast<double>(r.rank()); }));
  const RankField idle = [](const v1::RankStatus& r) {
    return r.idle_seconds();
  };
  RETURN_IF_ERROR(add_rank_gauge(
      "dcp_scheduler_max_rank_idle_seconds",
      "Longest time since a registered rank registered, reported or was "
      "sent a step; a large value points at a stuck agent.",
      idle, /*max=*/true, idle));
  return absl::OkStatus();
}

// Reports and the cost model, then the store and the stop state
// (RegisterStoreAndStopFamilies), from the snapshot.
absl::Status SchedulerMetrics::RegisterModelFamilies() {
  MetricsRegistry& r = *registry_;
  RETURN_IF_ERROR(AddStatusCounter(
      "dcp_scheduler_timing_reports_total", "Timing reports accepted.",
      [](const v1::StatusResponse& s) { return s.timing_reports(); }));
  RETURN_IF_ERROR(AddStatusCounter(
      "dcp_scheduler_refits_total", "Refits of the cost model.",
      [](const v1::StatusResponse& s) { return s.refits(); }));
  RETURN_IF_ERROR(AddStatusGauge(
      "dcp_scheduler_cost_model_observations",
      "Task observations in the refit window (timings and profile entries).",
      [](const v1::StatusResponse& s) { return s.observations(); }));
  RETURN_IF_ERROR(AddStatusGauge(
      "dcp_scheduler_cost_model_task_error_ratio",
      "Mean relative error of the cost model's predicted task times over "
      "the refit window (0.1 = 10%).",
      [](const v1::StatusResponse& s) { return s.model_error(); }));
  RETURN_IF_ERROR(AddStatusGauge(
      "dcp_scheduler_cost_model_unseen_task_error_ratio",
      "Out of sample: mean relative error of each recent task time as "
      "predicted by the model current when it was reported (no fit had "
      "seen it).",
      [](const v1::StatusResponse& s) { return s.unseen_task_error(); }));
  RETURN_IF_ERROR(AddStatusGauge(
      "dcp_scheduler_cost_model_step_error_ratio",
      "Mean relative error of the predicted step times against the "
      "measured ones over the recent completed steps.",
      [](const v1::StatusResponse& s) { return s.step_error(); }));
  RETURN_IF_ERROR(AddStatusGauge(
      "dcp_scheduler_cost_model_sync_error_ratio",
      "The part of the step error the gradient-sync term accounts for: mean "
      "|predicted - measured sync| / measured step time over the recent "
      "completed steps with a reported sync.",
      [](const v1::StatusResponse& s) { return s.sync_error(); }));
  RETURN_IF_ERROR(r.AddCallbackFamily(
      MetricType::kGauge, "dcp_scheduler_last_refit_task_error_ratio",
      "Task error at the last refit, of the model before (fit=\"before\") "
      "and after it (fit=\"after\") on the refit window, and of the refit's "
      "model on the observations reported since (fit=\"since\").",
      {"fit"}, [this]() -> std::vector<CollectedValue> {
        absl::MutexLock lock(&mu_);
        if (!snapshot_.has_value()) return {};
        return {{{"before"}, snapshot_->refit_error_before()},
                {{"after"}, snapshot_->refit_error_after()},
                {{"since"}, snapshot_->refit_error_since()}};
      }));
  RETURN_IF_ERROR(r.AddCallbackFamily(
      MetricType::kGauge, "dcp_scheduler_cost_model_coefficient",
      "The planner's current cost-model coefficients, by name (units in "
      "scheduler/planner/cost_model.h).",
      {"coefficient"}, [this]() -> std::vector<CollectedValue> {
        absl::MutexLock lock(&mu_);
        std::vector<CollectedValue> out;
        if (!snapshot_.has_value()) return out;
        for (const auto& [name, value] : snapshot_->coefficients()) {
          out.push_back({{name}, value});
        }
        return out;
      }));
  return RegisterStoreAndStopFamilies();
}

// The rendezvous store and the drain, stop and planner state, from the
// snapshot.
absl::Status SchedulerMetrics::RegisterStoreAndStopFamilies() {
  RETURN_IF_ERROR(AddStatusGauge(
      "dcp_scheduler_store_keys",
      "Keys in the rendezvous store (communicator formations in flight or "
      "kept; purged per epoch).",
      [](const v1::StatusResponse& s) { return s.store_keys(); }));
  RETURN_IF_ERROR(AddStatusGauge(
      "dcp_scheduler_store_bytes",
      "Bytes of keys and values in the rendezvous store.",
      [](const v1::StatusResponse& s) { return s.store_bytes(); }));
  RETURN_IF_ERROR(AddStatusGauge(
      "dcp_scheduler_draining",
      "1 once a drain was asked for: no new steps are planned.",
      [](const v1::StatusResponse& s) { return s.draining() ? 1 : 0; }));
  RETURN_IF_ERROR(AddStatusGauge(
      "dcp_scheduler_stopping",
      "1 once a stop was asked for: the scheduler exits when drained.",
      [](const v1::StatusResponse& s) { return s.stopping() ? 1 : 0; }));
  RETURN_IF_ERROR(AddStatusGauge(
      "dcp_scheduler_planner_failed",
      "1 when planning stopped on an error (dcp-ctl status shows it).",
      [](const v1::StatusResponse& s) {
        return s.planner_error().empty() ? 0 : 1;
      }));
  return absl::OkStatus();
}

void SchedulerMetrics::Instrument(SchedulerServerOptions& options) {
  ControlPlaneOptions& cp = options.control_plane;
  cp.on_step_planned = [this, next = std::move(cp.on_step_planned)](
                           const PlannedStepEvent& event) {
    if (next) next(event);
    OnStepPlanned(event);
  };
  cp.on_step_completed = [this, next = std::move(cp.on_step_completed)](
                             const StepCompletedEvent& event) {
    if (next) next(event);
    OnStepCompleted(event);
  };
  cp.on_refit = [this, next = std::move(cp.on_refit)](const RefitEvent& event) {
    if (next) next(event);
    OnRefit(event);
  };
  options.on_rpc_done = [this, next = std::move(options.on_rpc_done)](
                            absl::string_view method, absl::StatusCode code) {
    if (next) next(method, code);
    OnRpcDone(method, code);
  };
}

void SchedulerMetrics::SetStatusSource(SchedulerStatusSource status) {
  absl::MutexLock lock(&mu_);
  source_ = std::move(status);
}

void SchedulerMetrics::OnStepPlanned(const PlannedStepEvent& event) {
  planning_seconds_->Observe(absl::ToDoubleSeconds(event.planning_time));
  planning_cpu_seconds_->Increment(
      absl::ToDoubleSeconds(event.planning_cpu_time));
  planned_tokens_->Increment(static_cast<double>(event.tokens));
  planned_samples_->Increment(static_cast<double>(event.samples));
  predicted_step_seconds_->Set(event.predicted_seconds);
  last_step_planned_time_->Set(UnixSeconds(clock_->Now()));
  for (int p : event.task_group_sizes) task_group_size_->Observe(p);
  for (double ratio : event.task_recompute) task_recompute_->Observe(ratio);
  const double idle = IdleFraction(event.predicted_rank_busy_seconds);
  absl::MutexLock lock(&pending_mu_);
  predicted_idle_[{event.epoch, event.step}] = idle;
  while (predicted_idle_.size() > kMaxPendingSteps) {
    predicted_idle_.erase(predicted_idle_.begin());
  }
}

void SchedulerMetrics::OnStepCompleted(const StepCompletedEvent& event) {
  step_predicted_seconds_->Set(event.predicted_seconds);
  step_measured_seconds_->Set(event.measured_seconds);
  step_seconds_->Observe(event.measured_seconds);
  measured_imbalance_->Set(IdleFraction(event.rank_busy_seconds));
  trained_tokens_->Increment(static_cast<double>(event.tokens));
  tokens_per_second_->Set(
      event.measured_seconds > 0 ? event.tokens / event.measured_seconds : 0.0);
  absl::MutexLock lock(&pending_mu_);
  auto it = predicted_idle_.find({event.epoch, event.step});
  if (it == predicted_idle_.end()) return;
  predicted_imbalance_->Set(it->second);
  predicted_idle_.erase(it);
}

void SchedulerMetrics::OnRefit(const RefitEvent& /*event*/) {
  last_refit_time_->Set(UnixSeconds(clock_->Now()));
}

void SchedulerMetrics::OnRpcDone(absl::string_view method,
                                 absl::StatusCode code) {
  // Only the service's own methods: a client's made-up method name must not
  // grow the label set.
  const std::string method_label =
      IsSchedulerMethod(method) ? std::string(method) : "unknown";
  const std::string code_label = CodeName(code);
  if (absl::StatusOr<Counter*> c =
          rpcs_->WithLabels({method_label, code_label});
      c.ok()) {
    (*c)->Increment();
  }
  const bool report = method == "ReportTimings" || method == "StreamReports" ||
                      method == "StreamNodeReports";
  if (report && code != absl::StatusCode::kOk) {
    if (absl::StatusOr<Counter*> c =
            rejected_reports_->WithLabels({code_label});
        c.ok()) {
      (*c)->Increment();
    }
  }
}

void SchedulerMetrics::TakeSnapshot() {
  SchedulerStatusSource source;
  {
    absl::MutexLock lock(&mu_);
    source = source_;
  }
  // Status() takes the control plane's lock: not under ours.
  std::optional<v1::StatusResponse> snapshot;
  if (source) snapshot = source();
  absl::MutexLock lock(&mu_);
  snapshot_ = std::move(snapshot);
}

std::vector<CollectedValue> SchedulerMetrics::FromSnapshot(
    const std::function<double(const v1::StatusResponse&)>& value) {
  absl::MutexLock lock(&mu_);
  if (!snapshot_.has_value()) return {};
  return {{{}, value(*snapshot_)}};
}

std::vector<CollectedValue> SchedulerMetrics::RankStatistic(
    const std::function<bool(const v1::RankStatus&, const v1::RankStatus&)>&
        less,
    bool max, const std::function<double(const v1::RankStatus&)>& value) {
  absl::MutexLock lock(&mu_);
  if (!snapshot_.has_value()) return {};
  const v1::RankStatus* best = nullptr;
  for (const v1::RankStatus& rank : snapshot_->ranks()) {
    if (!rank.registered()) continue;
    // Strict comparisons keep the lowest rank on a tie.
    if (best == nullptr || (max ? less(*best, rank) : less(rank, *best))) {
      best = &rank;
    }
  }
  if (best == nullptr) return {};
  return {{{}, value(*best)}};
}

absl::Status SchedulerMetrics::AddStatusGauge(
    const char* name, const char* help,
    std::function<double(const v1::StatusResponse&)> value) {
  return registry_->AddCallbackFamily(
      MetricType::kGauge, name, help, {},
      [this, value = std::move(value)] { return FromSnapshot(value); });
}

absl::Status SchedulerMetrics::AddStatusCounter(
    const char* name, const char* help,
    std::function<double(const v1::StatusResponse&)> value) {
  return registry_->AddCallbackFamily(
      MetricType::kCounter, name, help, {},
      [this, value = std::move(value)] { return FromSnapshot(value); });
}

}  // namespace dcp
