// Dynamic CP's baseline (Megatron's dynamic context parallelism): each
// sequence on the smallest power-of-two ring whose ranks hold it, the short
// ones packed on one rank, the tasks longest first on the earliest-free
// aligned block of their size.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "scheduler/eval/baselines.h"
#include "scheduler/eval/baselines_internal.h"

namespace dcp {
namespace {

using baselines_internal::BlockRanks;
using baselines_internal::CheckRecompute;
using baselines_internal::CheckSamples;
using baselines_internal::FirstFitDecreasing;
using baselines_internal::GridCandidates;
using baselines_internal::GridRatio;
using baselines_internal::Pack;
using baselines_internal::TaskSeconds;
using baselines_internal::TotalMakespan;

// The largest power of two within the world: dynamic CP's largest ring.
int LargestRing(const ReferenceCluster& cluster) {
  int p = 1;
  while (2 * p <= cluster.world_size()) p *= 2;
  return p;
}

// The aligned blocks of each power-of-two size up to `largest` (dynamic
// CP's rings), each free when its last rank is: the earliest-free block of
// a size is the first of its level's set, and occupying p ranks updates the
// blocks that overlap them, O(p + levels) set updates instead of a scan of
// every block of the world for every task.
class BlockFreeTimes {
 public:
  BlockFreeTimes(const ReferenceCluster& cluster, int largest) {
    const int world = cluster.world_size();
    for (int q = 1; q <= largest; q *= 2) {
      Level& level = levels_.emplace_back();
      level.size = q;
      level.free.assign(world / q, 0.0);
      int intra = 0;
      for (int b = 0; b < world / q; ++b) {
        level.by_free.emplace(0.0, b);
        intra += cluster.IntraNode(BlockRanks(b, q)) ? 1 : 0;
      }
      level.one_span = intra == 0 || intra == world / q;
    }
  }

  /// Whether every block of size p (a power of two up to `largest`) is
  /// inside a node, or every one spans nodes: then a task costs the same on
  /// each.
  bool OneSpan(int p) const { return LevelOf(p).one_span; }

  /// The block of size p free earliest (the lowest on ties), and when.
  std::pair<int, double> Earliest(int p) const {
    const auto& first = *LevelOf(p).by_free.begin();
    return {first.second, first.first};
  }

  /// Ranks [first, first + p) busy until `until`.
  void Occupy(int first, int p, double until) {
    for (Level& level : levels_) {
      const int last_block = static_cast<int>(level.free.size()) - 1;
      const int hi = std::min((first + p - 1) / level.size, last_block);
      for (int b = first / level.size; b <= hi; ++b) {
        if (level.free[b] >= until) continue;
        level.by_free.erase({level.free[b], b});
        level.free[b] = until;
        level.by_free.emplace(until, b);
      }
    }
  }

 private:
  struct Level {
    int size = 1;
    bool one_span = true;
    std::vector<double> free;  // per block: the latest of its ranks
    std::set<std::pair<double, int>> by_free;
  };
  const Level& LevelOf(int p) const {
    size_t k = 0;
    while ((1 << k) < p) ++k;
    return levels_[k];
  }
  std::vector<Level> levels_;
};

}  // namespace

std::vector<int> DynamicCpGroupSizes(const ReferenceCluster& cluster) {
  std::vector<int> sizes;
  const int largest = LargestRing(cluster);
  for (int p = 1; p <= largest; p *= 2) sizes.push_back(p);
  return sizes;
}

int64_t DynamicCpCap(const ReferenceCluster& cluster,
                     const DynamicCpOptions& options) {
  const int64_t memory_cap = MaxTokensPerGpu(cluster, options.recompute);
  if (options.tokens_per_rank_cap > 0) {
    return std::min(memory_cap, options.tokens_per_rank_cap);
  }
  return memory_cap;
}

absl::StatusOr<int> DynamicCpGroupSize(const ReferenceCluster& cluster,
                                       int64_t length, int64_t cap) {
  if (cap < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dynamic CP: the per-GPU cap is ", cap,
        " tokens; not even the sharded model states fit the memory"));
  }
  const int64_t need = std::max<int64_t>(1, (length + cap - 1) / cap);
  int64_t p = 1;
  while (p < need) p *= 2;
  const int largest = LargestRing(cluster);
  if (p > largest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dynamic CP: a sequence of ", length, " tokens at ", cap,
        " tokens per GPU needs a ring of ", p,
        " GPUs; the largest power-of-two ring within the world of ",
        cluster.world_size(), " GPUs has ", largest, " (", largest * cap,
        " tokens)"));
  }
  return static_cast<int>(p);
}

