#include "examples/train_benchmark_plans.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "scheduler/planner/plan_proto.h"
#include "scheduler/planner/planner.h"
#include "scheduler/planner/step_builder.h"

namespace dcp::train_benchmark {
namespace {

// The wire form a scheduler would send: every group gets the prefix its
// members meet under. Groups of the same ranks get the same prefix in every
// step and both plan kinds, so a rank forms each group once.
v1::StepPlan ToWire(const StepPlan& plan, const LengthView& lengths,
                    const std::string& session) {
  v1::StepPlan wire = ToProto(plan, lengths, /*epoch=*/0);
  for (v1::CommGroup& group : *wire.mutable_groups()) {
    group.set_rendezvous_prefix(
        absl::StrCat(session, "/e0/g", absl::StrJoin(group.ranks(), "-")));
  }
  return wire;
}

}  // namespace

double PredictedMakespan(const CostModel& model, const StepPlan& plan,
                         const LengthView& lengths, int world_size) {
  std::vector<double> busy(world_size, 0);
  for (const TaskPlan& task : plan.tasks) {
    std::vector<int64_t> task_lengths;
    for (int64_t sample : task.samples) task_lengths.push_back(lengths[sample]);
    const double seconds =
        model.TaskSeconds(static_cast<int>(task.ranks.size()),
                          /*intra_node=*/true, task_lengths, task.recompute,
                          task.ulysses);
    for (int r : task.ranks) busy[r] += seconds;
  }
  return *std::max_element(busy.begin(), busy.end()) + model.SyncSeconds();
}

absl::StatusOr<PlanSet> MakePlanSet(const LengthView& lengths,
                                    const CostModel& model,
                                    const ClusterSpec& cluster,
                                    const PlanSetOptions& options) {
  StepBuilderOptions builder;
  builder.tokens_per_step = options.tokens_per_step;
  builder.seed = options.seed;
  ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> batches,
                   BuildSteps(lengths, builder, options.steps));
  PlannerOptions planner_options;
  planner_options.world_size = options.world_size;
  ASSIGN_OR_RETURN(Planner planner, Planner::Create(model, planner_options));
  const ReferenceCluster reference(cluster, model.model(),
                                   options.world_size);
  PlanSet out;
  ASSIGN_OR_RETURN(
      out.tuned,
      TuneStatic(reference, lengths, batches, /*balanced=*/true,
                 StaticSearch::kUlyssesOnly, [&](const StepPlan& plan) {
                   return PredictedMakespan(model, plan, lengths,
                                            options.world_size);
                 }));
  for (size_t i = 0; i < batches.size(); ++i) {
    const int64_t step = static_cast<int64_t>(i);
    ASSIGN_OR_RETURN(StepPlan dcp, planner.PlanStep(step, batches[i], lengths));
    ASSIGN_OR_RETURN(StepPlan fixed,
                     PlanStatic(reference, lengths, step, batches[i],
                                out.tuned.config, /*balanced=*/true));
    out.dcp_predicted_s.push_back(
        PredictedMakespan(model, dcp, lengths, options.world_size));
    out.fixed_predicted_s.push_back(
        PredictedMakespan(model, fixed, lengths, options.world_size));
    out.dcp.push_back(ToWire(dcp, lengths, options.session));
    out.fixed.push_back(ToWire(fixed, lengths, options.session));
  }
  return out;
}

}  // namespace dcp::train_benchmark
