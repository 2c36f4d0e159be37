#include "scheduler/eval/learned_model.h"

#include <algorithm>
#include <cmath>
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
// Returns the step's errors out of sample: its predicted time, and each
// task's under `model` (which planned it), against the measured ones.
OnlineStepError ReportStep(const ReferenceCluster& judge, const StepPlan& plan,
                           const CostModel& model, const LengthView& lengths,
                           int64_t completed_steps, TimingNoise& noise,
                           ReportLedger& ledger, RefitDriver& refits) {
  std::vector<TaskObservation> obs =
      SimulateTaskTimings(judge, plan, lengths, noise);
  OnlineStepError error;
  error.task = model.MeanRelativeError(obs);
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
  error.step = std::abs(step.predicted_seconds - step.measured_seconds) /
               step.measured_seconds;
  ledger.AddObservations(std::move(obs), completed_steps);
  ledger.AddCompletedStep(step);
  refits.RunDue();
  return error;
}

// The online refit: the prior, then the ledger's model after each step of
// reports; result.online_s[k] is the scenario's makespan with the model
// after k steps, online_errors[k] the errors of the k-th step it planned.
absl::Status OnlineRefit(const LengthView& lengths,
                         const LearnedModelOptions& options,
                         const CostModel& prior,
                         const std::vector<std::vector<int64_t>>& steps,
                         LearnedModelResult& result) {
  const EvaluationOptions& ev = options.evaluation;
  const ReferenceCluster judge(ev.cluster, ev.model, ev.world_size);
  ReportLedgerOptions lo{prior, options.observation_window,
                         options.refit_every};
  lo.refit_error = options.refit_error;
  ReportLedger ledger(lo);
  RefitDriver refits(prior, options.prior_weight, &ledger, nullptr);
  TimingNoise noise(options.noise, options.seed + 1);
  PlannerOptions po = ev.planner;
  po.world_size = ev.world_size;
  std::vector<double>& out = result.online_s;
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
    result.online_errors.push_back(ReportStep(judge, plan, model, lengths,
                                              k + 1, noise, ledger, refits));
  }
  return absl::OkStatus();
}

// `speed`'s figures with `memory`'s HBM, usable fraction and node size.
ClusterSpec SpeedOf(ClusterSpec speed, const ClusterSpec& memory) {
  speed.hbm_bytes = memory.hbm_bytes;
  speed.usable_fraction = memory.usable_fraction;
  speed.gpus_per_node = memory.gpus_per_node;
  return speed;
}

// The scenario planned with `prior` fitted to a simulated profile.
struct ProfiledPlan {
  double makespan_s = 0;
  int rows = 0;
  double profile_seconds = 0;
};

absl::StatusOr<ProfiledPlan> PlanWithProfile(
    const LengthView& lengths, const LearnedModelOptions& options,
    const ReferenceCluster& judge, const CostModel& prior,
    const SimulatedProfileOptions& profile_options) {
  const std::vector<TaskObservation> profile =
      SimulateProfile(judge, prior, profile_options);
  ASSIGN_OR_RETURN(CostModel fitted, prior.Fit(profile, options.prior_weight));
  ASSIGN_OR_RETURN(EvaluationResult r,
                   PlanWith(lengths, options.evaluation, std::move(fitted)));
  ProfiledPlan out;
  out.makespan_s = r.dcp.makespan_s;
  out.rows = static_cast<int>(profile.size());
  out.profile_seconds = SimulatedProfileSeconds(judge, prior, profile_options);
  return out;
}

// The profiled figures of `result`: the prior fitted to the default grid's
// profile, and to the former grid's (lengths 256, 1024, 4096).
absl::Status PlanWithProfiles(const LengthView& lengths,
                              const LearnedModelOptions& options,
                              const ReferenceCluster& judge,
                              const CostModel& prior,
                              LearnedModelResult& result) {
  SimulatedProfileOptions po;
  po.noise = options.noise;
  po.seed = options.seed;
  po.window = options.evaluation.window;
  ASSIGN_OR_RETURN(ProfiledPlan full,
                   PlanWithProfile(lengths, options, judge, prior, po));
  result.profiled_s = full.makespan_s;
  result.profile_rows = full.rows;
  result.profile_seconds = full.profile_seconds;
  po.lengths = {256, 1024, 4096};
  ASSIGN_OR_RETURN(ProfiledPlan short_grid,
                   PlanWithProfile(lengths, options, judge, prior, po));
  result.profiled_short_s = short_grid.makespan_s;
  result.profile_short_rows = short_grid.rows;
  result.profile_short_seconds = short_grid.profile_seconds;
  return absl::OkStatus();
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
  LearnedModelResult result;
  ASSIGN_OR_RETURN(EvaluationResult p, PlanWith(lengths, ev, perfect));
  result.perfect_s = p.dcp.makespan_s;
  result.lower_bound_s = p.lower_bound_s;
  ASSIGN_OR_RETURN(EvaluationResult q, PlanWith(lengths, ev, prior));
  result.prior_s = q.dcp.makespan_s;
  // A sheet whose memory cannot hold the model (a CPU host's budget under
  // a GPU job's model) plans nothing; every other figure still stands.
  absl::StatusOr<EvaluationResult> h = PlanWith(lengths, ev, sheet);
  if (h.ok()) {
    result.sheet_s = h->dcp.makespan_s;
  } else if (absl::IsFailedPrecondition(h.status())) {
    result.sheet_error = std::string(h.status().message());
  } else {
    return h.status();
  }
  RETURN_IF_ERROR(PlanWithProfiles(lengths, options, judge, prior, result));

  StepBuilderOptions so;
  so.tokens_per_step = ev.tokens_per_step;
  so.seed = ev.seed;
  so.lookahead_steps = ev.balance_steps;
  ASSIGN_OR_RETURN(std::vector<std::vector<int64_t>> steps,
                   BuildSteps(lengths, so, ev.steps));
  RETURN_IF_ERROR(OnlineRefit(lengths, options, prior, steps, result));
  result.online_steps_to_target =
      StepsToTarget(result.online_s, options.target_ratio * result.perfect_s);
  return result;
}

}  // namespace dcp
