#ifndef DCP_SCHEDULER_EVAL_BASELINES_H_
#define DCP_SCHEDULER_EVAL_BASELINES_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "scheduler/planner/plan.h"
#include "scheduler/eval/simulator.h"

// The baselines the dcp planner is compared with, as their users run them:
// a static layout tuned over Ulysses degree and ring size (USP) and
// Megatron-style dynamic context parallelism (rings of power-of-two size).
// They plan the same steps and are judged the same way, by `ReplayStep` on
// the `ReferenceCluster`. Unlike the planner they read the reference
// cluster's costs directly, which only favours them.
//
// Common rules: a group of size p is an aligned block of ranks
// [k*p, (k+1)*p) within the world, run as u-way Ulysses (u dividing the
// head count and p) inside a ring of c = p / u (docs/COST_MODEL.md, "Hybrid
// groups"); a task whose u is p is emitted as plain Ulysses (`ulysses` 0);
// recompute ratios are multiples of 1/layers; every plan keeps each task's
// memory within the cap. All functions are pure and thread-safe.

namespace dcp {

/// The largest number of tokens per GPU whose memory
/// (`ReferenceCluster::MemoryBytes`) fits the cap at `recompute`; 0 when not
/// even the sharded model states fit.
int64_t MaxTokensPerGpu(const ReferenceCluster& cluster, double recompute);

/// The largest number of tokens a task of `group_size` GPUs can hold at
/// `recompute`: the largest T with MemoryBytes(T / group_size) within the
/// cap, i.e. floor(group_size * max tokens per GPU).
int64_t MaxTokensPerTask(const ReferenceCluster& cluster, int group_size,
                         double recompute);

/// A fixed sequence-parallel configuration: every task uses `group_size`
/// ranks, `ulysses`-way Ulysses inside a ring of group_size / ulysses, at
/// recompute ratio `recompute`. `ulysses` 0 means u = group_size (plain
/// Ulysses, no ring), so `{p, r}` is the Ulysses-only configuration.
struct StaticConfig {
  int group_size = 1;
  double recompute = 0.0;
  /// The Ulysses degree u; 0 for the whole group.
  int ulysses = 0;

