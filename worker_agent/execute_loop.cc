#include "worker_agent/execute_loop.h"

#include <fstream>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "comm/peer_loss.h"
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

// Opens --log_file for appending; a closed stream when there is none.
absl::Status OpenLog(const std::string& path, std::ofstream& log) {
  if (path.empty()) return absl::OkStatus();
  log.open(path, std::ios::app);
  if (!log.good()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open --log_file '", path, "'"));
  }
  return absl::OkStatus();
}

// The model executor of the execute mode; null when simulating.
absl::StatusOr<std::unique_ptr<ModelExecutor>> MakeExecutor(
    StepSourceInterface& source, const ExecuteLoopOptions& options) {
  if (options.simulate) return std::unique_ptr<ModelExecutor>();
  ModelExecutorOptions executor_options = options.executor;
  executor_options.session_id = source.session_id();
  return ModelExecutor::Create(std::move(executor_options),
                               source.rendezvous_store());
}

// One run of the loop: the steps it ran, skipped and gave up.
class ExecuteRun {
 public:
  ExecuteRun(StepSourceInterface& source, const ExecuteLoopOptions& options)
      : source_(source),
        options_(options),
        clock_(options.clock != nullptr ? *options.clock
                                        : *RealClock::Default()) {}

  // Opens the log (first, so that a bad path fails before any rendezvous),
  // then the executor.
  absl::Status Start() {
    RETURN_IF_ERROR(OpenLog(options_.log_file, log_));
    ASSIGN_OR_RETURN(executor_, MakeExecutor(source_, options_));
    return absl::OkStatus();
  }

  absl::StatusOr<ExecuteSummary> Run() {
    int64_t after_step = -1;
    while (options_.max_steps == 0 || summary_.executed < options_.max_steps) {
      absl::StatusOr<NextStepResult> next =
          source_.NextStep(after_step, options_.step_timeout);
      if (!next.ok()) return WaitFailed(next.status());
      if (next->drained) break;
      after_step = next->step.step();
      RETURN_IF_ERROR(Handle(next->step));
    }
    return summary_;
  }

 private:
  // The loop's error when no next step came.
  absl::Status WaitFailed(const absl::Status& wait) const {
    if (options_.stopped && options_.stopped()) {
      return absl::CancelledError("stopped by signal");
    }
    return given_up_.active ? given_up_.Unreplaced(wait) : wait;
  }

  // Runs, skips or gives up `step`; an error ends the loop.
  absl::Status Handle(const v1::RankStep& step) {
    if (given_up_.active && step.epoch() <= given_up_.epoch) {
      ++summary_.skipped;
      if (options_.on_step_given_up) options_.on_step_given_up(step, {});
      return absl::OkStatus();
    }
    given_up_.active = false;
    const absl::Time step_start = clock_.Now();
    absl::StatusOr<StepExecution> done =
        RunOne(step, executor_.get(), options_, clock_);
    if (!done.ok() && executor_ != nullptr && IsPeerLoss(done.status())) {
      given_up_ = GivenUp{true, step.epoch(), step.step(), done.status()};
      ++summary_.given_up;
      if (options_.on_step_given_up) {
        options_.on_step_given_up(step, done.status());
      }
      return absl::OkStatus();
    }
    if (!done.ok()) return done.status();
    return Finish(step, *done, clock_.Now() - step_start);
  }

  // Logs and reports a step that ran.
  absl::Status Finish(const v1::RankStep& step, const StepExecution& done,
                      absl::Duration took) {
    if (options_.metrics != nullptr) {
      options_.metrics->OnStepExecuted(done, took);
    }
    RETURN_IF_ERROR(AppendLog(log_, options_.log_file, step, done));
    RETURN_IF_ERROR(source_.ReportTimings(done.report));
    if (summary_.executed == 0) summary_.first_loss = done.loss;
    summary_.last_loss = done.loss;
    summary_.last_step = step.step();
    ++summary_.executed;
    return absl::OkStatus();
  }

  StepSourceInterface& source_;
  const ExecuteLoopOptions& options_;
  std::unique_ptr<ModelExecutor> executor_;
  Clock& clock_;
  std::ofstream log_;
  ExecuteSummary summary_;
  GivenUp given_up_;
};

}  // namespace

absl::StatusOr<ExecuteSummary> RunExecuteLoop(
    StepSourceInterface& source, const ExecuteLoopOptions& options) {
  ExecuteRun run(source, options);
  RETURN_IF_ERROR(run.Start());
  return run.Run();
}

}  // namespace dcp
