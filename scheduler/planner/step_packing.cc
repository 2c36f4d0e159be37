#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "scheduler/planner/step_planner.h"

namespace dcp {
namespace planner_internal {

Draft StepPlanner::Build(double limit, bool fill) const {
  Draft d;
  d.finish.assign(world_, 0.0);
  d.rank_packs.assign(world_, {});
  std::vector<int> short_items;
  short_items.reserve(items_.size());
  ChooseGroups(limit, fill, &short_items, &d);
  if (fill) Fill(&short_items, &d);
  PlaceGroups(&d);
  d.short_items = std::move(short_items);
  d.makespan = WaterLevel(d);
  return d;
}

void StepPlanner::ChooseGroups(double limit, bool fill,
                               std::vector<int>* short_items, Draft* d) const {
  // Only the sequences with group configurations (a prefix) can become
  // groups; every later one is short.
  const int n = static_cast<int>(items_.size());
  const int candidates = static_cast<int>(configs_.size());
  for (int i = 0; i < candidates; ++i) {
    const Item& it = items_[i];
    if (it.length <= short_cap_ && single_dur_[i] <= limit) {
      short_items->push_back(i);
      continue;
    }
    // The config with the least GPU-seconds among those short enough, else
    // the shortest one.
    auto dur = [&](const GroupConfig& c) {
      return c.p <= node_ ? c.dur_intra : c.dur_inter;
    };
    auto area = [&](const GroupConfig& c) {
      return fill ? c.fill_area : c.area;
    };
    const GroupConfig* best = nullptr;
    for (const GroupConfig& c : configs_[i]) {
      if (dur(c) <= limit && (best == nullptr || area(c) < area(*best)))
        best = &c;
    }
    if (best == nullptr) {
      for (const GroupConfig& c : configs_[i]) {
        if (best == nullptr || dur(c) < dur(*best)) best = &c;
      }
    }
    LongTask t;
    t.item = i;
    t.config = *best;
    t.tokens = it.length;
    t.units = it.units;
    d->long_tasks.push_back(std::move(t));
  }
  short_items->resize(short_items->size() + (n - candidates));
  std::iota(short_items->end() - (n - candidates), short_items->end(),
            candidates);
}

void StepPlanner::PlaceGroups(Draft* d) const {
  // Largest groups first, longest first: groups of one size then start on
  // ranks that the larger groups released together.
  for (LongTask& t : d->long_tasks) t.dur_intra = LongDuration(t, true);
  std::sort(d->long_tasks.begin(), d->long_tasks.end(),
            [&](const LongTask& a, const LongTask& b) {
              if (a.config.p != b.config.p) return a.config.p > b.config.p;
              if (a.dur_intra != b.dur_intra) return a.dur_intra > b.dur_intra;
              return items_[a.item].id < items_[b.item].id;
            });
  int cached_p = -1;
  std::vector<Block> blocks;
  for (LongTask& t : d->long_tasks) {
    const int p = t.config.p;
    if (p != cached_p) {
      blocks = BlocksOf(p);
      cached_p = p;
    }
    double best_finish = std::numeric_limits<double>::infinity();
    double best_idle = 0;
    const Block* best = nullptr;
    const double di = t.dur_intra;
    const double de = LongDuration(t, false);
    for (const Block& b : blocks) {
      double start = 0, busy = 0;
      for (int r = b.first; r < b.first + p; ++r) {
        start = std::max(start, d->finish[r]);
        busy += d->finish[r];
      }
      const double idle = start * p - busy;
      const double finish = start + (b.intra ? di : de);
      if (finish < best_finish - 1e-12 ||
          (finish < best_finish + 1e-12 && idle < best_idle)) {
        best_finish = finish;
        best_idle = idle;
        best = &b;
      }
    }
    t.first_rank = best->first;
    for (int r = best->first; r < best->first + p; ++r)
      d->finish[r] = best_finish;
  }
}

double StepPlanner::WaterLevel(const Draft& d) const {
  // The step time if the short sequences were spread like water over the
  // ranks' finish times after the groups: a close, cheap estimate of what
  // dealing them achieves.
  // Sums over the short sequences: the tail past the group candidates is
  // short in every draft and only the candidates vary.
  double work = 0, tokens = 0;
  const int candidates = static_cast<int>(configs_.size());
  size_t k = 0;
  for (; k < d.short_items.size() && d.short_items[k] < candidates; ++k) {
    work += item_cost_[d.short_items[k]];
    tokens += items_[d.short_items[k]].length;
  }
  if (d.short_items.size() - k == items_.size() - candidates) {
    work += tail_cost_;
    tokens += tail_tokens_;
  } else {  // Fill took some of the tail.
    for (; k < d.short_items.size(); ++k) {
      work += item_cost_[d.short_items[k]];
      tokens += items_[d.short_items[k]].length;
    }
  }
  work += pack_overhead_ * std::ceil(tokens / short_cap_);
  std::vector<double> f = d.finish;
  std::sort(f.begin(), f.end());
  double below = 0;  // work that fills every rank up to f[k]
  for (size_t k = 1; k < f.size(); ++k) {
    const double next = below + (f[k] - f[k - 1]) * k;
    if (next >= work) return f[k - 1] + (work - below) / k;
    below = next;
  }
  return f.back() + (work - below) / f.size();
}

void StepPlanner::Finish(Draft* d) const {
  Deal(d->short_items, d);
  Refine(d);
  d->makespan = *std::max_element(d->finish.begin(), d->finish.end());
}

void StepPlanner::Fill(std::vector<int>* short_items, Draft* d) const {
  // First fit decreasing of short sequences into the spare memory of groups
  // where they cost less than in a pack of their own. Each group takes the
  // largest unassigned sequences that fit; `next` skips taken ones.
  std::vector<int>& order = *short_items;  // already longest first
  const int n = static_cast<int>(order.size());
  if (n == 0) return;
  std::vector<int> next(n + 1);
  std::iota(next.begin(), next.end(), 0);
  auto find = [&](int i) {
    while (next[i] != i) {
      next[i] = next[next[i]];
      i = next[i];
    }
    return i;
  };
  std::vector<bool> taken(n, false);
  for (LongTask& t : d->long_tasks) {
    if (t.config.spare_tokens < 1 ||
        t.config.fill_cost_per_token >= short_cost_per_token_) {
      continue;
    }
    double spare = t.config.spare_tokens;
    for (;;) {
      // The first position holding a sequence no longer than the spare.
      int lo = 0, hi = n;
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (items_[order[mid]].length > spare) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      const int i = find(lo);
      if (i >= n) break;
      const Item& it = items_[order[i]];
      t.extra.push_back(order[i]);
      t.tokens += it.length;
      t.units += it.units;
      spare -= it.length;
      taken[i] = true;
      next[i] = i + 1;
    }
  }
  int kept = 0;
  for (int i = 0; i < n; ++i) {
    if (!taken[i]) order[kept++] = order[i];
  }
  order.resize(kept);
}

}  // namespace planner_internal
}  // namespace dcp