  /// u: `ulysses`, or the group size when it is 0.
  int UlyssesDegree() const { return ulysses > 0 ? ulysses : group_size; }
  /// c = p / u, the ring size (1: plain Ulysses).
  int RingDegree() const { return group_size / UlyssesDegree(); }
};

/// The static group shapes allowed on `cluster` (recompute left 0): every
/// group size p dividing the world size, each with every Ulysses degree u
/// dividing the head count and p (`ulysses` = u, never 0). Ordered by p
/// ascending, then u descending, the order `TuneStatic` breaks ties in.
///
///   world 16, 4 heads: (1,1), (2,2), (2,1), (4,4), (4,2), (4,1),
///   (8,4), (8,2), (8,1), (16,4), (16,2), (16,1)   as (p, u)
std::vector<StaticConfig> StaticShapes(const ReferenceCluster& cluster);

/// The ring sizes dynamic CP uses on `cluster`: the powers of two up to the
/// world size, ascending. They need not divide the head count (a ring has
/// u = 1) nor the world size (the blocks past the last whole one idle).
std::vector<int> DynamicCpGroupSizes(const ReferenceCluster& cluster);

/// Plans one step with a static configuration.
///
/// Samples are packed into micro-batches ("packs") of at most
/// C = MaxTokensPerTask(group_size, recompute) tokens run by the W/p groups:
///  - `balanced = false` ("static_packed"): next-fit in the order of
///    `samples`, packs dealt round-robin to the groups in order;
///  - `balanced = true` ("static_balanced"): longest sample first, each
///    sample goes to the group with the least simulated load so far and
///    first-fit into that group's packs (first-fit decreasing per group,
///    longest-processing-time across groups). Dealing whole first-fit
///    decreasing packs instead leaves groups idle whenever a step has fewer
///    packs than groups, and then loses to the in-order variant.
/// Tasks are emitted group by group, each group's packs in order.
///
/// Every task gets the configuration's Ulysses degree (0 when u = p).
///
/// INVALID_ARGUMENT when the group size does not divide the world size, the
/// Ulysses degree (the group size when `ulysses` is 0) does not divide the
/// head count and the group size, the recompute ratio is outside [0, 1], or
/// C is below the context window (the configuration could not run the
/// longest sequence); the message names the configuration, C and the window.
///
///   // 8 GPUs a task: 4-way Ulysses inside a ring of 2.
///   ASSIGN_OR_RETURN(StepPlan plan,
///                    PlanStatic(cluster, lengths, 0, step_samples,
///                               {.group_size = 8, .recompute = 0.25,
///                                .ulysses = 4},
///                               /*balanced=*/true));
absl::StatusOr<StepPlan> PlanStatic(const ReferenceCluster& cluster,
                                    const LengthView& lengths, int64_t step,
                                    absl::Span<const int64_t> samples,
                                    const StaticConfig& config, bool balanced);

/// The outcome of a tuning: the configuration and its total replayed
/// makespan over the tuning steps.
struct TunedStatic {
  StaticConfig config;
  double total_makespan_s = 0;
  /// How many configurations were planned and replayed.
  int configs_tried = 0;
};

/// Which group shapes `TuneStatic` searches.
enum class StaticSearch {
  /// Every shape of `StaticShapes`: Ulysses inside rings (USP).
  kUlyssesAndRing,
  /// Plain Ulysses only (u = p, so p divides the head count as well).
  kUlyssesOnly,
};

/// What a plan's makespan is judged to be, in seconds (`TuneStatic`).
using StepJudge = std::function<double(const StepPlan& plan)>;

/// The "tuned static configuration": the feasible (p, u, r) with the least
/// total makespan of `PlanStatic(..., balanced)` over `steps` (step i gets
/// step number i), each plan replayed on `cluster`, or judged by `judge`
/// when it is set (a cost model of the caller's own: the plans and their
/// feasibility stay `cluster`'s).
///
/// For every shape (p, u) of `StaticShapes` (`search` may keep only u = p)
/// it tries the smallest recompute ratio on the 1/layers grid whose task
/// capacity reaches the context window, plus the grid values 1, 2, 4 and 8
/// steps above it and 1 (more recompute never helps except through fewer,
/// larger packs). Ties go to the smaller p, then the larger u (less ring
/// traffic: at equal p a ring only adds K/V passes and cuts the attention
/// into smaller chunks), then the smaller r. The configuration returned
/// names its u (`ulysses` is never 0). INVALID_ARGUMENT when `steps` is
/// empty or no configuration fits the window (the message names the window
/// and the largest task capacity, that of the whole world with every layer
/// recomputed); a replay error is returned as is.
absl::StatusOr<TunedStatic> TuneStatic(
    const ReferenceCluster& cluster, const LengthView& lengths,
    absl::Span<const std::vector<int64_t>> steps, bool balanced,
    StaticSearch search = StaticSearch::kUlyssesAndRing,
    const StepJudge& judge = nullptr);

/// Megatron-style dynamic context parallelism.
struct DynamicCpOptions {
  /// Recompute ratio of every task, in [0, 1].
  double recompute = 0.0;
  /// Tokens per GPU a task may hold; 0 or more than the memory allows means
  /// the memory limit (`MaxTokensPerGpu` at `recompute`).
  int64_t tokens_per_rank_cap = 0;
};

/// The tokens-per-GPU cap `options` give on `cluster`.
int64_t DynamicCpCap(const ReferenceCluster& cluster,
                     const DynamicCpOptions& options);

/// The ring size dynamic CP gives a sequence of `length` tokens under a
/// per-GPU cap: the next power of two of ceil(length / cap) (at least 1).
/// INVALID_ARGUMENT, naming the length, when that exceeds the largest power
/// of two within the world size (the whole world cannot hold the sequence
/// as a ring of power-of-two size) or the cap is below 1.
absl::StatusOr<int> DynamicCpGroupSize(const ReferenceCluster& cluster,
                                       int64_t length, int64_t cap);

/// Plans one step with dynamic context parallelism.
///
/// Each sample gets a ring of `DynamicCpGroupSize` GPUs (u = 1: context
/// parallelism, no Ulysses, so the size need not divide the head count);
/// samples of ring size 1 are packed first-fit decreasing into packs of at
/// most `cap` tokens, every other sample is a task of its own. Tasks, sorted by simulated cost (largest
/// first), are placed greedily: each goes to the aligned block of its size
/// where it would finish earliest (aligned blocks [k*p, (k+1)*p) within the
/// world; on the reference cluster those of one size differ in cost only by
/// whether they span nodes; ties go to the lowest block). The execution order is the
/// placement order.
///
/// INVALID_ARGUMENT when the options are invalid or the context window
/// needs a ring larger than the largest power of two within the world.
absl::StatusOr<StepPlan> PlanDynamicCp(const ReferenceCluster& cluster,
                                       const LengthView& lengths, int64_t step,
                                       absl::Span<const int64_t> samples,
                                       const DynamicCpOptions& options);

/// The outcome of `TuneDynamicCp`.
struct TunedDynamicCp {
  DynamicCpOptions options;
  double total_makespan_s = 0;
  int configs_tried = 0;
};

/// Dynamic CP with the best recompute ratio and token cap: tries, on the
/// 1/layers grid, the smallest ratio at which a sequence as long as the
/// context window has a ring size (memory cap, no extra cap), plus the
/// grid values 1, 2, 4 and 8 steps above it and 1; for each, the memory cap
/// and half and a quarter of it (where the window still fits); and returns
/// the one with the least total replayed makespan over `steps` (ties: the
/// smaller ratio, then the larger cap).
/// INVALID_ARGUMENT when `steps` is empty or no ratio fits the window.
absl::StatusOr<TunedDynamicCp> TuneDynamicCp(
    const ReferenceCluster& cluster, const LengthView& lengths,
    absl::Span<const std::vector<int64_t>> steps);

}  // namespace dcp

#endif  // DCP_SCHEDULER_EVAL_BASELINES_H_
