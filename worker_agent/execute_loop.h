#ifndef DCP_WORKER_AGENT_EXECUTE_LOOP_H_
#define DCP_WORKER_AGENT_EXECUTE_LOOP_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/rendezvous_store.h"
#include "common/clock.h"
#include "proto/plan.pb.h"
#include "proto/scheduler_service.pb.h"
#include "worker_agent/agent.h"
#include "worker_agent/agent_metrics.h"
#include "worker_agent/model_executor.h"

namespace dcp {

/// What the execute loop needs of an agent: `AgentStepSource` for an
/// `Agent`; tests give their own.
class StepSourceInterface {
 public:
  virtual ~StepSourceInterface() = default;
  virtual absl::StatusOr<NextStepResult> NextStep(int64_t after_step,
                                                  absl::Duration timeout) = 0;
  virtual absl::Status ReportTimings(const v1::TimingReport& report) = 0;
  /// Where the trainer's process groups meet, and the session they are
  /// named after.
  virtual RendezvousStoreInterface* rendezvous_store() = 0;
  virtual std::string session_id() = 0;
};

/// An `Agent` as a step source. Does not own it.
class AgentStepSource final : public StepSourceInterface {
 public:
  explicit AgentStepSource(Agent* agent) : agent_(agent) {}

  absl::StatusOr<NextStepResult> NextStep(int64_t after_step,
                                          absl::Duration timeout) override {
    return agent_->NextStep(after_step, timeout);
  }
  absl::Status ReportTimings(const v1::TimingReport& report) override {
    return agent_->ReportTimings(report);
  }
  RendezvousStoreInterface* rendezvous_store() override {
    return agent_->rendezvous_store();
  }
  std::string session_id() override {
    return agent_->registration().session_id();
  }

 private:
  Agent* const agent_;
};

/// Configuration of `RunExecuteLoop` (dcp-agent's execute mode).
struct ExecuteLoopOptions {
  /// The model, rank, world and training settings (model_executor.h); its
  /// session_id is taken from the source.
  ModelExecutorOptions executor;
  /// Where one JSON line per task and per step is appended
  /// (`FormatExecutionLog`); empty: none.
  std::string log_file;
  /// Stop after this many steps; 0: run until drained.
  int64_t max_steps = 0;
  /// How long to wait for each next step.
  absl::Duration step_timeout = absl::Minutes(10);
  /// Counts the executed steps; null: none. Not owned.
  AgentMetrics* metrics = nullptr;
  /// Whether the agent was stopped on purpose (a signal): a failed NextStep
  /// then ends the loop CANCELLED. Empty: never.
  std::function<bool()> stopped;
  /// Times the steps for the metrics (wall time). Null: the system clock.
  /// Not owned.
  Clock* clock = nullptr;
  /// Simulate instead of training (dcp-agent --mode=simulate): no model,
  /// no groups; each task takes `simulate_task_time` on `clock`
  /// (`SimulateStep`), so the ranks follow any change of the world.
  bool simulate = false;
  absl::Duration simulate_task_time = absl::Milliseconds(10);
  /// Told of each step given up because a peer failed (`IsPeerLoss`),
  /// with its error, and of each later step of that epoch skipped
  /// (status OK). May be empty.
  std::function<void(const v1::RankStep& step, const absl::Status& status)>
      on_step_given_up;
};

/// How far `RunExecuteLoop` got.
struct ExecuteSummary {
  int64_t executed = 0;
  /// The last step run; -1 if none.
  int64_t last_step = -1;
  /// The loss of the first and of the last step run (0 when none).
  double first_loss = 0;
  double last_loss = 0;
  /// Steps not run to the end because a peer failed, and the steps of the
  /// same epoch skipped after them (neither is reported).
  int64_t given_up = 0;
  int64_t skipped = 0;
};

/// Trains on each step of `source` until the drain (or `max_steps`): the
/// step with a `ModelExecutor` (its tasks, the gradient all-reduce, the
/// optimizer step), the log lines, then its timings reported.
///
/// Follows the scheduler's epochs: a step that fails because a peer is gone
/// (`IsPeerLoss`: the weights are then those before it) is not reported,
/// the epoch's groups are aborted, and the epoch's later steps are skipped
/// until a step of a later epoch arrives (a shrink re-plans the steps not
/// completed for the ranks left); that step re-forms the groups over its
/// world and the training goes on. If none arrives within `step_timeout`
/// the loop fails with the step's error.
///
/// INVALID_ARGUMENT for bad options or a log file that cannot be opened;
/// the first failing step (other than for a peer) or report otherwise.
/// Blocks; thread-compatible.
///
///   ExecuteLoopOptions options;
///   options.executor.model = model;
///   options.executor.rank = agent->rank();
///   options.executor.world_size = world;
///   AgentStepSource source(agent.get());
///   ASSIGN_OR_RETURN(ExecuteSummary done, RunExecuteLoop(source, options));
absl::StatusOr<ExecuteSummary> RunExecuteLoop(
    StepSourceInterface& source, const ExecuteLoopOptions& options);

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_EXECUTE_LOOP_H_
