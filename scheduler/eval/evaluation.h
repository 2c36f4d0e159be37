#ifndef DCP_SCHEDULER_EVAL_EVALUATION_H_
#define DCP_SCHEDULER_EVAL_EVALUATION_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_spec.h"
#include "scheduler/eval/baselines.h"
#include "scheduler/eval/simulator.h"
#include "scheduler/planner/cost_model.h"
#include "scheduler/planner/plan.h"
#include "scheduler/planner/planner.h"

namespace dcp {

/// One run of the planner and the baselines over the same steps.
struct EvaluationOptions {
  ModelSpec model;
  ClusterSpec cluster = ClusterSpec::H200();
  int world_size = 0;
  /// Context window: longer sequences are truncated to it.
  int64_t window = 0;
  int64_t tokens_per_step = 0;
  int steps = 20;
  uint64_t seed = 0;
  /// Step look-ahead of the step builder (0 = off).
  int balance_steps = 0;
  /// The planner's knobs; world_size is filled in from above.
  PlannerOptions planner;
  /// The planner's cost model; empty means the analytic model from the
  /// data sheets (`CostModel::FromSpecs`).
  std::optional<CostModel> cost_model;
  bool run_baselines = true;
  /// Monotonic clock in nanoseconds, used only to time planning. Required.
  std::function<int64_t()> now_ns;
};

/// Figures of one planner over all steps, judged on the reference cluster.
struct PlannerFigures {
  std::string name;
  /// Sum over steps of the replayed step time.
  double makespan_s = 0;
  std::vector<double> step_s;
};

/// What `Evaluate` measured.
struct EvaluationResult {
  int steps = 0;
  int64_t tokens = 0;
  int64_t samples = 0;
  /// Sum over steps of the lower bound.
  double lower_bound_s = 0;
  /// Sum over steps of the memory-aware lower bound
  /// (`ReferenceCluster::MemoryAwareLowerBound`); no plan beats it either.
  double memory_bound_s = 0;
  /// Both bounds of each step.
  std::vector<double> lower_bound_step_s;
  std::vector<double> memory_bound_step_s;
  PlannerFigures dcp;
  /// Empty when baselines were not run.
  std::vector<PlannerFigures>
      baselines;  // static_packed, static_balanced, dynamic_cp
  StaticConfig static_packed_config;
  StaticConfig static_balanced_config;
  DynamicCpOptions dynamic_cp_config;
  /// Planning time of each step, milliseconds (the planner only).
  std::vector<double> plan_ms;
  /// The dcp plans, one per step.
  std::vector<StepPlan> plans;
  /// Mean relative error of the planner's predicted step time.
  double prediction_error = 0;
};

/// Where the dcp plans' time goes above the memory-aware bound, seconds
/// summed over the steps: `memory_bound_s` plus the five terms is the
/// makespan. A task is "long" when it holds a sample one GPU cannot hold at
/// r = 0 (it must recompute or be split); its excess is its GPU-seconds of
/// linear, attention and all-to-all work above its samples'
/// `ReferenceCluster::SequenceBound`s, over the world size.
struct BoundGap {
  double long_excess_s = 0;
  double short_excess_s = 0;
  /// All the all-to-all of each class's tasks (over the world size): part
  /// of the excess, less what the bound already counts for samples that
  /// must be split.
  double long_all_to_all_s = 0;
  double short_all_to_all_s = 0;
  /// Every task's per-layer overhead, over the world size.
  double overhead_s = 0;
  /// The last rank's finish above the ranks' mean busy time (idle waits
  /// and uneven load).
  double imbalance_s = 0;
};

/// `BoundGap` of `plans` (which `ReplayStep` must accept).
absl::StatusOr<BoundGap> BreakDownGap(const ReferenceCluster& cluster,
                                      absl::Span<const StepPlan> plans,
                                      const LengthView& lengths);

/// The steps `Evaluate` plans: `options.steps` global batches of
/// `options.tokens_per_step` from a seeded shuffle of `lengths` (the step
/// builder's, with `options.balance_steps` of look-ahead).
absl::StatusOr<std::vector<std::vector<int64_t>>> EvaluationSteps(
    const LengthView& lengths, const EvaluationOptions& options);

/// Forms `steps` steps from a seeded shuffle of `lengths`, plans each with
/// the dcp planner and with every baseline, and replays all of them on the
/// reference cluster. Errors name what failed (a plan the replay rejects is
/// a bug and comes back as INTERNAL).
absl::StatusOr<EvaluationResult> Evaluate(const LengthView& lengths,
                                          const EvaluationOptions& options);

/// The p-th percentile (0..100) of `values` (nearest rank); 0 when empty.
double Percentile(std::vector<double> values, double p);

/// The stats JSON of dcp-plan: steps, makespan_s, lower_bound_s,
/// memory_bound_s, ratio_to_lower_bound, ratio_to_memory_bound,
/// static_packed_s, static_balanced_s, dynamic_cp_s (sums over steps, in
/// seconds on the reference cluster), plan_ms_p50, plan_ms_max and more.
std::string StatsJson(const EvaluationOptions& options,
                      const EvaluationResult& result);

}  // namespace dcp

#endif  // DCP_SCHEDULER_EVAL_EVALUATION_H_
