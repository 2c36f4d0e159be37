#include "worker_agent/step_execution.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace dcp {

std::string FormatExecutionLog(const v1::RankStep& step,
                               const StepExecution& execution) {
  std::string out;
  double total = 0;
  for (const ExecutedTask& task : execution.tasks) {
    nlohmann::json line = {{"kind", "task"},
                           {"step", step.step()},
                           {"epoch", step.epoch()},
                           {"rank", step.rank()},
                           {"task_index", task.task_index},
                           {"micro_step", task.micro_step},
                           {"group", task.group},
                           {"samples", task.samples},
                           {"tokens", task.scaled_tokens},
                           {"seconds", task.seconds}};
    absl::StrAppend(&out, line.dump(), "\n");
    total += task.seconds;
  }
  nlohmann::json line = {{"kind", "step"},
                         {"step", step.step()},
                         {"epoch", step.epoch()},
                         {"rank", step.rank()},
                         {"tasks", execution.tasks.size()},
                         {"seconds", total},
                         {"sync_seconds", execution.report.sync_seconds()},
                         {"loss", execution.loss},
                         {"grad_norm", execution.grad_norm},
                         {"tokens", execution.tokens}};
  if (!execution.weights_digest.empty()) {
    line["weights"] = execution.weights_digest;
    line["start_weights"] = execution.start_digest;
  }
  absl::StrAppend(&out, line.dump(), "\n");
  return out;
}

}  // namespace dcp
