#ifndef DCP_SCHEDULER_EVAL_LEARNED_MODEL_H_
#define DCP_SCHEDULER_EVAL_LEARNED_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_spec.h"
#include "scheduler/eval/evaluation.h"
#include "scheduler/planner/plan.h"

namespace dcp {

/// How `EvaluateLearnedModel` runs: the scenario, the mismatched prior and
/// the noise of the timings the planner learns from.
struct LearnedModelOptions {
  /// The scenario. `evaluation.cluster` is the judge (the reference
  /// cluster) and the source of every simulated timing; its `cost_model`
  /// and `run_baselines` are ignored.
  EvaluationOptions evaluation;
  /// The data sheet the planner starts from (another GPU's).
  ClusterSpec prior;
  /// Log-normal noise of every simulated time (`TimingNoise`), and the seed
  /// of the profile's draws (the online refit's are seeded from it + 1).
  double noise = 0.1;
  uint64_t seed = 1;
  /// Pseudo-observations pulling a fit towards the prior (the scheduler's
  /// --prior_weight default).
  double prior_weight = 1.0;
  /// Steps of online refit to run (each plans the next step of the
  /// scenario, cycling, with the current model).
  int online_steps = 20;
  /// The ledger's cadence (the scheduler's defaults).
  int refit_every = 64;
  int observation_window = 512;
  double refit_error = 0.25;
  /// "Within target": makespan at most this times the perfect model's.
  double target_ratio = 1.02;
};

/// One online step's errors out of sample: the plan's predicted step time,
/// and each of its tasks' predicted times, by the model that planned it
/// (before their timings were reported), against the measured ones.
struct OnlineStepError {
  double step = 0;  // |predicted - measured| / measured
  double task = 0;  // mean over the step's tasks
};

/// Sums over the scenario's steps of the replayed step time, seconds on
/// the judge, for plans made with each model.
struct LearnedModelResult {
  double lower_bound_s = 0;
  /// The judge's own coefficients (`CostModel::FromSpecs` of the judge).
  double perfect_s = 0;
  /// The prior's data sheet alone, its memory and node size included.
  double sheet_s = 0;
  /// Why the sheet planned nothing (then sheet_s is 0), e.g. its memory
  /// holds not even the model's states; empty when it planned.
  std::string sheet_error;
  /// The prior's speed: its data sheet with the judge's HBM, usable
  /// fraction and node size (what a scheduler reads from the devices it
  /// runs on rather than learns). Every fit below starts from it.
  double prior_s = 0;
  /// The prior fitted to a noisy simulated profile (`SimulateProfile`) of
  /// the scheduler's default grid (`CompleteProfileGrid`: lengths to the
  /// window, each on the groups that hold it), its observations, and what
  /// measuring it costs a rank on the judge (`SimulatedProfileSeconds`).
  double profiled_s = 0;
  int profile_rows = 0;
  double profile_seconds = 0;
  /// The same with the former default lengths {256, 1024, 4096}.
  double profiled_short_s = 0;
  int profile_short_rows = 0;
  double profile_short_seconds = 0;
  /// online_s[k]: with the model after k online steps (online_s[0] is
  /// prior_s); online_steps + 1 entries.
  std::vector<double> online_s;
  /// online_errors[k]: the errors of the step planned after k online steps
  /// (online_steps entries).
  std::vector<OnlineStepError> online_errors;
  /// The fewest online steps after which every later entry of online_s is
  /// within target_ratio of perfect_s; -1 when the last one is not.
  int online_steps_to_target = -1;
};

/// Plans the scenario's steps with the perfect model, the prior, the prior
/// fitted to a noisy profile of the judge, and the prior refitted online
/// through the scheduler's own `ReportLedger` and `RefitDriver` from noisy
/// timings of the plans it made, one step at a time; replays them all on
/// the judge. Deterministic for the options.
absl::StatusOr<LearnedModelResult> EvaluateLearnedModel(
    const LengthView& lengths, const LearnedModelOptions& options);

}  // namespace dcp

#endif  // DCP_SCHEDULER_EVAL_LEARNED_MODEL_H_
