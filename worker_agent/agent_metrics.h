#ifndef DCP_WORKER_AGENT_AGENT_METRICS_H_
#define DCP_WORKER_AGENT_AGENT_METRICS_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/build_info.h"
#include "common/metrics/metrics.h"
#include "worker_agent/agent.h"
#include "worker_agent/step_execution.h"

namespace dcp {

/// Who an agent is, for `dcp_agent_info` and `dcp_agent_rank`.
struct AgentIdentity {
  int rank = -1;
  std::string session_id;
  /// "execute" or "serve".
  std::string mode;
};

/// dcp-agent's Prometheus metrics (the `dcp_agent_*` families; the
/// README's "Metrics" section lists them):
///
/// - from `AgentStats`, read at each scrape: steps received, delivered and
///   dropped as stale, reconnects, reports sent, profile runs, the
///   communicator cache's hits, misses, warm-ups, failures and live groups;
/// - from the execute mode's loop (`OnStepExecuted`): steps executed, a
///   histogram of task seconds and one of step seconds;
/// - from the agent's callbacks (`AgentOptions::on_step_received`,
///   `on_group_formed`, the executor's `on_group_formed`): plan delivery
///   seconds (planned at the scheduler -> received here, by the two hosts'
///   wall clocks: their skew is in the figure, and a negative one is
///   counted and observed as 0) and communicator formation seconds.
///
/// The rank is not a label of these series: Prometheus' target labels tell
/// the agents apart (deploy/prometheus/prometheus.yml puts `rank` on each
/// agent target), and `dcp_agent_rank` holds it as a value.
///
/// Thread-safe; the event methods are lock-free. Registers its families in
/// the registry it is given, which must outlive it.
///
///   ASSIGN_OR_RETURN(std::unique_ptr<AgentMetrics> metrics,
///                    AgentMetrics::Create(&registry));
///   ASSIGN_OR_RETURN(std::unique_ptr<Agent> agent, Agent::Start(options));
///   metrics->SetStatsSource([a = agent.get()] { return a->Stats(); },
///                           {agent->rank(), session, "execute"});
///   ... metrics->OnStepExecuted(done, absl::Now() - start);
class AgentMetrics {
 public:
  /// Registers every family in `registry` (not owned; required). `build`
  /// labels `dcp_agent_build_info` (the daemon passes
  /// `CurrentBuildInfo()`). ALREADY_EXISTS when the registry has them
  /// already.
  static absl::StatusOr<std::unique_ptr<AgentMetrics>> Create(
      MetricsRegistry* registry, BuildInfo build = {kDcpVersion, "unknown"});

  AgentMetrics(const AgentMetrics&) = delete;
  AgentMetrics& operator=(const AgentMetrics&) = delete;

  /// Reads `stats` at every scrape from now on; until then the stats
  /// families have no samples.
  void SetStatsSource(std::function<AgentStats()> stats,
                      AgentIdentity identity);

  /// One step this rank ran: its tasks' seconds and the whole step's wall
  /// time (tasks, their group checks, the report excluded).
  void OnStepExecuted(const StepExecution& step, absl::Duration wall_time);

  /// A step planned at `planned` (the scheduler's clock) was received at
  /// `received` (this agent's). A negative difference (clock skew) is
  /// observed as 0 and counted.
  void OnStepReceived(absl::Time planned, absl::Time received);

  /// A communicator group took `formation` to form.
  void OnGroupFormed(absl::Duration formation);

 private:
  AgentMetrics(MetricsRegistry* registry, BuildInfo build)
      : registry_(registry), build_(std::move(build)) {}
  absl::Status Register();
  absl::Status RegisterExecuteFamilies();
  absl::Status RegisterTimingFamilies();
  absl::Status RegisterIdentityFamilies();
  absl::Status RegisterStreamFamilies();
  absl::Status RegisterGroupFamilies();
  void TakeSnapshot();
  absl::Status AddStatsCounter(const char* name, const char* help,
                               std::function<double(const AgentStats&)> value);

  MetricsRegistry* const registry_;
  Counter* steps_executed_ = nullptr;
  Counter* tasks_executed_ = nullptr;
  Histogram* task_seconds_ = nullptr;
  Histogram* step_seconds_ = nullptr;
  Gauge* training_loss_ = nullptr;
  Histogram* plan_delivery_ = nullptr;
  Counter* clock_skew_ = nullptr;
  Histogram* formation_ = nullptr;
  const BuildInfo build_;

  absl::Mutex mu_;
  std::function<AgentStats()> source_ ABSL_GUARDED_BY(mu_);
  AgentIdentity identity_ ABSL_GUARDED_BY(mu_);
  std::optional<AgentStats> snapshot_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_AGENT_METRICS_H_
