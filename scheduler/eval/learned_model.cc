#include "scheduler/eval/learned_model.h"

#include <algorithm>
#include <utility>

#include "common/status_macros.h"
#include "scheduler/control/refit_driver.h"
#include "scheduler/control/report_ledger.h"
#include "scheduler/eval/simulated_profile.h"
#include "scheduler/eval/simulator.h"
#include "scheduler/planner/planner.h"
#include "scheduler/planner/step_builder.h"

namespace dcp {
namespace {

// The scenario's steps planned with `model`, replayed on the judge.
absl::StatusOr<EvaluationResult> PlanWith(const LengthView& lengths,
                                          const EvaluationOptions& base,
                                          CostModel model) {
  EvaluationOptions o = base;
  o.cost_model = std::move(model);
  o.run_baselines = false;
  return Evaluate(lengths, o);
}

// One online step: `plan` ran on the judge; its noisy timings go to the
// ledger as the agents' reports would, and the refit due (if any) runs.
void ReportStep(const ReferenceCluster& judge, const StepPlan& plan,
                const LengthView& lengths, int64_t completed_steps,
                TimingNoise& noise, ReportLedger& ledger, RefitDriver& refits) {
  std::vector<TaskObservation> obs =
      SimulateTaskTimings(judge, plan, lengths, noise);
  std::vector<double> busy(judge.world_size(), 0.0);
  for (size_t i = 0; i < obs.size(); ++i) {
    for (int r : plan.tasks[i].ranks) busy[r] += obs[i].seconds;
  }
  MeasuredStep step;
  step.predicted_seconds = plan.predicted_makespan_s;
  step.max_busy_seconds = *std::max_element(busy.begin(), busy.end());
  step.measured_seconds =
      step.max_busy_seconds + judge.SyncSeconds() * noise.Factor();
  step.sync_reported = true;
  ledger.AddObservations(std::move(obs), completed_steps);
  ledger.AddCompletedStep(step);
  refits.RunDue();
}

// The online refit: the prior, then the ledger's model after each step of
// reports; out[k] is the scenario's makespan with the model after k steps.
absl::StatusOr<std::vector<double>> OnlineRefit(
    const LengthView& lengths, const LearnedModelOptions& options,
    const CostModel& prior, const std::vector<std::vector<int64_t>>& steps) {
  const EvaluationOptions& ev = options.evaluation;
  const ReferenceCluster judge(ev.cluster, ev.model, ev.world_size);
  ReportLedgerOptions lo{prior, options.observation_window,
                         options.refit_every};
  ReportLedger ledger(lo);
  RefitDriver refits(prior, options.prior_weight, &ledger, nullptr);
  TimingNoise noise(options.noise, options.seed + 1);
  PlannerOptions po = ev.planner;
  po.world_size = ev.world_size;
  std::vector<double> out;
  CostModel model = prior;
  int64_t version = 0;
  for (int k = 0; k <= options.online_steps; ++k) {
    if (std::optional<CostModel> m = ledger.ModelIfNewer(&version)) model = *m;
    ASSIGN_OR_RETURN(EvaluationResult r, PlanWith(lengths, ev, model));
    out.push_back(r.dcp.makespan_s);
    if (k == options.online_steps) break;
    ASSIGN_OR_RETURN(Planner planner, Planner::Create(model, po));
    const size_t i = static_cast<size_t>(k) % steps.size();
    ASSIGN_OR_RETURN(StepPlan plan, planner.PlanStep(k, steps[i], lengths));
    ReportStep(judge, plan, lengths, k + 1, noise, ledger, refits);
  }
  return out;
}

// `speed`'s figures with `memory`'s HBM, usable fraction and node size.
ClusterSpec SpeedOf(ClusterSpec speed, const ClusterSpec& memory) {
  speed.hbm_bytes = memory.hbm_bytes;
  speed.usable_fraction = memory.usable_fraction;
  speed.gpus_per_node = memory.gpus_per_node;
  return speed;
}

int StepsToTarget(const std::vector<double>& online, double limit) {
  int first = -1;
  for (int k = static_cast<int>(online.size()) - 1; k >= 0; --k) {
    if (online[k] > limit) break;
    first = k;
  }
  return first;
}

}  // namespace

absl::StatusOr<LearnedModelResult> EvaluateLearnedModel(
    const LengthView& lengths, const LearnedModelOptions& options) {
  const EvaluationOptions& ev = options.evaluation;
  const ReferenceCluster judge(ev.cluster, ev.model, ev.world_size);
  const CostModel perfect =
      CostModel::FromSpecs(ev.cluster, ev.model, ev.world_size);
  const CostModel sheet =
      CostModel::FromSpecs(options.prior, ev.model, ev.world_size);
  const CostModel prior = CostModel::FromSpecs(
      SpeedOf(options.prior, ev.cluster), ev.model, ev.world_size);
  SimulatedProfileOptions po;
  po.noise = options.noise;
  po.seed = options.seed;
  const std::vector<TaskObservation> profile = SimulateProfile(judge, po);
  ASSIGN_OR_RETURN(CostModel profiled,
                   prior.Fit(profile, options.prior_weight));

  LearnedModelResult result;
  result.profile_rows = static_cast<int>(profile.size());
  ASSIGN_OR_RETURN(EvaluationResult p, PlanWith(lengths, ev, perfect));
  result.perfect_s = p.dcp.makespan_s;
  result.lower_bound_s = p.lower_bound_s;
  ASSIGN_OR_RETURN(EvaluationResult q, PlanWith(lengths, ev, prior));
  result.prior_s = q.dcp.makespan_s;
  ASSIGN_OR_RETURN(EvaluationResult h, PlanWith(lengths, ev, sheet));
  result.sheet_s = h.dcp.makespan_s;
  ASSIGN_OR_RETURN(EvaluationResult f, PlanWith(lengths, ev, profiled));
  result.profiled_s = f.dcp.makespan_s;
  po.lengths = ProfileLengthsUpTo(ev.window);
  const std::vector<TaskObservation> long_profile = SimulateProfile(judge, po);
  result.profile_window_rows = static_cast<int>(long_profile.size());
  ASSIGN_OR_RETURN(CostModel profiled_window,
                   prior.Fit(long_profile, options.prior_weight));
  ASSIGN_OR_RETURN(EvaluationResult w, PlanWith(lengths, ev, profiled_window));
  result.profiled_window_s = w.dcp.makespan_s;

  StepBuilderOptions so;
  so.tokens_per_step = ev.tokens_per_step;
  so.seed = ev.seed;
  so.lookahead_steps = ev.balance_steps;
  ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> steps,
                   BuildSteps(lengths, so, ev.steps));
  ASSIGN_OR_RETURN(result.online_s,
                   OnlineRefit(lengths, options, prior, steps));
  result.online_steps_to_target =
      StepsToTarget(result.online_s, options.target_ratio * result.perfect_s);
  return result;
}

}  // namespace dcp
