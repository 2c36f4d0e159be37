#ifndef DCP_EXAMPLES_TRAIN_BENCHMARK_PLANS_H_
#define DCP_EXAMPLES_TRAIN_BENCHMARK_PLANS_H_

// The plans dcp-train-bench runs: global batches from the planner's step
// builder, each planned twice over the same ranks and samples, by the dcp
// planner and by the tuned static configuration (scheduler/eval/baselines.h's
// PlanStatic, "static_balanced" as dcp-bench runs it, but plain Ulysses
// only: no rings), both on one cost model, the one fitted to the probe.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_spec.h"
#include "proto/plan.pb.h"
#include "scheduler/eval/baselines.h"
#include "scheduler/planner/cost_model.h"
#include "scheduler/planner/plan.h"

namespace dcp::train_benchmark {

struct PlanSetOptions {
  int world_size = 0;
  int64_t tokens_per_step = 0;
  /// Seed of the step builder's shuffle.
  uint64_t seed = 0;
  /// Global batches to plan.
  int steps = 0;
  /// Groups meet under "<session>/e0/g<ranks>".
  std::string session;
};

/// Both plans of every batch, in the wire form with rendezvous prefixes.
struct PlanSet {
  std::vector<v1::StepPlan> dcp;
  std::vector<v1::StepPlan> fixed;  ///< The tuned static plans.
  /// The static configuration the tuning chose, and how many it tried.
  TunedStatic tuned;
  /// Per step, each plan's makespan as `model` predicts it
  /// (`PredictedMakespan`).
  std::vector<double> dcp_predicted_s;
  std::vector<double> fixed_predicted_s;
};

/// What `model` predicts `plan` takes: the most any rank's tasks add up to
/// (each `CostModel::TaskSeconds` of its group size, Ulysses degree,
/// recompute and the samples' lengths), plus the gradient sync.
double PredictedMakespan(const CostModel& model, const StepPlan& plan,
                         const LengthView& lengths, int world_size);

/// Builds `options.steps` batches over `lengths` (StepBuilder, no
/// look-ahead) and plans each with the dcp Planner over `model` and with
/// `PlanStatic(..., balanced)` on `ReferenceCluster(cluster, ...)` at the
/// plain-Ulysses configuration `TuneStatic(..., kUlyssesOnly)` finds best
/// over the same batches when `model` judges the plans
/// (`PredictedMakespan`): the planner and the baseline are judged on the
/// same costs (the fit leaves the memory terms alone, so `cluster` and
/// `model` agree on what fits). Errors of the planner, the tuning or the
/// static plans as they are.
absl::StatusOr<PlanSet> MakePlanSet(const LengthView& lengths,
                                    const CostModel& model,
                                    const ClusterSpec& cluster,
                                    const PlanSetOptions& options);

}  // namespace dcp::train_benchmark

#endif  // DCP_EXAMPLES_TRAIN_BENCHMARK_PLANS_H_
