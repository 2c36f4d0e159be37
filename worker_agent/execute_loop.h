#ifndef DCP_WORKER_AGENT_EXECUTE_LOOP_H_
#define DCP_WORKER_AGENT_EXECUTE_LOOP_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "common/clock.h"
#include "common/model_spec.h"
#include "proto/plan.pb.h"
#include "proto/scheduler_service.pb.h"
#include "worker_agent/agent.h"
#include "worker_agent/agent_metrics.h"
#include "worker_agent/task_executor.h"

namespace dcp {

/// What the execute loop needs of an agent: `AgentStepSource` for an
/// `Agent`; tests give their own.
class StepSourceInterface {
 public:
  virtual ~StepSourceInterface() = default;
  virtual absl::StatusOr<NextStepResult> NextStep(int64_t after_step,
                                                  absl::Duration timeout) = 0;
  virtual absl::StatusOr<Communicator*> Group(const v1::CommGroup& group) = 0;
  virtual absl::StatusOr<Communicator*> DataParallelGroup() = 0;
  virtual absl::Status ReportTimings(const v1::TimingReport& report) = 0;
};

/// An `Agent` as a step source. Does not own it.
class AgentStepSource final : public StepSourceInterface {
 public:
  explicit AgentStepSource(Agent* agent) : agent_(agent) {}

  absl::StatusOr<NextStepResult> NextStep(int64_t after_step,
                                          absl::Duration timeout) override {
    return agent_->NextStep(after_step, timeout);
  }
  absl::StatusOr<Communicator*> Group(const v1::CommGroup& group) override {
    return agent_->Group(group);
  }
  absl::StatusOr<Communicator*> DataParallelGroup() override {
    return agent_->DataParallelGroup();
  }
  absl::Status ReportTimings(const v1::TimingReport& report) override {
    return agent_->ReportTimings(report);
  }

 private:
  Agent* const agent_;
};

/// Configuration of `RunExecuteLoop` (dcp-agent's execute mode).
struct ExecuteLoopOptions {
  /// The model whose Ulysses attention layer each task runs. Required.
  ModelSpec model;
  /// This rank, and the job's world (a gradient sync needs two ranks).
  int rank = -1;
  int world_size = 1;
  /// Attention layers run per task; 0: the model's.
  int layers = 0;
  /// Sequence lengths are divided by this (rounded up), so that GPU-sized
  /// plans run fast on a CPU. At least 1.
  int64_t token_scale = 64;
  /// Where one JSON line per task and per step is appended; empty: none.
  std::string log_file;
  /// Stop after this many steps; 0: run until drained.
  int64_t max_steps = 0;
  /// How long to wait for each next step.
  absl::Duration step_timeout = absl::Minutes(10);
  /// Close every step with an all-reduce of `gradient_floats` floats (0:
  /// the model's parameters divided by `token_scale`) over the world's
  /// data-parallel group, reported as the step's sync_seconds.
  bool sync_gradients = true;
  int64_t gradient_floats = 0;
  /// Counts the executed steps; null: none. Not owned.
  AgentMetrics* metrics = nullptr;
  /// Whether the agent was stopped on purpose (a signal): a failed NextStep
  /// then ends the loop CANCELLED. Empty: never.
  std::function<bool()> stopped;
  /// Times the steps and the gradient sync. Null: the system clock. Not
  /// owned.
  Clock* clock = nullptr;
};

/// How far `RunExecuteLoop` got.
struct ExecuteSummary {
  int64_t executed = 0;
  /// The last step run; -1 if none.
  int64_t last_step = -1;
};

/// The options of the executor that runs `model` on `rank` (the execute
/// loop's, and a profile run's).
TaskExecutorOptions ExecutorOptionsFor(const ModelSpec& model, int rank,
                                       int layers, int64_t token_scale);

/// Runs each step of `source` until the drain (or `max_steps`): the step's
/// tasks with a `TaskExecutor` over its groups, the gradient sync, the log
/// lines, then its timings reported. INVALID_ARGUMENT for bad options or
/// a log file that cannot be opened; the first failing step, group or
/// report otherwise. Blocks; thread-compatible.
///
///   ExecuteLoopOptions options;
///   options.model = model;
///   options.rank = agent->rank();
///   AgentStepSource source(agent.get());
///   ASSIGN_OR_RETURN(ExecuteSummary done, RunExecuteLoop(source, options));
absl::StatusOr<ExecuteSummary> RunExecuteLoop(
    StepSourceInterface& source, const ExecuteLoopOptions& options);

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_EXECUTE_LOOP_H_
