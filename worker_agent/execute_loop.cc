#include "worker_agent/execute_loop.h"

#include <fstream>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "worker_agent/simulated_step.h"

namespace dcp {
namespace {

/// Appends one step's lines to `log` (when open).
absl::Status AppendLog(std::ofstream& log, const std::string& path,
                       const v1::RankStep& step, const StepExecution& done) {
  if (!log.is_open()) return absl::OkStatus();
  log << FormatExecutionLog(step, done);
  log.flush();
  if (!log.good()) {
    return absl::UnavailableError(
        absl::StrCat("cannot write --log_file '", path, "'"));
  }
  return absl::OkStatus();
}

/// Runs `step`: trains it with `executor`, or simulates it (no executor).
absl::StatusOr<StepExecution> RunOne(const v1::RankStep& step,
                                     ModelExecutor* executor,
                                     const ExecuteLoopOptions& options,
                                     Clock& clock) {
  if (executor != nullptr) return executor->RunStep(step);
  StepExecution done = SimulateStep(step, options.simulate_task_time);
  // The simulated work takes its time, so that the ranks pace like a job.
  absl::Mutex mu;
  const bool never = false;
  absl::MutexLock lock(&mu);
  clock.AwaitWithTimeout(&mu, absl::Condition(&never),
                         options.simulate_task_time * step.tasks_size());
  return done;
}

// A step given up because a peer failed: the later steps of its epoch are
// skipped until one of a later epoch comes.
struct GivenUp {
  bool active = false;
  int64_t epoch = 0;
  int64_t step = 0;
  absl::Status error;

  // The loop's error when waiting for the later epoch failed with `wait`.
  absl::Status Unreplaced(const absl::Status& wait) const {
    return absl::Status(
        error.code(),
        absl::StrCat(error.message(), " (step ", step, " of epoch ", epoch,
                     " was given up for it, and no step of a later epoch "
                     "came: ",
                     wait.message(), ")"));
  }
};

}  // namespace

absl::StatusOr<ExecuteSummary> RunExecuteLoop(
    StepSourceInterface& source, const ExecuteLoopOptions& options) {
  std::ofstream log;
  if (!options.log_file.empty()) {
    log.open(options.log_file, std::ios::app);
    if (!log.good()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot open --log_file '", options.log_file, "'"));
    }
  }
  std::unique_ptr<ModelExecutor> executor;
  if (!options.simulate) {
    ModelExecutorOptions executor_options = options.executor;
    executor_options.session_id = source.session_id();
    ASSIGN_OR_RETURN(executor,
                     ModelExecutor::Create(std::move(executor_options),
                                           source.rendezvous_store()));
  }
  Clock& clock =
      options.clock != nullptr ? *options.clock : *RealClock::Default();
  ExecuteSummary summary;
  GivenUp given_up;
  int64_t after_step = -1;
  while (options.max_steps == 0 || summary.executed < options.max_steps) {
    absl::StatusOr<NextStepResult> next =
        source.NextStep(after_step, options.step_timeout);
    if (!next.ok()) {
      if (options.stopped && options.stopped()) {
        return absl::CancelledError("stopped by signal");
      }
      return given_up.active ? given_up.Unreplaced(next.status())
                             : next.status();
    }
    if (next->drained) break;
    const v1::RankStep& step = next->step;
    after_step = step.step();
    if (given_up.active && step.epoch() <= given_up.epoch) {
      ++summary.skipped;
      if (options.on_step_given_up) options.on_step_given_up(step, {});
      continue;
    }
    given_up.active = false;
    const absl::Time step_start = clock.Now();
    absl::StatusOr<StepExecution> done =
        RunOne(step, executor.get(), options, clock);
    if (!done.ok() && executor != nullptr && IsPeerFailure(done.status())) {
      given_up = GivenUp{true, step.epoch(), step.step(), done.status()};
      ++summary.given_up;
      if (options.on_step_given_up) {
        options.on_step_given_up(step, done.status());
      }
      continue;
    }
    if (!done.ok()) return done.status();
    if (options.metrics != nullptr) {
      options.metrics->OnStepExecuted(*done, clock.Now() - step_start);
    }
    RETURN_IF_ERROR(AppendLog(log, options.log_file, step, *done));
    RETURN_IF_ERROR(source.ReportTimings(done->report));
    if (summary.executed == 0) summary.first_loss = done->loss;
    summary.last_loss = done->loss;
    summary.last_step = step.step();
    ++summary.executed;
  }
  return summary;
}

}  // namespace dcp
