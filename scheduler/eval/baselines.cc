#include "scheduler/eval/baselines.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dcp {
namespace {

// The largest power of two within the world: dynamic CP's largest ring.
int LargestRing(const ReferenceCluster& cluster) {
  int p = 1;
  while (2 * p <= cluster.world_size()) p *= 2;
  return p;
}

absl::Status CheckStaticConfig(const ReferenceCluster& cluster,
                               const StaticConfig& config) {
  const int p = config.group_size;
  const int heads = cluster.model().heads;
  if (p < 1 || cluster.world_size() % p != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "static config: group size ", p, " must divide the world size (",
        cluster.world_size(), ")"));
  }
  if (config.ulysses == 0) {
    if (heads % p == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "static config: group size ", p, " must divide the head count (", heads,
        ") to run as plain Ulysses, or the config must give a "
        "Ulysses degree dividing both to run Ulysses inside a ring"));
  }
  const int u = config.ulysses;
  if (u < 0 || p % u != 0 || heads % u != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "static config: Ulysses degree ", u, " must divide the group size (", p,
        ") and the head count (", heads, ")"));
  }
  return absl::OkStatus();
}

std::vector<int> BlockRanks(int block, int p) {
  std::vector<int> ranks(p);
  std::iota(ranks.begin(), ranks.end(), block * p);
  return ranks;
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

struct Pack {
  std::vector<int64_t> samples;
  int64_t tokens = 0;
};

// Next-fit in the given order.
std::vector<Pack> NextFit(const LengthView& lengths,
                          absl::Span<const int64_t> samples, int64_t capacity) {
  std::vector<Pack> packs;
  for (int64_t id : samples) {
    const int64_t len = lengths[id];
    if (packs.empty() || packs.back().tokens + len > capacity) {
      packs.emplace_back();
    }
    packs.back().samples.push_back(id);
    packs.back().tokens += len;
  }
  return packs;
}

// Longest first; ties: smaller id first.
void SortLongestFirst(const LengthView& lengths, std::vector<int64_t>& ids) {
  const auto longer = [&](int64_t a, int64_t b) {
    const int64_t la = lengths[a];
    const int64_t lb = lengths[b];
    return la != lb ? la > lb : a < b;
  };
  // A total order: input sorted once (TuneStatic) stays as it is.
  if (std::is_sorted(ids.begin(), ids.end(), longer)) return;
  std::sort(ids.begin(), ids.end(), longer);
}

// First-fit decreasing by length.
std::vector<Pack> FirstFitDecreasing(const LengthView& lengths,
                                     std::vector<int64_t> samples,
                                     int64_t capacity) {
  SortLongestFirst(lengths, samples);
  std::vector<Pack> packs;
  for (int64_t id : samples) {
    const int64_t len = lengths[id];
    auto it = std::find_if(packs.begin(), packs.end(), [&](const Pack& p) {
      return p.tokens + len <= capacity;
    });
    if (it == packs.end()) {
      packs.emplace_back();
      it = packs.end() - 1;
    }
    it->samples.push_back(id);
    it->tokens += len;
  }
  return packs;
}

// A task's cost is a function of its total tokens plus a sum over its
// sequences (attention): the linear work, the all-to-all, the overhead and
// the ring's passes depend on the tokens only. So a growing pack's cost can
// be updated in O(1): other_s + AttentionWithRing(sum of
// SequenceAttentionSeconds(s_i), ring_s), both terms of TokenTerms(T).
struct TokenTerms {
  double other_s = 0;  // everything but AttentionWithRing(attention, ring)
  double ring_s = 0;
};

TokenTerms TermsOfTokens(const ReferenceCluster& cluster,
                         const ReferenceCluster::GroupLinks& group,
                         int64_t tokens, double recompute, int ulysses) {
  const int64_t one[] = {tokens};
  const ReferenceCluster::TaskCost c =
      cluster.CostOn(group, one, recompute, ulysses);
  return {c.total_s - cluster.AttentionWithRing(c.attention_s, c.ring_s),
          c.ring_s};
}

double SequenceAttentionSeconds(const ReferenceCluster& cluster,
                                const ReferenceCluster::GroupLinks& group,
                                int64_t length, double recompute, int ulysses) {
  const int64_t one[] = {length};
  return cluster.CostOn(group, one, recompute, ulysses).attention_s;
}

double TaskSeconds(const ReferenceCluster& cluster, const LengthView& lengths,
                   absl::Span<const int> ranks,
                   absl::Span<const int64_t> samples, double recompute,
                   int ulysses) {
  std::vector<int64_t> seq;
  seq.reserve(samples.size());
  for (int64_t id : samples) seq.push_back(lengths[id]);
  return cluster.Cost(ranks, seq, recompute, ulysses).total_s;
}

absl::Status CheckSamples(const LengthView& lengths,
                          absl::Span<const int64_t> samples) {
  for (int64_t id : samples) {
    if (id < 0 || id >= lengths.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sample ", id, " is outside the length table of ",
                       lengths.size(), " samples"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRecompute(double recompute) {
  if (!(recompute >= 0.0 && recompute <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("recompute ", recompute, " is outside [0, 1]"));
  }
  return absl::OkStatus();
}

// The recompute grid indices a tuner tries: the smallest feasible one, a few
// above it, and the top (all layers recomputed).
std::vector<int> GridCandidates(int smallest, int layers) {
  std::vector<int> ks;
  for (int step : {0, 1, 2, 4, 8}) {
    if (smallest + step <= layers) ks.push_back(smallest + step);
  }
  if (ks.back() != layers) ks.push_back(layers);
  return ks;
}

double GridRatio(int k, int layers) {
  return static_cast<double>(k) / static_cast<double>(layers);
}

absl::StatusOr<double> TotalMakespan(
    const ReferenceCluster& cluster, const LengthView& lengths,
    absl::Span<const std::vector<int64_t>> steps,
    const std::function<absl::StatusOr<StepPlan>(
        int64_t, absl::Span<const int64_t>)>& plan_step,
    const StepJudge& judge = nullptr) {
  double total = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSIGN_OR_RETURN(StepPlan plan,
                     plan_step(static_cast<int64_t>(i), steps[i]));
    if (judge) {
      total += judge(plan);
      continue;
    }
    ASSIGN_OR_RETURN(StepReport report,
                     ReplayStep(cluster, plan, lengths, StepBounds::kWithout));
    total += report.makespan_s;
  }
  return total;
}

}  // namespace

int64_t MaxTokensPerGpu(const ReferenceCluster& cluster, double recompute) {
  return MaxTokensPerTask(cluster, 1, recompute);
}

int64_t MaxTokensPerTask(const ReferenceCluster& cluster, int group_size,
                         double recompute) {
  const double cap = cluster.cluster().MemoryCap();
  const double p = group_size;
  const double fixed = cluster.MemoryBytes(0.0, recompute);
  if (group_size < 1 || fixed > cap) return 0;
  const double per_token = cluster.MemoryBytes(1.0, recompute) - fixed;
  auto fits = [&](int64_t tokens) {
    return cluster.MemoryBytes(static_cast<double>(tokens) / p, recompute) <=
           cap;
  };
  // The closed form, then corrected for rounding against the exact check
  // ReplayStep makes.
  int64_t t = static_cast<int64_t>(std::floor(p * (cap - fixed) / per_token));
  while (t > 0 && !fits(t)) --t;
  while (fits(t + 1)) ++t;
  return t;
}

std::vector<StaticConfig> StaticShapes(const ReferenceCluster& cluster) {
  std::vector<StaticConfig> shapes;
  for (int p = 1; p <= cluster.world_size(); ++p) {
    if (cluster.world_size() % p != 0) continue;
    for (int u = p; u >= 1; --u) {
      if (p % u == 0 && cluster.model().heads % u == 0) {
        shapes.push_back({p, 0.0, u});
      }
    }
  }
  return shapes;
}

std::vector<int> DynamicCpGroupSizes(const ReferenceCluster& cluster) {
  std::vector<int> sizes;
  const int largest = LargestRing(cluster);
  for (int p = 1; p <= largest; p *= 2) sizes.push_back(p);
  return sizes;
}

absl::StatusOr<StepPlan> PlanStatic(const ReferenceCluster& cluster,
                                    const LengthView& lengths, int64_t step,
                                    absl::Span<const int64_t> samples,
                                    const StaticConfig& config, bool balanced) {
  RETURN_IF_ERROR(CheckStaticConfig(cluster, config));
  RETURN_IF_ERROR(CheckRecompute(config.recompute));
  const int p = config.group_size;
  const int u = config.UlyssesDegree();
  const int64_t capacity = MaxTokensPerTask(cluster, p, config.recompute);
  if (capacity < lengths.window()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "static config p=", p, ", u=", u, ", recompute=", config.recompute,
        ": a task holds at most ", capacity,
        " tokens, less than the context window of ", lengths.window()));
  }
  RETURN_IF_ERROR(CheckSamples(lengths, samples));

  StepPlan plan;
  plan.step = step;
  plan.samples.assign(samples.begin(), samples.end());
  const int groups = cluster.world_size() / p;
  std::vector<std::vector<Pack>> by_group(groups);
  if (!balanced) {
    std::vector<Pack> packs = NextFit(lengths, samples, capacity);
    for (size_t i = 0; i < packs.size(); ++i) {
      by_group[i % groups].push_back(std::move(packs[i]));
    }
  } else {
    // Longest first, each sample to the group with the least simulated load,
    // first-fit into that group's packs.
    std::vector<int64_t> order(samples.begin(), samples.end());
    SortLongestFirst(lengths, order);
    std::vector<double> load(groups, 0.0);
    // The groups by (load, group): the first is the least loaded, the
    // lowest-numbered among equals.
    std::set<std::pair<double, int>> by_load;
    for (int g = 0; g < groups; ++g) by_load.emplace(0.0, g);
    // Per group and pack: the attention seconds so far and the cost.
    // (Blocks of one size may differ in cost by whether they span nodes, so
    // each group's own ranks price its packs.)
    std::vector<std::vector<double>> attention(groups), pack_cost(groups);
    std::vector<ReferenceCluster::GroupLinks> links(groups);
    for (int g = 0; g < groups; ++g)
      links[g] = cluster.LinksOf(BlockRanks(g, p), u);
    for (int64_t id : order) {
      const int64_t len = lengths[id];
      const int g = by_load.begin()->second;
      std::vector<Pack>& packs = by_group[g];
      size_t k = 0;
      while (k < packs.size() && packs[k].tokens + len > capacity) ++k;
      if (k == packs.size()) {
        packs.emplace_back();
        attention[g].push_back(0.0);
        pack_cost[g].push_back(0.0);
      }
      packs[k].samples.push_back(id);
      packs[k].tokens += len;
      attention[g][k] +=
          SequenceAttentionSeconds(cluster, links[g], len, config.recompute, u);
      const TokenTerms terms = TermsOfTokens(cluster, links[g], packs[k].tokens,
                                             config.recompute, u);
      const double cost = terms.other_s + cluster.AttentionWithRing(
                                              attention[g][k], terms.ring_s);
      by_load.erase(by_load.begin());
      load[g] += cost - pack_cost[g][k];
      by_load.emplace(load[g], g);
      pack_cost[g][k] = cost;
    }
  }
  for (int g = 0; g < groups; ++g) {
    for (Pack& pack : by_group[g]) {
      TaskPlan task;
      task.ranks = BlockRanks(g, p);
      task.samples = std::move(pack.samples);
      task.recompute = config.recompute;
      task.ulysses = TaskPlan::UlyssesField(p, u);
      plan.tasks.push_back(std::move(task));
    }
  }
  return plan;
}

