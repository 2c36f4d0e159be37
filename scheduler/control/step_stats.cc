#include "scheduler/control/step_stats.h"

#include <algorithm>
#include <numeric>

namespace dcp {

std::vector<double> PredictedRankBusySeconds(const v1::StepPlan& plan,
                                             const CostModel& model,
                                             int world_size) {
  std::vector<double> busy(std::max(world_size, 0), 0.0);
  const int node = std::max(model.gpus_per_node(), 1);
  for (const v1::Task& task : plan.tasks()) {
    if (task.ranks().empty()) continue;
    const bool intra_node =
        task.ranks(0) / node == task.ranks(task.ranks_size() - 1) / node;
    const double seconds = model.TaskSeconds(
        task.ranks_size(), intra_node,
        absl::MakeConstSpan(task.lengths().data(), task.lengths_size()),
        task.recompute(), task.ulysses());
    for (int rank : task.ranks()) {
      if (rank >= 0 && rank < world_size) busy[rank] += seconds;
    }
  }
  return busy;
}

double IdleFraction(absl::Span<const double> rank_busy_seconds) {
  if (rank_busy_seconds.empty()) return 0;
  const double max =
      *std::max_element(rank_busy_seconds.begin(), rank_busy_seconds.end());
  if (!(max > 0)) return 0;
  const double mean =
      std::accumulate(rank_busy_seconds.begin(), rank_busy_seconds.end(), 0.0) /
      static_cast<double>(rank_busy_seconds.size());
  return std::clamp(1.0 - mean / max, 0.0, 1.0);
}

}  // namespace dcp
