#ifndef DCP_EXAMPLES_LOCAL_PLANNER_H_
#define DCP_EXAMPLES_LOCAL_PLANNER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_spec.h"
#include "proto/plan.pb.h"
#include "scheduler/planner/cost_model.h"
#include "scheduler/planner/plan.h"
#include "scheduler/planner/planner.h"
#include "scheduler/planner/step_builder.h"

namespace dcp::examples {

/// The job a dcp-train run trains: the trace and the shape of its global
/// batches as dcp-plan and dcp-scheduler read them, and the model.
struct TrainJob {
  /// One length per sample id (the trace). Required, non-empty.
  std::vector<int32_t> lengths;
  /// Context window: longer samples are truncated to it. Positive.
  int64_t window = 0;
  /// Token budget of a step. Positive.
  int64_t tokens_per_step = 0;
  /// Seed of the sample shuffle.
  uint64_t seed = 0;
  /// The step builder's look-ahead that moves samples between steps
  /// (`StepBuilderOptions::lookahead_steps`); 0 = off. It changes which
  /// samples each step holds, so every mode must use the same value.
  int balance_steps = 0;
  /// The model the plans are for (and the one trained): its heads bound
  /// the sequence-parallel group sizes.
  ModelSpec model;
  /// The model whose data-sheet costs on the reference cluster the
  /// planner's cost model starts from (`CostModel::FromSpecs`); `model`
  /// itself when its name is empty. A tiny CPU model's own costs on an H200
  /// are almost all fixed overhead, so the planner keeps each sequence on
  /// one rank (cpu-tiny's, at window 128); a large model's costs (with
  /// `model`'s head counts) make it plan the groups it would plan for that
  /// model.
  ModelSpec cost_model;
  /// Ranks the plans are made for. Positive.
  int world_size = 1;
};

/// The cost model the job's plans start from: `job.cost_model` (or
/// `job.model`) on the reference cluster (`ClusterSpec::H200()`, the
/// scheduler's default) for `job.world_size` ranks.
CostModel InitialCostModel(const TrainJob& job);

/// Plans a job's steps in this process the way dcp-scheduler does: the step
/// builder's batches (dcp-plan's seeded shuffle and token budget; the step
/// builder options that ControlPlane::Start takes from the same fields)
/// planned by the planner with `InitialCostModel(job)`, in the wire form of
/// epoch 0. The scheduler refits its cost model from the ranks' timings, so
/// its later plans may pack and place the same samples differently; the
/// batches, and with them each step's loss, stay the same.
///
/// Thread-compatible; owns the trace.
///
///   ASSIGN_OR_RETURN(auto planner, LocalPlanner::Create(std::move(job)));
///   ASSIGN_OR_RETURN(v1::StepPlan plan, planner->Next());
class LocalPlanner {
 public:
  /// INVALID_ARGUMENT for an empty trace, a non-positive window, budget or
  /// world, a negative look-ahead, or a bad model.
  static absl::StatusOr<std::unique_ptr<LocalPlanner>> Create(TrainJob job);

  LocalPlanner(const LocalPlanner&) = delete;
  LocalPlanner& operator=(const LocalPlanner&) = delete;

  /// The plan of the next step (step 0 first). The planner's error (a
  /// sample that fits no group) otherwise.
  absl::StatusOr<v1::StepPlan> Next();

 private:
  LocalPlanner(std::unique_ptr<const std::vector<int32_t>> lengths,
               LengthView view, StepBuilder builder, Planner planner);

  // On the heap, so that `view_` (and the builder's copy of it) stay valid.
  const std::unique_ptr<const std::vector<int32_t>> lengths_;
  const LengthView view_;
  StepBuilder builder_;
  Planner planner_;
};

}  // namespace dcp::examples

#endif  // DCP_EXAMPLES_LOCAL_PLANNER_H_
