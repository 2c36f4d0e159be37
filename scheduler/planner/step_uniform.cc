// The uniform candidate of a step: every sequence on groups of one size,
// what a static layout would run, so that the planner never returns a plan
// its own cost model ranks below such a layout.

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "absl/container/btree_map.h"
#include "scheduler/planner/step_planner.h"

namespace dcp {
namespace planner_internal {

std::optional<Draft> StepPlanner::BuildUniform(int p) const {
  if (p < 1 || world_ % p != 0) return std::nullopt;
  const int groups = world_ / p;
  // Packs of at most the recompute-free capacity, best fit over the
  // sequences longest first (`room`: the packs' free tokens); a sequence
  // over the capacity runs alone with the least recompute that holds it.
  // With one ratio for every task, packs hold what fits at that ratio.
  const int k0 = fixed_k_ < 0 ? 0 : fixed_k_;
  const double cap = max_tokens_[k0] * p;
  const int u = UniformUlysses(p);
  std::vector<LongTask> packs;
  // A B-tree keeps equal keys in insertion order like std::multimap, with
  // far fewer allocations.
  absl::btree_multimap<double, int> room;
  for (int i = 0; i < static_cast<int>(items_.size()); ++i) {
    const Item& it = items_[i];
    auto fits = room.lower_bound(it.length);
    if (fits != room.end()) {
      LongTask& t = packs[fits->second];
      t.extra.push_back(i);
      t.tokens += it.length;
      t.units += it.units;
      const double left = fits->first - it.length;
      const int j = fits->second;
      room.erase(fits);
      room.emplace(left, j);
      continue;
    }
    const int k = MinRecompute(it.length / p);
    // Does not fit groups of p at all (or not at the fixed ratio).
    if (k < 0 || (fixed_k_ >= 0 && k > k0)) return std::nullopt;
    LongTask t;
    t.item = i;
    t.config.p = p;
    t.config.u = u;
    t.config.k = std::max(k, k0);
    t.tokens = it.length;
    t.units = it.units;
    if (k <= k0) {
      room.emplace(cap - it.length, static_cast<int>(packs.size()));
    }
    packs.push_back(std::move(t));
  }
  // The packs, longest first, each to the group that finishes first.
  std::vector<double> group_finish(groups, 0.0);
  RankTree</*kMost=*/false> first_free(group_finish);
  std::vector<double> seconds(packs.size());
  std::vector<int> order(packs.size());
  for (size_t j = 0; j < packs.size(); ++j) {
    order[j] = static_cast<int>(j);
    seconds[j] = LongDuration(packs[j], /*intra=*/true);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return seconds[a] > seconds[b]; });
  Draft d;
  d.uniform = true;
  d.rank_packs.assign(world_, {});
  for (int j : order) {
    const int g = first_free.Top();  // ties: the lowest group
    LongTask& t = packs[j];
    t.first_rank = g * p;
    const bool intra = t.first_rank / node_ == (t.first_rank + p - 1) / node_;
    t.dur_intra = seconds[j];
    group_finish[g] += intra ? seconds[j] : LongDuration(t, false);
    first_free.Set(g, group_finish[g]);
    d.long_tasks.push_back(std::move(t));
  }
  d.finish.assign(world_, 0.0);
  for (int r = 0; r < world_; ++r) d.finish[r] = group_finish[r / p];
  d.makespan = *std::max_element(group_finish.begin(), group_finish.end());
  return d;
}

double StepPlanner::UniformBound(int p, double total_tokens,
                                 double total_units) const {
  // Groups of p all inside a node or all across nodes have one cost each;
  // a mix (p neither divides nor is a multiple of a node) is not bounded.
  int intra_groups = 0;
  for (int first = 0; first < world_; first += p) {
    intra_groups += first / node_ == (first + p - 1) / node_;
  }
  if (intra_groups != 0 && intra_groups != world_ / p) return 0;
  const bool intra = intra_groups != 0;
  // Every pack of p holds at most `cap` tokens, or is one longer sequence
  // alone: there are at least sum_i min(length_i, cap) / cap packs, and a
  // task's time is its tokens' and units' share plus a constant (the
  // recompute-free time of an empty task), so the groups' total is at least
  // the world's work as one task plus that constant for every further pack.
  // No group ends before the mean of that total, nor before the longest
  // sequence's pack.
  const double cap = max_tokens_[0] * p;
  if (!(cap > 0)) return 0;
  const int over = static_cast<int>(
      std::partition_point(items_.begin(), items_.end(),
                           [&](const Item& it) { return it.length > cap; }) -
      items_.begin());
  const double capped = over * cap + (total_tokens - prefix_tokens_[over]);
  const double packs = std::ceil(capped / cap * (1 - 1e-12));
  // The ring's passes may overlap the attention, so a pack's constant there
  // (the ring's latency) is left out of `empty`: a sum of tasks' times is
  // still at least the whole work's time plus the other constants (where
  // the passes add to attention instead, the bound is only looser).
  const int u = UniformUlysses(p);
  double empty_attention = 0, empty_ring = 0;
  model_.AttentionAndRing(p, intra, 0, 0, 0, u, &empty_attention, &empty_ring);
  const double empty =
      model_.TaskSecondsFromSums(p, intra, 0, 0, 0, u) - empty_ring;
  const double total =
      model_.TaskSecondsFromSums(p, intra, total_tokens, total_units, 0, u) +
      std::max(0.0, packs - 1) * empty;
  const Item& longest = items_.front();
  const int k = MinRecompute(longest.length / p);
  if (k < 0) return std::numeric_limits<double>::infinity();  // cannot run
  const double first = model_.TaskSecondsFromSums(
      p, intra, longest.length, longest.units, Recompute(k), u);
  return std::max(total * p / world_, first);
}

}  // namespace planner_internal
}  // namespace dcp
