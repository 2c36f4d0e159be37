// The uniform candidate of a step: every sequence on groups of one size,
// what a static layout would run, so that the planner never returns a plan
// its own cost model ranks below such a layout.

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "scheduler/planner/step_planner.h"

namespace dcp {
namespace planner_internal {

std::optional<Draft> StepPlanner::BuildUniform(int p) const {
  if (p < 1 || world_ % p != 0) return std::nullopt;
  const int groups = world_ / p;
  // Packs of at most the recompute-free capacity, best fit over the
  // sequences longest first (`room`: the packs' free tokens); a sequence
  // over the capacity runs alone with the least recompute that holds it.
  const double cap = max_tokens_[0] * p;
  std::vector<LongTask> packs;
  std::multimap<double, int> room;
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
    if (k < 0) return std::nullopt;  // Does not fit groups of p at all.
    LongTask t;
    t.item = i;
    t.config.p = p;
    t.config.k = k;
    t.tokens = it.length;
    t.units = it.units;
    if (k == 0) room.emplace(cap - it.length, static_cast<int>(packs.size()));
    packs.push_back(std::move(t));
  }
  // The packs, longest first, each to the group that finishes first.
  std::vector<double> group_finish(groups, 0.0);
  std::vector<double> seconds(packs.size());
  std::vector<int> order(packs.size());
  for (size_t j = 0; j < packs.size(); ++j) {
    order[j] = static_cast<int>(j);
    seconds[j] = LongDuration(packs[j], /*intra=*/true);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return seconds[a] > seconds[b]; });
  Draft d;
  d.rank_packs.assign(world_, {});
  for (int j : order) {
    const int g = static_cast<int>(
        std::min_element(group_finish.begin(), group_finish.end()) -
        group_finish.begin());
    LongTask& t = packs[j];
    t.first_rank = g * p;
    const bool intra = t.first_rank / node_ == (t.first_rank + p - 1) / node_;
    t.dur_intra = seconds[j];
    group_finish[g] += intra ? seconds[j] : LongDuration(t, false);
    d.long_tasks.push_back(std::move(t));
  }
  d.finish.assign(world_, 0.0);
  for (int r = 0; r < world_; ++r) d.finish[r] = group_finish[r / p];
  d.makespan = *std::max_element(group_finish.begin(), group_finish.end());
  return d;
}

}  // namespace planner_internal
}  // namespace dcp
