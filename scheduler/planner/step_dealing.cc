#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "scheduler/planner/step_planner.h"

namespace dcp {
namespace planner_internal {

namespace {

// The fullest of `packs` with room for `tokens` more (ties: the first), or
// -1 when none has room.
int FullestFit(const std::vector<Pack>& packs, double tokens, double cap) {
  int fit = -1;
  for (size_t k = 0; k < packs.size(); ++k) {
    if (packs[k].tokens + tokens <= cap &&
        (fit < 0 || packs[k].tokens > packs[fit].tokens)) {
      fit = static_cast<int>(k);
    }
  }
  return fit;
}

}  // namespace

void StepPlanner::Deal(const std::vector<int>& short_items, Draft* d) const {
  // Longest first, each to the rank (among the least loaded few) where it
  // finishes earliest, into its fullest pack with room. Runs of small
  // sequences are dealt as one, and dealing then takes a fraction of the time
  // on steps of 10^5 sequences: a run holds at most 1/64 of a pack, or, while
  // the sequences still to come are more than four such runs a rank (they,
  // shorter, even the ranks out at the end), up to a quarter of what is left
  // a rank and at most 1/4 of a pack. (Coarser runs early fill packs with
  // fewer gaps: on the reference scenarios they plan no worse than runs of
  // 1/64 throughout.)
  RankTree</*kMost=*/false> tree(d->finish);
  const int max_candidates =
      std::min(std::max(1, options_.candidate_ranks), 32);
  int candidate[32];
  d->next_item.assign(items_.size(), -1);
  // Tokens of each rank's emptiest pack (infinite when it has none).
  std::vector<double> emptiest(world_, std::numeric_limits<double>::infinity());
  for (int r = 0; r < world_; ++r) {
    for (const Pack& pack : d->rank_packs[r]) {
      emptiest[r] = std::min(emptiest[r], pack.tokens);
    }
  }
  const size_t n = short_items.size();
  double left = 0;  // tokens of short_items[j, n)
  for (int i : short_items) left += items_[i].length;
  for (size_t j = 0; j < n;) {
    const double run_tokens = std::clamp(left / (4.0 * world_),
                                         short_cap_ / 64, short_cap_ / 4);
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
    // So does a run that fits the least loaded rank's emptiest pack: no
    // other rank can finish it earlier (each starts no earlier, and a pack
    // of its own costs more, not less).
    const int top = tree.Top();
    const bool top_fits =
        emptiest[top] + tokens <= short_cap_ && pack_overhead_ >= 0;
    const int found = tokens * 16 > short_cap_ && !top_fits
                          ? tree.Candidates(max_candidates, candidate)
                          : (candidate[0] = top, 1);
    double best_finish = std::numeric_limits<double>::infinity();
    int best_rank = -1;
    int best_pack = -1;
    for (int c = 0; c < found; ++c) {
      // Whether some pack has room (its emptiest does): which one only
      // matters on the rank chosen.
      const int rank = candidate[c];
      const bool fits = emptiest[rank] + tokens <= short_cap_;
      const double finish =
          d->finish[rank] + add + (fits ? 0.0 : pack_overhead_);
      if (finish < best_finish - 1e-12) {
        best_finish = finish;
        best_rank = rank;
        best_pack = fits ? 0 : -1;
      }
    }
    std::vector<Pack>& packs = d->rank_packs[best_rank];
    if (best_pack >= 0) best_pack = FullestFit(packs, tokens, short_cap_);
    if (best_pack < 0) {
      packs.emplace_back();
      best_pack = static_cast<int>(packs.size()) - 1;
    }
    const bool was_emptiest = packs[best_pack].tokens <= emptiest[best_rank];
    for (; j < end; ++j) {
      AddToPack(short_items[j], items_[short_items[j]], &packs[best_pack], d);
    }
    if (was_emptiest) {  // else the emptiest pack stays what it was
      emptiest[best_rank] = std::numeric_limits<double>::infinity();
      for (const Pack& pack : packs) {
        emptiest[best_rank] = std::min(emptiest[best_rank], pack.tokens);
      }
    }
    d->finish[best_rank] = best_finish;
    tree.Set(best_rank, best_finish);
    left -= tokens;
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
        const int dest = FullestFit(to, it.length, short_cap_);
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
