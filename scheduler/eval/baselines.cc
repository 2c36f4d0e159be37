#include "scheduler/eval/baselines.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "scheduler/eval/baselines_internal.h"

namespace dcp {
namespace baselines_internal {

std::vector<int> BlockRanks(int block, int p) {
  std::vector<int> ranks(p);
  std::iota(ranks.begin(), ranks.end(), block * p);
  return ranks;
}

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
    const StepJudge& judge) {
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

}  // namespace baselines_internal

namespace {

using baselines_internal::BlockRanks;
using baselines_internal::CheckRecompute;
using baselines_internal::CheckSamples;
using baselines_internal::GridCandidates;
using baselines_internal::GridRatio;
using baselines_internal::Pack;
using baselines_internal::SortLongestFirst;
using baselines_internal::TotalMakespan;

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

}  // namespace dcp
