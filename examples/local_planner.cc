#include "examples/local_planner.h"

#include <utility>

#include "common/status_macros.h"
#include "scheduler/planner/plan_proto.h"

namespace dcp::examples {
namespace {

// What ControlPlane::Start gives its own step builder from the same fields
// of its options.
StepBuilderOptions BatchOptions(const TrainJob& job) {
  StepBuilderOptions options;
  options.tokens_per_step = job.tokens_per_step;
  options.seed = job.seed;
  options.lookahead_steps = job.balance_steps;
  return options;
}

}  // namespace

CostModel InitialCostModel(const TrainJob& job) {
  const ModelSpec& costs =
      job.cost_model.name.empty() ? job.model : job.cost_model;
  return CostModel::FromSpecs(ClusterSpec::H200(), costs, job.world_size);
}

absl::StatusOr<std::unique_ptr<LocalPlanner>> LocalPlanner::Create(
    TrainJob job) {
  if (job.lengths.empty()) {
    return absl::InvalidArgumentError("the length trace is empty");
  }
  if (job.window <= 0 || job.tokens_per_step <= 0 || job.world_size <= 0) {
    return absl::InvalidArgumentError(
        "window, tokens_per_step and world_size must be positive");
  }
  if (job.balance_steps < 0) {
    return absl::InvalidArgumentError("balance_steps must be >= 0");
  }
  RETURN_IF_ERROR(ValidateModelSpec(job.model));
  PlannerOptions options;
  options.world_size = job.world_size;
  if (!job.cost_model.name.empty()) {
    RETURN_IF_ERROR(ValidateModelSpec(job.cost_model));
  }
  ASSIGN_OR_RETURN(Planner planner,
                   Planner::Create(InitialCostModel(job), options));
  auto lengths =
      std::make_unique<const std::vector<int32_t>>(std::move(job.lengths));
  const LengthView view(*lengths, job.window);
  ASSIGN_OR_RETURN(StepBuilder builder,
                   StepBuilder::Create(view, BatchOptions(job)));
  return std::unique_ptr<LocalPlanner>(new LocalPlanner(
      std::move(lengths), view, std::move(builder), std::move(planner)));
}

LocalPlanner::LocalPlanner(std::unique_ptr<const std::vector<int32_t>> lengths,
                           LengthView view, StepBuilder builder,
                           Planner planner)
    : lengths_(std::move(lengths)),
      view_(view),
      builder_(std::move(builder)),
      planner_(std::move(planner)) {}

absl::StatusOr<v1::StepPlan> LocalPlanner::Next() {
  const int64_t step = builder_.steps_emitted();
  ASSIGN_OR_RETURN(std::vector<int64_t> samples, builder_.NextStep());
  ASSIGN_OR_RETURN(StepPlan plan, planner_.PlanStep(step, samples, view_));
  return ToProto(plan, view_, /*epoch=*/0);
}

}  // namespace dcp::examples
