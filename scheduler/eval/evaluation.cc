#include "scheduler/eval/evaluation.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "scheduler/eval/simulator.h"
#include "scheduler/planner/step_builder.h"

namespace dcp {

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / 100.0 * values.size());
  const size_t index = static_cast<size_t>(
      std::clamp(rank, 1.0, static_cast<double>(values.size())));
  return values[index - 1];
}

namespace {

absl::Status AsInternal(const absl::Status& s, const std::string& who) {
  return absl::InternalError(absl::StrCat(
      who, " produced a plan the reference cluster rejects: ", s.message()));
}

// Plans every step with `planner` (timed by `now_ns`) and replays it: the
// dcp figures, both bounds and the prediction error of `result`.
absl::Status RunDcp(Planner& planner, const ReferenceCluster& cluster,
                    const LengthView& lengths,
                    const std::vector<std::vector<int64_t>>& steps,
                    const std::function<int64_t()>& now_ns,
                    EvaluationResult& result) {
  result.dcp.name = "dcp";
  double error_sum = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const int64_t start = now_ns();
    ASSIGN_OR_RETURN(StepPlan plan, planner.PlanStep(static_cast<int64_t>(i),
                                                     steps[i], lengths));
    result.plan_ms.push_back((now_ns() - start) / 1e6);
    absl::StatusOr<StepReport> report = ReplayStep(cluster, plan, lengths);
    if (!report.ok()) return AsInternal(report.status(), "the dcp planner");
    result.dcp.step_s.push_back(report->makespan_s);
    result.dcp.makespan_s += report->makespan_s;
    result.lower_bound_s += report->lower_bound_s;
    result.memory_bound_s += report->memory_bound_s;
    result.lower_bound_step_s.push_back(report->lower_bound_s);
    result.memory_bound_step_s.push_back(report->memory_bound_s);
    result.tokens += report->tokens;
    result.samples += static_cast<int64_t>(steps[i].size());
    error_sum += std::abs(plan.predicted_makespan_s - report->makespan_s) /
                 report->makespan_s;
    result.plans.push_back(std::move(plan));
  }
  result.prediction_error = error_sum / steps.size();
  return absl::OkStatus();
}

// A baseline's figures: `plan_step(i)` for every step, replayed.
absl::StatusOr<PlannerFigures> ReplayBaseline(
    const std::string& name, const ReferenceCluster& cluster,
    const LengthView& lengths, size_t steps,
    const std::function<absl::StatusOr<StepPlan>(int64_t)>& plan_step) {
  PlannerFigures f;
  f.name = name;
  for (size_t i = 0; i < steps; ++i) {
    ASSIGN_OR_RETURN(StepPlan plan, plan_step(static_cast<int64_t>(i)));
    absl::StatusOr<StepReport> report =
        ReplayStep(cluster, plan, lengths, StepBounds::kWithout);
    if (!report.ok()) return AsInternal(report.status(), name);
    f.step_s.push_back(report->makespan_s);
    f.makespan_s += report->makespan_s;
  }
  return f;
}

// The tuned static (packed, balanced) and dynamic CP baselines.
absl::Status RunBaselines(const ReferenceCluster& cluster,
                          const LengthView& lengths,
                          const std::vector<std::vector<int64_t>>& steps,
                          EvaluationResult& result) {
  for (bool balanced : {false, true}) {
    ASSIGN_OR_RETURN(TunedStatic tuned,
                     TuneStatic(cluster, lengths, steps, balanced));
    (balanced ? result.static_balanced_config : result.static_packed_config) =
        tuned.config;
    ASSIGN_OR_RETURN(
        PlannerFigures f,
        ReplayBaseline(balanced ? "static_balanced" : "static_packed", cluster,
                       lengths, steps.size(), [&](int64_t i) {
                         return PlanStatic(cluster, lengths, i, steps[i],
                                           tuned.config, balanced);
                       }));
    result.baselines.push_back(std::move(f));
  }
  ASSIGN_OR_RETURN(TunedDynamicCp tuned_cp,
                   TuneDynamicCp(cluster, lengths, steps));
  result.dynamic_cp_config = tuned_cp.options;
  ASSIGN_OR_RETURN(
      PlannerFigures cp,
      ReplayBaseline("dynamic_cp", cluster, lengths, steps.size(),
                     [&](int64_t i) {
                       return PlanDynamicCp(cluster, lengths, i, steps[i],
                                            tuned_cp.options);
                     }));
  result.baselines.push_back(std::move(cp));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::vector<int64_t>>> EvaluationSteps(
    const LengthView& lengths, const EvaluationOptions& options) {
  StepBuilderOptions step_options;
  step_options.tokens_per_step = options.tokens_per_step;
  step_options.seed = options.seed;
  step_options.lookahead_steps = options.balance_steps;
  return BuildSteps(lengths, step_options, options.steps);
}

absl::StatusOr<EvaluationResult> Evaluate(const LengthView& lengths,
                                          const EvaluationOptions& options) {
  if (!options.now_ns) {
    return absl::InvalidArgumentError("Evaluate needs a clock (now_ns)");
  }
  if (options.steps <= 0) {
    return absl::InvalidArgumentError("steps must be positive");
  }
  RETURN_IF_ERROR(ValidateModelSpec(options.model));
  ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> steps,
                   EvaluationSteps(lengths, options));

  ReferenceCluster cluster(options.cluster, options.model, options.world_size);
  PlannerOptions planner_options = options.planner;
  planner_options.world_size = options.world_size;
  CostModel model = options.cost_model.has_value()
                        ? *options.cost_model
                        : CostModel::FromSpecs(options.cluster, options.model,
                                               options.world_size);
  ASSIGN_OR_RETURN(Planner planner, Planner::Create(model, planner_options));

  EvaluationResult result;
  result.steps = static_cast<int>(steps.size());
  RETURN_IF_ERROR(
      RunDcp(planner, cluster, lengths, steps, options.now_ns, result));
  if (options.run_baselines) {
    RETURN_IF_ERROR(RunBaselines(cluster, lengths, steps, result));
  }
  return result;
}

