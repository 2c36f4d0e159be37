#include "worker_agent/execute_loop.h"

#include <algorithm>
#include <fstream>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dcp {
namespace {

/// The gradient the loop syncs: empty when off or in a world of one rank.
absl::StatusOr<std::vector<float>> GradientBuffer(
    const ExecuteLoopOptions& options) {
  if (!options.sync_gradients || options.world_size < 2) {
    return std::vector<float>();
  }
  int64_t floats = options.gradient_floats;
  if (floats < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gradient_floats must be >= 0, not ", floats));
  }
  if (floats == 0) {
    floats = std::max<int64_t>(
        1, static_cast<int64_t>(options.model.TotalParams() /
                                std::max<int64_t>(1, options.token_scale)));
  }
  constexpr int64_t kMaxFloats = int64_t{1} << 28;  // 1 GiB
  if (floats > kMaxFloats) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the gradient sync would all-reduce ", floats,
        " floats (over 1 GiB); raise --token_scale or set --gradient_floats"));
  }
  return std::vector<float>(static_cast<size_t>(floats), 1.0f);
}

/// An all-reduce of `gradient` over the world's data-parallel group, after
/// the step's tasks on every rank. Returns its time in seconds.
absl::StatusOr<double> SyncGradients(StepSourceInterface& source, Clock& clock,
                                     std::vector<float>& gradient) {
  ASSIGN_OR_RETURN(Communicator * world, source.DataParallelGroup());
  const absl::Time start = clock.Now();
  RETURN_IF_ERROR(world->AllReduceSum(gradient.data(), gradient.size()));
  return absl::ToDoubleSeconds(clock.Now() - start);
}

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

}  // namespace

TaskExecutorOptions ExecutorOptionsFor(const ModelSpec& model, int rank,
                                       int layers, int64_t token_scale) {
  TaskExecutorOptions options;
  options.rank = rank;
  options.num_heads = model.heads;
  options.head_dim = model.heads > 0 ? model.hidden / model.heads : 0;
  options.causal = model.causal;
  options.layers = layers > 0 ? layers : model.layers;
  options.token_scale = token_scale;
  return options;
}

absl::StatusOr<ExecuteSummary> RunExecuteLoop(
    StepSourceInterface& source, const ExecuteLoopOptions& options) {
  ASSIGN_OR_RETURN(
      std::unique_ptr<TaskExecutor> executor,
      TaskExecutor::Create(ExecutorOptionsFor(
          options.model, options.rank, options.layers, options.token_scale)));
  ASSIGN_OR_RETURN(std::vector<float> gradient, GradientBuffer(options));
  Clock& clock =
      options.clock != nullptr ? *options.clock : *RealClock::Default();
  std::ofstream log;
  if (!options.log_file.empty()) {
    log.open(options.log_file, std::ios::app);
    if (!log.good()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot open --log_file '", options.log_file, "'"));
    }
  }
  ExecuteSummary summary;
  while (options.max_steps == 0 || summary.executed < options.max_steps) {
    absl::StatusOr<NextStepResult> next =
        source.NextStep(summary.last_step, options.step_timeout);
    if (!next.ok()) {
      if (options.stopped && options.stopped()) {
        return absl::CancelledError("stopped by signal");
      }
      return next.status();
    }
    if (next->drained) break;
    const v1::RankStep& step = next->step;
    const absl::Time step_start = clock.Now();
    ASSIGN_OR_RETURN(
        StepExecution done,
        executor->RunStep(step, [&source](const v1::CommGroup& group) {
          return source.Group(group);
        }));
    if (!gradient.empty()) {
      ASSIGN_OR_RETURN(const double sync,
                       SyncGradients(source, clock, gradient));
      done.report.set_sync_seconds(sync);
    }
    if (options.metrics != nullptr) {
      options.metrics->OnStepExecuted(done, clock.Now() - step_start);
    }
    RETURN_IF_ERROR(AppendLog(log, options.log_file, step, done));
    RETURN_IF_ERROR(source.ReportTimings(done.report));
    summary.last_step = step.step();
    ++summary.executed;
  }
  return summary;
}

}  // namespace dcp
