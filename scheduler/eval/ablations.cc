#include "scheduler/eval/ablations.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "scheduler/eval/simulator.h"

namespace dcp {

int UniformWins(absl::Span<const StepPlan> plans) {
  int n = 0;
  for (const StepPlan& plan : plans) n += plan.origin == PlanOrigin::kUniform;
  return n;
}

std::vector<std::pair<std::string, PlannerOptions>> AblationVariants(
    const PlannerOptions& base) {
  std::vector<std::pair<std::string, PlannerOptions>> variants;
  PlannerOptions o = base;
  o.candidates = PlanCandidates::kSearchOnly;
  variants.emplace_back("dcp-search-only", o);
  o = base;
  o.candidates = PlanCandidates::kUniformOnly;
  variants.emplace_back("dcp-uniform-only", o);
  o = base;
  o.recompute_choice = RecomputeChoice::kPerStep;
  variants.emplace_back("dcp-fixed-recompute", o);
  o = base;
  o.even_micro_steps = true;
  variants.emplace_back("dcp-even-microsteps", o);
  o = base;
  o.one_group_size = true;
  variants.emplace_back("dcp-one-group-size", o);
  return variants;
}

namespace {

// The dcp planner with `planner` on the steps of `options`, no baselines.
absl::StatusOr<EvaluationResult> EvaluateVariant(
    const LengthView& lengths, const EvaluationOptions& options,
    const PlannerOptions& planner, const std::string& name) {
  EvaluationOptions o = options;
  o.planner = planner;
  o.run_baselines = false;
  absl::StatusOr<EvaluationResult> r = Evaluate(lengths, o);
  if (!r.ok()) {
    return absl::Status(r.status().code(),
                        absl::StrCat(name, ": ", r.status().message()));
  }
  r->dcp.name = name;
  return r;
}

}  // namespace

absl::StatusOr<std::vector<AblationFigures>> RunAblations(
    const LengthView& lengths, const EvaluationOptions& options) {
  std::vector<AblationFigures> rows;
  for (const auto& [name, planner] : AblationVariants(options.planner)) {
    ASSIGN_OR_RETURN(EvaluationResult r,
                     EvaluateVariant(lengths, options, planner, name));
    AblationFigures row;
    row.figures = std::move(r.dcp);
    row.uniform_won = UniformWins(r.plans);
    row.steps = r.steps;
    rows.push_back(std::move(row));
  }
  return rows;
}

absl::StatusOr<PaperAblation> RunPaperAblation(
    const LengthView& lengths, const EvaluationOptions& options,
    const StaticConfig& baseline_config) {
  PaperAblation result;
  ASSIGN_OR_RETURN(const std::vector<std::vector<int64_t>> steps,
                   EvaluationSteps(lengths, options));
  const ReferenceCluster cluster(options.cluster, options.model,
                                 options.world_size);
  result.baseline.name =
      absl::StrCat("fixed-sp", baseline_config.group_size,
                   baseline_config.RingDegree() > 1
                       ? absl::StrCat("-u", baseline_config.UlyssesDegree())
                       : std::string(),
                   baseline_config.recompute == 1.0
                       ? std::string("-full-recompute")
                       : absl::StrCat("-r", baseline_config.recompute));
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSIGN_OR_RETURN(const StepPlan plan,
                     PlanStatic(cluster, lengths, static_cast<int64_t>(i),
                                steps[i], baseline_config, /*balanced=*/true));
    absl::StatusOr<StepReport> report = ReplayStep(cluster, plan, lengths);
    if (!report.ok()) {
      return absl::InternalError(absl::StrCat(
          "the fixed baseline produced a plan the reference cluster rejects: ",
          report.status().message()));
    }
    result.baseline.step_s.push_back(report->makespan_s);
    result.baseline.makespan_s += report->makespan_s;
  }

  PlannerOptions intra = options.planner;
  intra.recompute_choice = RecomputeChoice::kFixed;
  intra.fixed_recompute = 1.0;
  intra.even_micro_steps = true;
  PlannerOptions accumulation = intra;
  accumulation.even_micro_steps = false;
  ASSIGN_OR_RETURN(EvaluationResult r_intra,
                   EvaluateVariant(lengths, options, intra, "dcp-intra-step"));
  ASSIGN_OR_RETURN(
      EvaluationResult r_acc,
      EvaluateVariant(lengths, options, accumulation, "dcp+accumulation"));
  ASSIGN_OR_RETURN(
      EvaluationResult r_all,
      EvaluateVariant(lengths, options, options.planner, "dcp+recompute"));
  result.intra_step = std::move(r_intra.dcp);
  result.accumulation = std::move(r_acc.dcp);
  result.recompute = std::move(r_all.dcp);
  result.steps = r_all.steps;
  result.tokens = r_all.tokens;
  result.lower_bound_s = r_all.lower_bound_s;
  result.memory_bound_s = r_all.memory_bound_s;
  return result;
}

}  // namespace dcp
