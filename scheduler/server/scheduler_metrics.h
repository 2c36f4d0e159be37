#ifndef DCP_SCHEDULER_SERVER_SCHEDULER_METRICS_H_
#define DCP_SCHEDULER_SERVER_SCHEDULER_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/build_info.h"
#include "common/clock.h"
#include "common/metrics/metrics.h"
#include "proto/scheduler_service.pb.h"
#include "scheduler/control/control_plane.h"
#include "scheduler/server/scheduler_server.h"

namespace dcp {

/// Where `SchedulerMetrics` reads the control plane's state at each scrape:
/// `ControlPlane::Status()` in the daemon, a canned response in tests.
using SchedulerStatusSource = std::function<v1::StatusResponse()>;

/// dcp-scheduler's Prometheus metrics (the `dcp_scheduler_*` families; the
/// README's "Metrics" section lists them). Three sources feed them:
///
/// - the control plane's callbacks as things happen (`OnStepPlanned`:
///   planning time histogram and planning CPU counter, tokens and
///   samples planned, the group sizes and recompute ratios of the planned
///   tasks; `OnStepCompleted`: the last
///   completed step's predicted and measured time, imbalance and tokens per
///   second, trained tokens; `OnRefit`: the time of the last refit);
/// - the gRPC server's end of every unary RPC, of every report a report
///   stream answered and of every plan-stream call (`OnRpcDone`: RPCs by
///   method and code, rejected timing reports by code);
/// - a snapshot of `ControlPlane::Status()` taken once per scrape (steps,
///   look-ahead, agents, lag, cost-model error and coefficients, ...).
///
/// Per-rank lag is not exported per rank: at 1,024 ranks that is 1,024
/// series per metric. The snapshot gives the spread instead (lag of the
/// slowest and of the fastest registered rank, which rank is slowest, the
/// longest idle time); `dcp-ctl status` lists every rank.
///
/// `Instrument` wires the first two into a server's options (keeping the
/// callbacks already there); `SetStatusSource` the third, once the server
/// runs. Until then the snapshot families have no samples.
///
/// Thread-safe; the event methods are atomics, plus a short mutex over the
/// planned steps' predicted imbalance in `OnStepPlanned` and
/// `OnStepCompleted`, and fit for the planning thread and gRPC threads.
/// Registers its families in the registry it is given, which must outlive it;
/// it must outlive the server it instruments.
///
///   MetricsRegistry registry;
///   ASSIGN_OR_RETURN(std::unique_ptr<SchedulerMetrics> metrics,
///                    SchedulerMetrics::Create(&registry));
///   metrics->Instrument(server_options);
///   ASSIGN_OR_RETURN(auto server, SchedulerServer::Start(server_options));
///   metrics->SetStatusSource(
///       [s = server.get()] { return s->control_plane().Status(); });
class SchedulerMetrics {
 public:
  /// Registers every family in `registry` (not owned; required). `clock`
  /// stamps the `_timestamp_seconds` gauges; null = real time (not owned).
  /// `build` labels `dcp_scheduler_build_info` (the daemon passes
  /// `CurrentBuildInfo()`). ALREADY_EXISTS when the registry has them
  /// already.
  static absl::StatusOr<std::unique_ptr<SchedulerMetrics>> Create(
      MetricsRegistry* registry, Clock* clock = nullptr,
      BuildInfo build = {kDcpVersion, "unknown"});

  SchedulerMetrics(const SchedulerMetrics&) = delete;
  SchedulerMetrics& operator=(const SchedulerMetrics&) = delete;

  /// Chains `OnStepPlanned`, `OnStepCompleted` and `OnRefit` onto the
  /// control plane's callbacks in `options` (after the callbacks already
  /// set) and sets `on_rpc_done` (after the one already set).
  void Instrument(SchedulerServerOptions& options);

  /// Reads the control plane at every scrape from now on.
  void SetStatusSource(SchedulerStatusSource status);

  void OnStepPlanned(const PlannedStepEvent& event);
  /// The step gauges then describe `event`'s step. Its predicted imbalance
  /// is the one `OnStepPlanned` computed for the same (epoch, step); a step
  /// this instance did not see planned (planned before a restart) leaves
  /// that gauge as it was.
  void OnStepCompleted(const StepCompletedEvent& event);
  void OnRefit(const RefitEvent& event);
  /// `method` is the RPC's short name ("ReportTimings").
  void OnRpcDone(absl::string_view method, absl::StatusCode code);

 private:
  SchedulerMetrics(MetricsRegistry* registry, Clock* clock, BuildInfo build);
  absl::Status Register();
  absl::Status RegisterEventFamilies();
  absl::Status RegisterStepFamilies();
  absl::Status RegisterJobFamilies();
  absl::Status RegisterRankFamilies();
  absl::Status RegisterModelFamilies();
  absl::Status RegisterStoreAndStopFamilies();
  /// The collect hook: takes the snapshot the status families read.
  void TakeSnapshot();
  /// `value(snapshot)` as one sample, none before the source is set.
  std::vector<CollectedValue> FromSnapshot(
      const std::function<double(const v1::StatusResponse&)>& value);
  /// `value` of the registered rank that `less` ranks highest (`max`) or
  /// lowest, as one sample; none while no rank is registered.
  std::vector<CollectedValue> RankStatistic(
      const std::function<bool(const v1::RankStatus&, const v1::RankStatus&)>&
          less,
      bool max, const std::function<double(const v1::RankStatus&)>& value);
  absl::Status AddStatusGauge(
      const char* name, const char* help,
      std::function<double(const v1::StatusResponse&)> value);
  absl::Status AddStatusCounter(
      const char* name, const char* help,
      std::function<double(const v1::StatusResponse&)> value);

  MetricsRegistry* const registry_;
  RealClock real_clock_;
  Clock* const clock_;

  // Event-fed instruments, owned by the registry.
  Histogram* planning_seconds_ = nullptr;
  Counter* planning_cpu_seconds_ = nullptr;
  Counter* planned_tokens_ = nullptr;
  Counter* planned_samples_ = nullptr;
  Gauge* predicted_step_seconds_ = nullptr;
  Gauge* last_step_planned_time_ = nullptr;
  Gauge* last_refit_time_ = nullptr;
  CounterFamily* rpcs_ = nullptr;
  CounterFamily* rejected_reports_ = nullptr;
  Histogram* task_group_size_ = nullptr;
  Histogram* task_recompute_ = nullptr;
  // The last completed step's figures, fed by OnStepCompleted.
  Gauge* step_predicted_seconds_ = nullptr;
  Gauge* step_measured_seconds_ = nullptr;
  Histogram* step_seconds_ = nullptr;
  Gauge* predicted_imbalance_ = nullptr;
  Gauge* measured_imbalance_ = nullptr;
  Counter* trained_tokens_ = nullptr;
  Gauge* tokens_per_second_ = nullptr;
  const BuildInfo build_;

  /// Predicted idle fraction of each step planned and not yet completed, by
  /// (epoch, step); at most `kMaxPendingSteps`, the oldest dropped first
  /// (steps of an abandoned epoch never complete).
  static constexpr size_t kMaxPendingSteps = 4096;
  absl::Mutex pending_mu_;
  std::map<std::pair<int64_t, int64_t>, double> predicted_idle_
      ABSL_GUARDED_BY(pending_mu_);

  absl::Mutex mu_;
  SchedulerStatusSource source_ ABSL_GUARDED_BY(mu_);
  /// The snapshot of the scrape in progress (set by the collect hook).
  std::optional<v1::StatusResponse> snapshot_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_SERVER_SCHEDULER_METRICS_H_
