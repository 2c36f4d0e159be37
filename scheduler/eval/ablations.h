#ifndef DCP_SCHEDULER_EVAL_ABLATIONS_H_
#define DCP_SCHEDULER_EVAL_ABLATIONS_H_

// What each part of the dcp planner adds: the planner with one part
// switched off (PlannerOptions' ablation options), and the seed paper's
// ablation (intra-step only, + accumulation, + recompute against a fixed
// sequence-parallel baseline). Every figure is a replay on the reference
// cluster, as `Evaluate`'s. Pure; thread-compatible.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "scheduler/eval/baselines.h"
#include "scheduler/eval/evaluation.h"
#include "scheduler/planner/plan.h"
#include "scheduler/planner/planner.h"

namespace dcp {

/// How many of `plans` the planner took from its uniform candidates.
int UniformWins(absl::Span<const StepPlan> plans);

/// A planner variant and its figures.
struct AblationFigures {
  /// The variant's figures (`figures.name` its row name, e.g.
  /// "dcp-search-only").
  PlannerFigures figures;
  /// Steps whose plan was a uniform candidate, of `steps`.
  int uniform_won = 0;
  int steps = 0;
};

/// The variants of dcp-bench --ablations, each `base` with one part off:
/// dcp-search-only, dcp-uniform-only, dcp-fixed-recompute (one ratio a
/// step), dcp-even-microsteps and dcp-one-group-size.
std::vector<std::pair<std::string, PlannerOptions>> AblationVariants(
    const PlannerOptions& base);

/// Plans and replays the steps of `options` with every variant of
/// `AblationVariants(options.planner)` (the baselines are not run).
///
///   ASSIGN_OR_RETURN(std::vector<AblationFigures> rows,
///                    RunAblations(view, options));
absl::StatusOr<std::vector<AblationFigures>> RunAblations(
    const LengthView& lengths, const EvaluationOptions& options);

/// The seed paper's ablation on the steps of `options`.
struct PaperAblation {
  int steps = 0;
  int64_t tokens = 0;
  double lower_bound_s = 0;
  double memory_bound_s = 0;
  /// A fixed layout: every task on groups of `baseline_config`, the
  /// sequences dealt longest first to the least loaded group
  /// (`PlanStatic`, balanced: a fairer baseline than packs in order, which
  /// at full recompute hold millions of tokens and leave groups idle).
  PlannerFigures baseline;
  /// dcp with one full-recompute ratio and even micro-steps: sequence
  /// parallelism chosen per sequence, nothing else.
  PlannerFigures intra_step;
  /// + accumulation: ranks run as many micro-steps as their load needs.
  PlannerFigures accumulation;
  /// + recompute: each task its own ratio (the default dcp planner).
  PlannerFigures recompute;
};

/// Runs the four rows of `PaperAblation`; the planner rows start from
/// `options.planner`. INVALID_ARGUMENT when `baseline_config` cannot hold
/// the window (see `PlanStatic`).
absl::StatusOr<PaperAblation> RunPaperAblation(
    const LengthView& lengths, const EvaluationOptions& options,
    const StaticConfig& baseline_config);

}  // namespace dcp

#endif  // DCP_SCHEDULER_EVAL_ABLATIONS_H_
