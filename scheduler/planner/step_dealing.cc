#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "scheduler/planner/step_planner.h"

namespace dcp {
namespace planner_internal {

// A winner tree over the ranks' finish times: the least (or, with
// kMost, the most) loaded rank in O(1) and an update in O(log W), with keys
// stored in the nodes so that a level costs one comparison of neighbours.
template <bool kMost>
class RankTree {
 public:
  explicit RankTree(const std::vector<double>& finish) {
    const int n = static_cast<int>(finish.size());
    leaves_ = 1;
    while (leaves_ < n) leaves_ *= 2;
    node_.assign(2 * leaves_, Node{kMost ? -kInf : kInf, -1});
    for (int r = 0; r < n; ++r) node_[leaves_ + r] = Node{finish[r], r};
    for (int k = leaves_ - 1; k >= 1; --k)
      node_[k] = Win(node_[2 * k], node_[2 * k + 1]);
  }
  /// The winning rank (ties: the lowest).
  int Top() const { return node_[1].rank; }
  /// Up to `k` candidates: the winner, then the winners of the largest rank
  /// ranges that do not contain it.
  int Candidates(int k, int* out) const {
    int n = 0;
    out[n++] = node_[1].rank;
    for (int v = 1; n < k && v < leaves_;) {
      const bool in_left = node_[2 * v].rank == node_[v].rank;
      const int other = node_[in_left ? 2 * v + 1 : 2 * v].rank;
      if (other >= 0) out[n++] = other;
      v = in_left ? 2 * v : 2 * v + 1;
    }
    return n;
  }
  void Set(int rank, double finish) {
    int k = leaves_ + rank;
    node_[k].key = finish;
    for (k /= 2; k >= 1; k /= 2) node_[k] = Win(node_[2 * k], node_[2 * k + 1]);
  }

 private:
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  struct Node {
    double key;
    int rank;
  };
  // `a` is the left (lower ranks) child, so ties keep the lower rank. Padding
  // leaves past the last rank hold a key that never wins, so they need no
  // test of their own.
  static Node Win(const Node& a, const Node& b) {
    return (kMost ? b.key > a.key : b.key < a.key) ? b : a;
  }
  int leaves_ = 1;
  std::vector<Node> node_;
};

void StepPlanner::Deal(const std::vector<int>& short_items, Draft* d) const {
  // Longest first, each to the rank (among the least loaded few) where it
  // finishes earliest, into its fullest pack with room. Runs of the tiniest
  // sequences (together at most 1/64 of a pack) are dealt as one: a rank's
  // finish time then moves in steps of at most ~1.5% of a pack, and dealing
  // takes a fraction of the time on steps of 10^5 sequences.
  RankTree</*kMost=*/false> tree(d->finish);
  const int max_candidates =
      std::min(std::max(1, options_.candidate_ranks), 32);
  int candidate[32];
  d->next_item.assign(items_.size(), -1);
  const double run_tokens = short_cap_ / 64;
  const size_t n = short_items.size();
  for (size_t j = 0; j < n;) {
    size_t end = j + 1;
    double tokens = items_[short_items[j]].length;
    double add = item_cost_[short_items[j]];
    if (tokens <= run_tokens) {
      while (end < n &&
             tokens + items_[short_items[end]].length <= run_tokens) {
        tokens += items_[short_items[end]].length;
        add += item_cost_[short_items[end]];
        ++end;
      }
    }
    // Small items nearly always fit an open pack: one candidate suffices.
    const int found = tokens * 16 > short_cap_
                          ? tree.Candidates(max_candidates, candidate)
                          : (candidate[0] = tree.Top(), 1);
    double best_finish = std::numeric_limits<double>::infinity();
    int best_rank = -1;
    int best_pack = -1;
    for (int c = 0; c < found; ++c) {
      const int rank = candidate[c];
      const std::vector<Pack>& packs = d->rank_packs[rank];
      int fit = -1;
      for (size_t k = 0; k < packs.size(); ++k) {
        if (packs[k].tokens + tokens <= short_cap_ &&
            (fit < 0 || packs[k].tokens > packs[fit].tokens)) {
          fit = static_cast<int>(k);
        }
      }
      const double finish =
          d->finish[rank] + add + (fit < 0 ? pack_overhead_ : 0.0);
      if (finish < best_finish - 1e-12) {
        best_finish = finish;
        best_rank = rank;
        best_pack = fit;
      }
    }
    std::vector<Pack>& packs = d->rank_packs[best_rank];
    if (best_pack < 0) {
      packs.emplace_back();
      best_pack = static_cast<int>(packs.size()) - 1;
    }
    for (; j < end; ++j) {
      AddToPack(short_items[j], items_[short_items[j]], &packs[best_pack], d);
    }
    d->finish[best_rank] = best_finish;
    tree.Set(best_rank, best_finish);
  }
}

void StepPlanner::Refine(Draft* d) const {
  // Move single short sequences from the rank that finishes last to the one
  // that finishes first while that lowers the later of the two.
  RankTree</*kMost=*/true> most(d->finish);
  RankTree</*kMost=*/false> least(d->finish);
  for (int move = 0; move < options_.refine_moves; ++move) {
    const int hi = most.Top();
    const int lo = least.Top();
    if (hi == lo) return;
    std::vector<Pack>& from = d->rank_packs[hi];
    std::vector<Pack>& to = d->rank_packs[lo];
    double best_peak = d->finish[hi] - 1e-9;
    int best_pack = -1, best_item = -1, best_prev = -1, best_dest = -1;
    double best_out = 0, best_in = 0;
    for (size_t k = 0; k < from.size(); ++k) {
      for (int i = from[k].head, prev = -1; i >= 0;
           prev = i, i = d->next_item[i]) {
        const Item& it = items_[i];
        const double out =
            item_cost_[i] + (from[k].count == 1 ? pack_overhead_ : 0.0);
        int dest = -1;
        for (size_t m = 0; m < to.size(); ++m) {
          if (to[m].tokens + it.length <= short_cap_ &&
              (dest < 0 || to[m].tokens > to[dest].tokens)) {
            dest = static_cast<int>(m);
          }
        }
        const double in = item_cost_[i] + (dest < 0 ? pack_overhead_ : 0.0);
        const double peak = std::max(d->finish[hi] - out, d->finish[lo] + in);
        if (peak < best_peak) {
          best_peak = peak;
          best_pack = static_cast<int>(k);
          best_item = i;
          best_prev = prev;
          best_dest = dest;
          best_out = out;
          best_in = in;
        }
      }
    }
    if (best_pack < 0) return;
    Pack& src = from[best_pack];
    const Item& it = items_[best_item];
    if (best_prev < 0) {
      src.head = d->next_item[best_item];
    } else {
      d->next_item[best_prev] = d->next_item[best_item];
    }
    src.tokens -= it.length;
    src.units -= it.units;
    --src.count;
    if (src.count == 0) from.erase(from.begin() + best_pack);
    if (best_dest < 0) {
      to.emplace_back();
      best_dest = static_cast<int>(to.size()) - 1;
    }
    AddToPack(best_item, it, &to[best_dest], d);
    d->finish[hi] -= best_out;
    d->finish[lo] += best_in;
    for (int r : {hi, lo}) {
      most.Set(r, d->finish[r]);
      least.Set(r, d->finish[r]);
    }
  }
}

}  // namespace planner_internal
}  // namespace dcp
