#ifndef DCP_SCHEDULER_PLANNER_PLANNER_H_
#define DCP_SCHEDULER_PLANNER_PLANNER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "scheduler/planner/cost_model.h"
#include "scheduler/planner/plan.h"

namespace dcp {

/// Which candidates a step's plan is chosen from. The default is what the
/// planner runs with; the others switch a part off, to measure what it adds.
enum class PlanCandidates {
  /// The data-centric search's plan, replaced by a uniform one (every
  /// sequence on groups of one size) where the cost model ranks that faster.
  kSearchAndUniform,
  /// The search's plan only, even where a uniform one is faster.
  kSearchOnly,
  /// The fastest uniform plan only.
  kUniformOnly,
};

/// How the tasks of a step get their recompute ratios (on the 1/layers
/// grid).
enum class RecomputeChoice {
  /// Each task the ratio its memory and cost call for (the default).
  kPerTask,
  /// One ratio for every task of a step: of the least at which every
  /// sequence fits some group and the grid values 1, 2, 4 and 8 steps above
  /// it and 1, the one whose plan the cost model ranks fastest.
  kPerStep,
  /// `PlannerOptions::fixed_recompute` for every task.
  kFixed,
};

/// Knobs of the data-centric planner. Defaults are what the benchmarks use;
/// `candidates`, `recompute_choice`, `even_micro_steps` and `one_group_size`
/// exist for ablations and change no plan at their defaults.
struct PlannerOptions {
  /// Number of ranks (GPUs) in the job. Required.
  int world_size = 0;
  /// A sequence whose task would take longer than this fraction of the mean
  /// per-rank load is split over a larger group. Each value is tried and the
  /// plan with the least predicted step time is kept; more values plan better
  /// and slower.
  std::vector<double> split_thresholds = {0.25, 0.5, 1.0};
  /// Each split threshold is tried with and without filling the groups'
  /// spare memory with short sequences; all variants are estimated and,
  /// when ranks get 16 or more sequences each on average, this many of the
  /// most promising are planned in full (all of them otherwise), skipping
  /// those whose estimate (a bound no dealing of theirs goes below) cannot
  /// beat the best already planned. More plans better and slower.
  int finished_variants = 2;
  /// Ranks examined for each short sequence when dealing (the least loaded
  /// one and the least loaded of large rank ranges without it; at most 32):
  /// more finds better pack fits, fewer plans faster.
  int candidate_ranks = 3;
  /// Improving moves tried against the predicted makespan after dealing.
  int refine_moves = 256;
  /// The candidates a plan is chosen from.
  PlanCandidates candidates = PlanCandidates::kSearchAndUniform;
  RecomputeChoice recompute_choice = RecomputeChoice::kPerTask;
  /// The ratio of every task under `RecomputeChoice::kFixed`, in [0, 1],
  /// rounded up to the 1/layers grid. Full recompute by default.
  double fixed_recompute = 1.0;
  /// Every rank runs the same number of micro-steps (tasks), as with a fixed
  /// gradient accumulation: ranks with fewer get more by splitting packs of
  /// short sequences (their own first, else the largest pack of another
  /// rank, half of whose sequences move). A step whose packs all hold one
  /// sequence may stay uneven.
  bool even_micro_steps = false;
  /// The sequences split over GPUs all use one group size a step (the best
  /// of the sizes, planned one by one); the others stay on one GPU.
  bool one_group_size = false;
};

/// The parts of planning one step, in the order `Planner::PlanStep` first
/// enters them (packing, placement, dealing and refinement repeat once per
/// candidate plan).
enum class PlanPhase {
  kSizing,      ///< sequences sorted; group sizes and recompute of each
  kPacking,     ///< which sequences get groups, filling, estimates
  kPlacement,   ///< groups placed on ranks
  kDealing,     ///< short sequences dealt into packs on ranks
  kRefinement,  ///< moves between the latest and the earliest rank
  kUniform,     ///< the one-group-size candidates
  kEmit,        ///< the chosen draft written out as a StepPlan
  kDone,        ///< planning ended (also after an error)
};
inline constexpr int kNumPlanPhases = static_cast<int>(PlanPhase::kDone);

/// Told each time `Planner::PlanStep` enters a phase, so that a caller can
/// time the phases with its own clock: the planner has none, and with no
/// observer it makes no calls. `Enter(kDone)` ends a step. Called on the
/// planning thread; implementations need no locking of their own.
class PlanPhaseObserver {
 public:
  virtual ~PlanPhaseObserver() = default;
  virtual void Enter(PlanPhase phase) = 0;
};

/// Plans global batches: for every sequence its sequence-parallel group size
/// and recompute ratio, packs of short sequences, placement of groups on
/// ranks (inside a node when they fit) and an execution order so that ranks
/// with different numbers of micro-steps finish together.
///
/// Pure and deterministic: no threads, clocks or randomness; the same inputs
/// give the same plan. Decisions come only from the `CostModel` it is given
/// (never from the reference simulator). Thread-compatible: `PlanStep` is
/// const and may run concurrently; `set_cost_model` may not.
///
///   ASSIGN_OR_RETURN(Planner planner, Planner::Create(model, {.world_size =
///   32})); ASSIGN_OR_RETURN(StepPlan plan, planner.PlanStep(step, samples,
///   lengths));
class Planner {
 public:
  static absl::StatusOr<Planner> Create(CostModel model,
                                        PlannerOptions options);

  /// Plans one global batch of `samples` (ids into `lengths`). Every sample
  /// goes into exactly one task; each gets the loss weight
  /// length / (tokens of the step). FAILED_PRECONDITION when a sequence cannot
  /// fit in memory on any group at any recompute ratio.
  /// `observer`, when given, is told as each phase begins.
  absl::StatusOr<StepPlan> PlanStep(
      int64_t step, absl::Span<const int64_t> samples,
      const LengthView& lengths, PlanPhaseObserver* observer = nullptr) const;

  /// Replaces the cost model (e.g. after a refit from measured timings).
  void set_cost_model(CostModel model) { model_ = std::move(model); }
  const CostModel& cost_model() const { return model_; }
  const PlannerOptions& options() const { return options_; }
  /// The sequence-parallel sizes the planner may use: the divisors of both
  /// the world size and the head count.
  const std::vector<int>& group_sizes() const { return group_sizes_; }

 private:
  Planner(CostModel model, PlannerOptions options, std::vector<int> sizes);

  CostModel model_;
  PlannerOptions options_;
  std::vector<int> group_sizes_;
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_PLANNER_PLANNER_H_
