#ifndef DCP_EXAMPLES_TRAIN_BENCHMARK_PLANS_H_
#define DCP_EXAMPLES_TRAIN_BENCHMARK_PLANS_H_

// The plans dcp-train-bench runs: global batches from the planner's step
// builder, each planned twice over the same ranks and samples, by the dcp
// planner and by the tuned static configuration (scheduler/eval/baselines.h,
// "static_balanced" as dcp-bench runs it, but plain Ulysses only: no rings).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_spec.h"
#include "proto/plan.pb.h"
#include "scheduler/eval/baselines.h"
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
  /// Per step, each plan's makespan replayed on the `cluster` the plans were
  /// made for (ReplayStep): what the cost model predicts.
  std::vector<double> dcp_replayed_s;
  std::vector<double> fixed_replayed_s;
};

/// Builds `options.steps` batches over `lengths` (StepBuilder, no
/// look-ahead) and plans each with the dcp Planner over
/// `CostModel::FromSpecs(cluster, model, world)` and with
/// `PlanStatic(..., balanced)` at the plain-Ulysses configuration
/// `TuneStatic(..., StaticSearch::kUlyssesOnly)` finds best over the same
/// batches on `ReferenceCluster(cluster, model, world)`: the
/// planner and the baseline see the same costs. Errors of the planner, the
/// tuning or a replay as they are.
absl::StatusOr<PlanSet> MakePlanSet(const LengthView& lengths,
                                    const ModelSpec& model,
                                    const ClusterSpec& cluster,
                                    const PlanSetOptions& options);

}  // namespace dcp::train_benchmark

#endif  // DCP_EXAMPLES_TRAIN_BENCHMARK_PLANS_H_