absl::StatusOr<StepPlan> PlanDynamicCp(const ReferenceCluster& cluster,
                                       const LengthView& lengths, int64_t step,
                                       absl::Span<const int64_t> samples,
                                       const DynamicCpOptions& options) {
  RETURN_IF_ERROR(CheckRecompute(options.recompute));
  if (options.tokens_per_rank_cap < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dynamic CP: tokens_per_rank_cap must be >= 0, got ",
                     options.tokens_per_rank_cap));
  }
  const int64_t cap = DynamicCpCap(cluster, options);
  // The configuration must be able to run any step, so the window decides.
  RETURN_IF_ERROR(DynamicCpGroupSize(cluster, lengths.window(), cap).status());
  RETURN_IF_ERROR(CheckSamples(lengths, samples));

  struct Task {
    int p;
    std::vector<int64_t> samples;
    double cost;
  };
  std::vector<Task> tasks;
  std::vector<int64_t> singles;
  for (int64_t id : samples) {
    ASSIGN_OR_RETURN(int p, DynamicCpGroupSize(cluster, lengths[id], cap));
    if (p == 1) {
      singles.push_back(id);
    } else {
      tasks.push_back({p, {id}, 0.0});
    }
  }
  for (Pack& pack : FirstFitDecreasing(lengths, std::move(singles), cap)) {
    tasks.push_back({1, std::move(pack.samples), 0.0});
  }
  // Every task is a ring: u = 1.
  constexpr int kRing = 1;
  for (Task& task : tasks) {
    task.cost = TaskSeconds(cluster, lengths, BlockRanks(0, task.p),
                            task.samples, options.recompute, kRing);
  }
  std::stable_sort(
      tasks.begin(), tasks.end(),
      [](const Task& a, const Task& b) { return a.cost > b.cost; });

  StepPlan plan;
  plan.step = step;
  plan.samples.assign(samples.begin(), samples.end());
  const int world = cluster.world_size();
  std::vector<double> free_at(world, 0.0);
  std::vector<int> all_ranks(world);
  std::iota(all_ranks.begin(), all_ranks.end(), 0);
  BlockFreeTimes blocks(cluster, LargestRing(cluster));
  for (Task& task : tasks) {
    int best_block = -1;
    double best_end = std::numeric_limits<double>::infinity();
    if (blocks.OneSpan(task.p)) {
      // Every block of the size prices it alike: the earliest free, the
      // lowest on ties.
      double start = 0;
      std::tie(best_block, start) = blocks.Earliest(task.p);
      best_end = start + TaskSeconds(cluster, lengths,
                                     absl::MakeConstSpan(all_ranks).subspan(
                                         best_block * task.p, task.p),
                                     task.samples, options.recompute, kRing);
    } else {
      // Aligned blocks of one size differ in cost only by whether they span
      // nodes.
      double cost_by_span[2] = {-1.0, -1.0};
      for (int b = 0; b < world / task.p; ++b) {
        const absl::Span<const int> ranks =
            absl::MakeConstSpan(all_ranks).subspan(b * task.p, task.p);
        double start = 0;
        for (int r : ranks) start = std::max(start, free_at[r]);
        double& cost = cost_by_span[cluster.IntraNode(ranks) ? 0 : 1];
        if (cost < 0) {
          cost = TaskSeconds(cluster, lengths, ranks, task.samples,
                             options.recompute, kRing);
        }
        const double end = start + cost;
        if (end < best_end) {
          best_end = end;
          best_block = b;
        }
      }
    }
    TaskPlan out;
    out.ranks = BlockRanks(best_block, task.p);
    for (int r : out.ranks) free_at[r] = best_end;
    blocks.Occupy(best_block * task.p, task.p, best_end);
    out.samples = std::move(task.samples);
    out.recompute = options.recompute;
    out.ulysses = TaskPlan::UlyssesField(task.p, kRing);
    plan.tasks.push_back(std::move(out));
  }
  return plan;
}

absl::StatusOr<TunedDynamicCp> TuneDynamicCp(
    const ReferenceCluster& cluster, const LengthView& lengths,
    absl::Span<const std::vector<int64_t>> steps) {
  if (steps.empty()) {
    return absl::InvalidArgumentError("TuneDynamicCp: no steps to tune on");
  }
  const int layers = cluster.model().layers;
  int smallest = -1;
  for (int k = 0; k <= layers && smallest < 0; ++k) {
    const DynamicCpOptions options{GridRatio(k, layers), 0};
    if (DynamicCpGroupSize(cluster, lengths.window(),
                           DynamicCpCap(cluster, options))
            .ok()) {
      smallest = k;
    }
  }
  if (smallest < 0) {
    absl::Status why = DynamicCpGroupSize(cluster, lengths.window(),
                                          MaxTokensPerGpu(cluster, 1.0))
                           .status();
    return absl::InvalidArgumentError(absl::StrCat(
        "dynamic CP cannot fit the context window of ", lengths.window(),
        " tokens even with every layer recomputed: ", why.message()));
  }
  TunedDynamicCp best;
  best.total_makespan_s = std::numeric_limits<double>::infinity();
  for (int k : GridCandidates(smallest, layers)) {
    // The per-rank token cap is tuned too: a smaller cap splits long
    // sequences over larger groups, which can balance better.
    const int64_t memory_cap =
        DynamicCpCap(cluster, DynamicCpOptions{GridRatio(k, layers), 0});
    for (int64_t cap : {memory_cap, memory_cap / 2, memory_cap / 4}) {
      const DynamicCpOptions options{GridRatio(k, layers), cap};
      if (cap <= 0 ||
          !DynamicCpGroupSize(cluster, lengths.window(), cap).ok()) {
        continue;
      }
      ASSIGN_OR_RETURN(
          double total,
          TotalMakespan(cluster, lengths, steps,
                        [&](int64_t step, absl::Span<const int64_t> samples) {
                          return PlanDynamicCp(cluster, lengths, step, samples,
                                               options);
                        }));
      ++best.configs_tried;
      if (total < best.total_makespan_s) {
        best.options = options;
        best.total_makespan_s = total;
      }
    }
  }
  return best;
}

}  // namespace dcp