absl::StatusOr<TunedStatic> TuneStatic(
    const ReferenceCluster& cluster, const LengthView& lengths,
    absl::Span<const std::vector<int64_t>> steps, bool balanced,
    StaticSearch search, const StepJudge& judge) {
  if (steps.empty()) {
    return absl::InvalidArgumentError("TuneStatic: no steps to tune on");
  }
  // A balanced plan deals a step's samples longest first whatever their
  // order, so they are sorted once here rather than once a configuration.
  std::vector<std::vector<int64_t>> sorted;
  if (balanced) {
    sorted.assign(steps.begin(), steps.end());
    for (std::vector<int64_t>& step : sorted) SortLongestFirst(lengths, step);
    steps = sorted;
  }
  const int layers = cluster.model().layers;
  TunedStatic best;
  best.total_makespan_s = std::numeric_limits<double>::infinity();
  int64_t largest_capacity = 0;
  // The shapes come by p ascending, then u descending, and r ascends within
  // a shape; only a strictly smaller total replaces the best, so the order
  // is the tie rule.
  for (const StaticConfig& shape : StaticShapes(cluster)) {
    const int p = shape.group_size;
    if (search == StaticSearch::kUlyssesOnly && shape.RingDegree() != 1) {
      continue;
    }
    largest_capacity =
        std::max(largest_capacity, MaxTokensPerTask(cluster, p, 1.0));
    int smallest = -1;
    for (int k = 0; k <= layers; ++k) {
      if (MaxTokensPerTask(cluster, p, GridRatio(k, layers)) >=
          lengths.window()) {
        smallest = k;
        break;
      }
    }
    if (smallest < 0) continue;
    for (int k : GridCandidates(smallest, layers)) {
      const StaticConfig config{p, GridRatio(k, layers), shape.ulysses};
      ASSIGN_OR_RETURN(
          double total,
          TotalMakespan(
              cluster, lengths, steps,
              [&](int64_t step, absl::Span<const int64_t> samples) {
                return PlanStatic(cluster, lengths, step, samples, config,
                                  balanced);
              },
              judge));
      ++best.configs_tried;
      if (total < best.total_makespan_s) {
        best.config = config;
        best.total_makespan_s = total;
      }
    }
  }
  if (best.configs_tried == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no static configuration fits the context window of ", lengths.window(),
        " tokens: the largest task (",
        search == StaticSearch::kUlyssesOnly ? "plain Ulysses, " : "",
        "every layer recomputed) holds ", largest_capacity, " tokens"));
  }
  return best;
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
