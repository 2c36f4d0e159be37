#include "examples/train_benchmark_plans.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "scheduler/eval/simulator.h"
#include "scheduler/planner/cost_model.h"
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

absl::StatusOr<PlanSet> MakePlanSet(const LengthView& lengths,
                                    const ModelSpec& model,
                                    const ClusterSpec& cluster,
                                    const PlanSetOptions& options) {
  StepBuilderOptions builder;
  builder.tokens_per_step = options.tokens_per_step;
  builder.seed = options.seed;
  ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> batches,
                   BuildSteps(lengths, builder, options.steps));
  PlannerOptions planner_options;
  planner_options.world_size = options.world_size;
  ASSIGN_OR_RETURN(
      Planner planner,
      Planner::Create(CostModel::FromSpecs(cluster, model, options.world_size),
                      planner_options));
  const ReferenceCluster reference(cluster, model, options.world_size);
  PlanSet out;
  // Plain Ulysses only (u = p): the static plan is trained for real, one
  // Ulysses size for the whole run; on the default 4 ranks every group size
  // divides the model's 4 heads, so the hybrid shapes would only trade
  // all-to-alls for ring passes.
  ASSIGN_OR_RETURN(out.tuned, TuneStatic(reference, lengths, batches,
                                         /*balanced=*/true,
                                         StaticSearch::kUlyssesOnly));
  for (size_t i = 0; i < batches.size(); ++i) {
    const int64_t step = static_cast<int64_t>(i);
    ASSIGN_OR_RETURN(StepPlan dcp, planner.PlanStep(step, batches[i], lengths));
    ASSIGN_OR_RETURN(StepPlan fixed,
                     PlanStatic(reference, lengths, step, batches[i],
                                out.tuned.config, /*balanced=*/true));
    ASSIGN_OR_RETURN(StepReport dcp_report,
                     ReplayStep(reference, dcp, lengths));
    ASSIGN_OR_RETURN(StepReport fixed_report,
                     ReplayStep(reference, fixed, lengths));
    out.dcp_replayed_s.push_back(dcp_report.makespan_s);
    out.fixed_replayed_s.push_back(fixed_report.makespan_s);
    out.dcp.push_back(ToWire(dcp, lengths, options.session));
    out.fixed.push_back(ToWire(fixed, lengths, options.session));
  }
  return out;
}

}  // namespace dcp::train_benchmark