absl::StatusOr<BoundGap> BreakDownGap(const ReferenceCluster& cluster,
                                      absl::Span<const StepPlan> plans,
                                      const LengthView& lengths) {
  BoundGap gap;
  const double world = cluster.world_size();
  const double cap = cluster.cluster().MemoryCap();
  std::vector<int64_t> seq;
  for (const StepPlan& plan : plans) {
    ASSIGN_OR_RETURN(const StepReport report,
                     ReplayStep(cluster, plan, lengths));
    double busy = 0;
    for (double b : report.rank_busy_s) busy += b;
    gap.imbalance_s += report.makespan_s - report.sync_s - busy / world;
    for (const TaskPlan& task : plan.tasks) {
      seq.clear();
      double bound = 0;
      bool long_task = false;
      for (int64_t id : task.samples) {
        seq.push_back(lengths[id]);
        bound += cluster.SequenceBound(lengths[id]);
        long_task |= cluster.MemoryBytes(lengths[id], 0.0) > cap;
      }
      const ReferenceCluster::TaskCost c =
          cluster.Cost(task.ranks, seq, task.recompute, task.ulysses);
      const double p = static_cast<double>(task.ranks.size());
      const double excess = (p * (c.total_s - c.overhead_s) - bound) / world;
      const double a2a = p * c.all_to_all_s / world;
      (long_task ? gap.long_excess_s : gap.short_excess_s) += excess;
      (long_task ? gap.long_all_to_all_s : gap.short_all_to_all_s) += a2a;
      gap.overhead_s += p * c.overhead_s / world;
    }
  }
  return gap;
}

std::string StatsJson(const EvaluationOptions& options,
                      const EvaluationResult& result) {
  nlohmann::json j;
  j["model"] = options.model.name;
  j["world_size"] = options.world_size;
  j["window"] = options.window;
  j["tokens_per_step"] = options.tokens_per_step;
  j["seed"] = options.seed;
  j["steps"] = result.steps;
  j["samples"] = result.samples;
  j["tokens"] = result.tokens;
  j["makespan_s"] = result.dcp.makespan_s;
  j["lower_bound_s"] = result.lower_bound_s;
  j["ratio_to_lower_bound"] = result.dcp.makespan_s / result.lower_bound_s;
  j["memory_bound_s"] = result.memory_bound_s;
  j["ratio_to_memory_bound"] = result.dcp.makespan_s / result.memory_bound_s;
  j["tokens_per_s_per_gpu"] =
      result.tokens / result.dcp.makespan_s / options.world_size;
  for (const PlannerFigures& b : result.baselines) {
    j[b.name + "_s"] = b.makespan_s;
    j["speedup_over_" + b.name] = b.makespan_s / result.dcp.makespan_s;
  }
  if (!result.baselines.empty()) {
    j["static_packed_config"] = {
        {"group_size", result.static_packed_config.group_size},
        {"ulysses", result.static_packed_config.UlyssesDegree()},
        {"recompute", result.static_packed_config.recompute}};
    j["static_balanced_config"] = {
        {"group_size", result.static_balanced_config.group_size},
        {"ulysses", result.static_balanced_config.UlyssesDegree()},
        {"recompute", result.static_balanced_config.recompute}};
    j["dynamic_cp_config"] = {
        {"recompute", result.dynamic_cp_config.recompute},
        {"tokens_per_rank_cap", result.dynamic_cp_config.tokens_per_rank_cap}};
  }
  j["plan_ms_p50"] = Percentile(result.plan_ms, 50);
  j["plan_ms_max"] = Percentile(result.plan_ms, 100);
  j["prediction_error"] = result.prediction_error;
  return j.dump(2);
}

}  // namespace dcp
