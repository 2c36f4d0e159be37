#ifndef DCP_SCHEDULER_EVAL_SIMULATOR_H_
#define DCP_SCHEDULER_EVAL_SIMULATOR_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model_spec.h"
#include "scheduler/planner/plan.h"

namespace dcp {

/// The reference cluster model of docs/COST_MODEL.md, implemented exactly.
///
/// This is the ground truth every plan-quality figure comes from; the planner
/// never uses it to make decisions (it has its own `CostModel`). Immutable
/// after construction, so safe to share between threads.
///
///   ReferenceCluster cluster(ClusterSpec::H200(), *BuiltinModel("llama3-8b"),
///   32); absl::StatusOr<StepReport> r = ReplayStep(cluster, plan, lengths);
class ReferenceCluster {
 public:
  ReferenceCluster(ClusterSpec cluster, ModelSpec model, int world_size);

  /// Time components of one task, in seconds, and its memory per GPU.
  struct TaskCost {
    double linear_s = 0;
    double attention_s = 0;
    /// The Ulysses all-to-alls (u > 1).
    double all_to_all_s = 0;
    /// The ring's K/V passes (c > 1). They overlap the attention they feed,
    /// so only what exceeds `attention_s` adds to `total_s` (all of them on
    /// a cluster whose passes do not overlap: `AttentionWithRing`).
    double ring_s = 0;
    double overhead_s = 0;
    /// linear + AttentionWithRing(attention, ring) + all-to-all + overhead.
    double total_s = 0;
    double memory_bytes = 0;
  };

  /// What a task's cost depends on in its ranks: their number and which
  /// links its all-to-all and its ring use.
  struct GroupLinks {
    int size = 0;
    bool intra_node = true;          ///< IntraNode(ranks)
    bool ulysses_intra_node = true;  ///< UlyssesIntraNode(ranks, ulysses)
  };
  GroupLinks LinksOf(absl::Span<const int> ranks, int ulysses = 0) const;

  /// Cost of a task run by `ranks` over sequences of the given (already
  /// truncated) lengths with recompute ratio `recompute`, as `ulysses`-way
  /// Ulysses (0: the whole group) inside a ring of `ranks.size() / ulysses`.
  /// Precondition: `ulysses` is 0 or divides `ranks.size()` (`ReplayStep`
  /// checks plans for it).
  TaskCost Cost(absl::Span<const int> ranks,
                absl::Span<const int64_t> seq_lengths, double recompute,
                int ulysses = 0) const {
    return CostOn(LinksOf(ranks, ulysses), seq_lengths, recompute, ulysses);
  }
  /// The same on a group given by its links (`LinksOf` its ranks, with the
  /// same `ulysses`): for pricing many tasks on one group.
  TaskCost CostOn(const GroupLinks& group,
                  absl::Span<const int64_t> seq_lengths, double recompute,
                  int ulysses = 0) const;

  /// Per-GPU memory of a task with `tokens_per_gpu` tokens on each GPU.
  double MemoryBytes(double tokens_per_gpu, double recompute) const;

  /// Gradient synchronisation at the end of every step.
  double SyncSeconds() const;

  /// The lower bound of a step over sequences of these lengths.
  double LowerBound(absl::Span<const int64_t> seq_lengths) const;

  /// The memory-aware lower bound of docs/COST_MODEL.md: every sequence at
  /// the least, over the groups p = u * c <= W (u dividing the heads) and
  /// the recompute ratios r at which s / p tokens fit a GPU, of its linear
  /// and attention work (the linear work at the GEMM efficiency of the most
  /// tokens per GPU that fit the memory cap at r, the attention at that of
  /// chunks of s / c tokens) plus, for u > 1, the Ulysses all-to-all volume
  /// of its tokens at the faster link; the ring is charged nothing (it may
  /// hide behind the task's attention); then perfect balance, no latency or
  /// overhead, plus the sync. So a sequence one GPU cannot hold at any
  /// ratio pays the all-to-all or the smaller attention chunks of the
  /// cheapest split that can. Never below `LowerBound`. When not even the
  /// sharded model states fit (no plan is valid) it is `LowerBound`.
  double MemoryAwareLowerBound(absl::Span<const int64_t> seq_lengths) const;

  /// One sequence's share of `MemoryAwareLowerBound` (GPU-seconds: times
  /// the world it is the bound's work term).
  double SequenceBound(double s) const;

  /// Whether every rank of the group is on one node.
  bool IntraNode(absl::Span<const int> ranks) const;

  /// Whether every Ulysses subgroup of the group (each consecutive run of
  /// `ulysses` ranks; 0 for the whole group) is on one node.
  bool UlyssesIntraNode(absl::Span<const int> ranks, int ulysses) const;

  const ClusterSpec& cluster() const { return cluster_; }
  /// `dcp::AttentionWithRing` in this cluster's form (COST_MODEL.md).
  double AttentionWithRing(double attention_s, double ring_s) const {
    return dcp::AttentionWithRing(cluster_.ring_overlaps_attention, attention_s,
                                  ring_s);
  }
  const ModelSpec& model() const { return model_; }
  int world_size() const { return world_size_; }

 private:
  /// Attention of a sequence of `s` tokens on `p` GPUs whose ring cuts it
  /// into `chunks` chunks.
  double AttentionSeconds(double s, double p, double recompute,
                          double chunks = 1.0) const;
  /// The most tokens per GPU that fit the memory cap at `recompute`.
  double TokensPerGpuAt(double recompute) const;
  /// The least recompute ratio at which `tokens_per_gpu` fit (0 when they
  /// fit without; above 1 when they never do).
  double RecomputeToHold(double tokens_per_gpu) const;
  /// GPU-seconds of a sequence of `s` tokens on `ulysses * ring` GPUs at
  /// `recompute` as `SequenceBound` counts them.
  double SequenceBoundAt(double s, int ulysses, int ring,
                         double recompute) const;

  ClusterSpec cluster_;
  ModelSpec model_;
  int world_size_;
};

/// What replaying one step on the reference cluster gives.
struct StepReport {
  double makespan_s = 0;     ///< Last rank free, plus the gradient sync.
  double lower_bound_s = 0;  ///< ReferenceCluster::LowerBound of the step.
  /// ReferenceCluster::MemoryAwareLowerBound of the step.
  double memory_bound_s = 0;
  double sync_s = 0;
  double max_memory_bytes = 0;
  int64_t tokens = 0;
  int num_tasks = 0;
  /// Busy seconds of every rank (excluding idle waits and the sync).
  std::vector<double> rank_busy_s;
};

/// Whether `ReplayStep` computes the step's bounds (`lower_bound_s`,
/// `memory_bound_s`): a search that compares makespans only (a baseline's
/// tuning) leaves them out, as the memory-aware bound prices every sequence
/// on every group shape and recompute ratio.
enum class StepBounds { kWith, kWithout };

/// Checks a step plan against the rules of the model (every sample of the
/// step in exactly one task; ranks distinct, ascending and in range; a
/// Ulysses degree dividing the head count and the group size, which is the
/// group size itself when the task gives none; recompute in [0, 1]; memory
/// within the cap) and replays it. Errors are INVALID_ARGUMENT and name the
/// step and task. With `StepBounds::kWithout` both bounds are 0.
absl::StatusOr<StepReport> ReplayStep(const ReferenceCluster& cluster,
                                      const StepPlan& plan,
                                      const LengthView& lengths,
                                      StepBounds bounds = StepBounds::kWith);

}  // namespace dcp

#endif  // DCP_SCHEDULER_EVAL_SIMULATOR_H_
