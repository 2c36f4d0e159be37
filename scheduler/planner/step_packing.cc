#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include "scheduler/planner/step_planner.h"

namespace dcp {
namespace planner_internal {

Draft StepPlanner::Build(double limit, bool fill,
                         const std::vector<Draft>& built) const {
  Draft d;
  d.fill = fill;
  std::vector<int> short_items;
  short_items.reserve(items_.size());
  Enter(PlanPhase::kPacking);
  ChooseGroups(limit, fill, &short_items, &d);
  d.groups.reserve(3 * d.long_tasks.size());
  for (const LongTask& t : d.long_tasks) {
    d.groups.insert(d.groups.end(), {t.item, t.config.p, t.config.k});
  }
  // Equal groups fill alike; a draft whose filling took nothing is also the
  // unfilled draft of its groups.
  d.same_as = SameAs(d, built, /*unfilled=*/!fill);
  if (d.same_as < 0 && fill) {
    Fill(&short_items, &d);
    d.filled = std::any_of(d.long_tasks.begin(), d.long_tasks.end(),
                           [](const LongTask& t) { return !t.extra.empty(); });
    if (!d.filled) d.same_as = SameAs(d, built, /*unfilled=*/true);
  }
  if (d.same_as >= 0) {
    d.makespan = built[d.same_as].makespan;
    return d;
  }
  d.finish.assign(world_, 0.0);
  d.rank_packs.assign(world_, {});
  Enter(PlanPhase::kPlacement);
  PlaceGroups(&d);
  Enter(PlanPhase::kPacking);
  d.short_items = std::move(short_items);
  d.makespan = WaterLevel(d);
  return d;
}

int StepPlanner::SameAs(const Draft& d, const std::vector<Draft>& built,
                        bool unfilled) {
  for (size_t e = 0; e < built.size(); ++e) {
    const Draft& o = built[e];
    if (o.same_as < 0 && o.groups == d.groups &&
        (o.fill == d.fill || (unfilled && !o.filled))) {
      return static_cast<int>(e);
    }
  }
  return -1;
}

void StepPlanner::ChooseGroups(double limit, bool fill,
                               std::vector<int>* short_items, Draft* d) const {
  // Only the sequences with group configurations (a prefix) can become
  // groups; every later one is short.
  const int n = static_cast<int>(items_.size());
  const int candidates = static_cast<int>(configs_.size());
  d->long_tasks.reserve(candidates);
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
    for (const GroupConfig& c : Configs(i)) {
      if (dur(c) <= limit && (best == nullptr || area(c) < area(*best)))
        best = &c;
    }
    if (best == nullptr) {
      for (const GroupConfig& c : Configs(i)) {
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

namespace {

// A block of ranks as a candidate for the next group: when all its ranks
// are free, and the rank-seconds they idle until then.
struct BlockKey {
  double start = std::numeric_limits<double>::infinity();
  double idle = 0;
  int block = -1;
};

// A winner tree over blocks of one group size: the block that frees first
// (ties: the least idle, then the lowest block) in O(1), an update in
// O(log blocks).
class BlockTree {
 public:
  explicit BlockTree(const std::vector<BlockKey>& keys) {
    leaves_ = 1;
    while (leaves_ < static_cast<int>(keys.size())) leaves_ *= 2;
    node_.assign(2 * leaves_, BlockKey{});
    for (size_t i = 0; i < keys.size(); ++i) node_[leaves_ + i] = keys[i];
    for (int k = leaves_ - 1; k >= 1; --k) {
      node_[k] = Win(node_[2 * k], node_[2 * k + 1]);
    }
  }
  const BlockKey& Top() const { return node_[1]; }
  void Set(int leaf, const BlockKey& key) {
    int k = leaves_ + leaf;
    node_[k] = key;
    for (k /= 2; k >= 1; k /= 2) node_[k] = Win(node_[2 * k], node_[2 * k + 1]);
  }

 private:
  static const BlockKey& Win(const BlockKey& a, const BlockKey& b) {
    if (b.block < 0) return a;
    if (a.block < 0) return b;
    if (b.start != a.start) return b.start < a.start ? b : a;
    if (b.idle != a.idle) return b.idle < a.idle ? b : a;
    return b.block < a.block ? b : a;
  }
  int leaves_ = 1;
  std::vector<BlockKey> node_;
};

// The blocks holding each rank r (several only where blocks overlap):
// members[first_of[r], first_of[r + 1]).
void BlocksOfRanks(const std::vector<Block>& blocks, int p, int world,
                   std::vector<int>* first_of, std::vector<int>* members) {
  first_of->assign(world + 1, 0);
  for (const Block& b : blocks) {
    for (int r = b.first; r < b.first + p; ++r) ++(*first_of)[r + 1];
  }
  for (int r = 0; r < world; ++r) (*first_of)[r + 1] += (*first_of)[r];
  members->resize((*first_of)[world]);
  std::vector<int> fill(first_of->begin(), first_of->end() - 1);
  for (int b = 0; b < static_cast<int>(blocks.size()); ++b) {
    for (int r = blocks[b].first; r < blocks[b].first + p; ++r) {
      (*members)[fill[r]++] = b;
    }
  }
}

}  // namespace

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
  const size_t n = d->long_tasks.size();
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && d->long_tasks[j].config.p == d->long_tasks[i].config.p) {
      ++j;
    }
    PlaceGroupsOfSize(i, j, d);
    i = j;
  }
}

void StepPlanner::PlaceGroupsOfSize(size_t begin, size_t end, Draft* d) const {
  // Each group goes to the block where it finishes first (ties: the least
  // idle): in each class of blocks (inside a node, across nodes) that is
  // the block that frees first, so one winner tree per class suffices.
  const int p = d->long_tasks[begin].config.p;
  const std::vector<Block> blocks = BlocksOf(p);
  const int num_blocks = static_cast<int>(blocks.size());
  std::vector<int> first_of, members;
  BlocksOfRanks(blocks, p, world_, &first_of, &members);
  auto key = [&](int b) {
    double start = 0, busy = 0;
    for (int r = blocks[b].first; r < blocks[b].first + p; ++r) {
      start = std::max(start, d->finish[r]);
      busy += d->finish[r];
    }
    return BlockKey{start, start * p - busy, b};
  };
  std::vector<int> leaf(num_blocks);
  std::vector<BlockKey> keys[2];  // [0]: across nodes, [1]: inside one
  for (int b = 0; b < num_blocks; ++b) {
    leaf[b] = static_cast<int>(keys[blocks[b].intra].size());
    keys[blocks[b].intra].push_back(key(b));
  }
  BlockTree trees[2] = {BlockTree(keys[0]), BlockTree(keys[1])};
  std::vector<size_t> stamp(num_blocks, end);
  for (size_t ti = begin; ti < end; ++ti) {
    LongTask& t = d->long_tasks[ti];
    const double dur[2] = {LongDuration(t, false), t.dur_intra};
    double best_finish = std::numeric_limits<double>::infinity();
    double best_idle = 0;
    int best = -1;
    for (int c : {1, 0}) {
      const BlockKey& top = trees[c].Top();
      if (top.block < 0) continue;
      const double finish = top.start + dur[c];
      if (finish < best_finish - 1e-12 ||
          (finish < best_finish + 1e-12 && top.idle < best_idle)) {
        best_finish = finish;
        best_idle = top.idle;
        best = top.block;
      }
    }
    t.first_rank = blocks[best].first;
    for (int r = t.first_rank; r < t.first_rank + p; ++r) {
      d->finish[r] = best_finish;
    }
    for (int r = t.first_rank; r < t.first_rank + p; ++r) {
      for (int m = first_of[r]; m < first_of[r + 1]; ++m) {
        const int b = members[m];
        if (stamp[b] == ti) continue;
        stamp[b] = ti;
        trees[blocks[b].intra].Set(leaf[b], key(b));
      }
    }
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
  Enter(PlanPhase::kDealing);
  Deal(d->short_items, d);
  Enter(PlanPhase::kRefinement);
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
  // Groups with room for the shortest sequence where riding costs less.
  const double shortest = items_[order.back()].length;
  auto takes = [&](const LongTask& t) {
    return t.config.spare_tokens >= std::max(1.0, shortest) &&
           t.config.fill_cost_per_token < short_cost_per_token_;
  };
  if (std::none_of(d->long_tasks.begin(), d->long_tasks.end(), takes)) return;
  std::vector<int> next(n + 1);
  std::iota(next.begin(), next.end(), 0);
  auto find = [&](int i) {
    while (next[i] != i) {
      next[i] = next[next[i]];
      i = next[i];
    }
    return i;
  };
  // The lengths in one array: the searches below then read little memory.
  std::vector<double> length(n);
  for (int i = 0; i < n; ++i) length[i] = items_[order[i]].length;
  std::vector<bool> taken(n, false);
  for (LongTask& t : d->long_tasks) {
    if (!takes(t)) continue;
    double spare = t.config.spare_tokens;
    for (;;) {
      // The first position holding a sequence no longer than the spare.
      const int lo =
          static_cast<int>(std::lower_bound(length.begin(), length.end(), spare,
                                            std::greater<double>()) -
                           length.begin());
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
