#include "scheduler/planner/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace dcp {
namespace {

// A sequence of the step as the planner sees it.
struct Item {
  int64_t id = 0;
  double length = 0;
  double units = 0;  // attention units, CostModel::AttentionUnits(length)
};

// A contiguous run of ranks a group may occupy.
struct Block {
  int first = 0;
  bool intra = true;
};

// The (group size, recompute step) a long sequence runs with.
struct GroupConfig {
  int p = 0;
  int k = 0;  // recompute = k / layers
  double dur_intra = 0;
  double dur_inter = 0;
  double area = 0;  // p * duration: GPU-seconds
  // GPU-seconds less what filling the spare capacity with short sequences
  // saves against running them in packs of their own.
  double fill_area = 0;
  double spare_tokens = 0;
  double fill_cost_per_token = 0;  // GPU-seconds per token riding along
};

struct LongTask {
  int item = 0;
  GroupConfig config;
  // Short sequences riding along in the group's spare memory.
  std::vector<int> extra;
  double tokens = 0;
  double units = 0;
  double dur_intra = 0;  // with the riders, on one node
  int first_rank = 0;
};

// A pack of short sequences on one rank. Its sequences form a linked list
// through Draft::next_item, so dealing allocates nothing per sequence.
struct Pack {
  double tokens = 0;
  double units = 0;
  int head = -1;
  int count = 0;
};

// Everything one candidate plan consists of before it becomes a StepPlan.
struct Draft {
  std::vector<LongTask> long_tasks;           // in execution order
  std::vector<std::vector<Pack>> rank_packs;  // short packs of each rank
  std::vector<double> finish;                 // predicted finish per rank
  std::vector<int> short_items;               // longest first
  std::vector<int> next_item;                 // pack lists, -1 ends one
  double makespan = std::numeric_limits<double>::infinity();
};

class StepPlanner {
 public:
  StepPlanner(const CostModel& model, const PlannerOptions& options,
              const std::vector<int>& sizes)
      : model_(model),
        options_(options),
        sizes_(sizes),
        world_(options.world_size),
        layers_(model.model().layers),
        node_(model.gpus_per_node()) {}

  absl::StatusOr<StepPlan> Plan(int64_t step, absl::Span<const int64_t> samples,
                                const LengthView& lengths);

 private:
  double Recompute(int k) const { return static_cast<double>(k) / layers_; }
  // Smallest recompute step whose token capacity holds `tokens_per_gpu`, or
  // -1 when none does.
  int MinRecompute(double tokens_per_gpu) const {
    auto it = std::lower_bound(max_tokens_.begin(), max_tokens_.end(),
                               tokens_per_gpu);
    return it == max_tokens_.end() ? -1
                                   : static_cast<int>(it - max_tokens_.begin());
  }
  double PackCost(double tokens, double units) const {
    return tokens <= 0 ? 0.0
                       : model_.TaskSecondsFromSums(1, true, tokens, units,
                                                    short_recompute_);
  }
  // Cost a short item adds to a pack that already exists.
  double ItemCost(const Item& it) const {
    return PackCost(it.length, it.units) - pack_overhead_;
  }
  static void AddToPack(int i, const Item& it, Pack* pack, Draft* d) {
    pack->tokens += it.length;
    pack->units += it.units;
    d->next_item[i] = pack->head;
    pack->head = i;
    ++pack->count;
  }

  void SortByLength();
  void ChooseShortPackConfig();
  absl::Status ComputeGroupConfigs();
  absl::Status AddGroupConfigs(int i);
  GroupConfig MakeConfig(const Item& it, int p, int k) const;
  std::vector<Block> BlocksOf(int p) const;
  // Splits the sequences into groups and short ones for a split threshold,
  // places the groups and estimates the step time (`WaterLevel`).
  Draft Build(double limit, bool fill) const;
  double WaterLevel(const Draft& d) const;
  // Deals the short sequences and refines: the draft's exact step time.
  void Finish(Draft* d) const;
  void Fill(std::vector<int>* short_items, Draft* d) const;
  double LongDuration(const LongTask& t, bool intra) const {
    return model_.TaskSecondsFromSums(t.config.p, intra, t.tokens, t.units,
                                      Recompute(t.config.k));
  }
  void Deal(const std::vector<int>& short_items, Draft* d) const;
  void Refine(Draft* d) const;
  StepPlan Emit(int64_t step, const Draft& d, double total_tokens) const;

  const CostModel& model_;
  const PlannerOptions& options_;
  const std::vector<int>& sizes_;
  const int world_;
  const int layers_;
  const int node_;

  absl::Span<const int64_t> samples_;  // the step's samples, as given
  std::vector<Item> items_;            // the step's sequences, longest first
  std::vector<double> max_tokens_;     // per recompute step k
  int short_k_ = 0;
  double short_recompute_ = 0;
  double short_cap_ = 0;
  double pack_overhead_ = 0;
  double short_cost_per_token_ = 0;  // in a full short pack, overhead shared
  // Group configurations of the longest sequences: configs_[i] belongs to
  // items_[i]; every later sequence always goes into a short pack.
  std::vector<std::vector<GroupConfig>> configs_;
  std::vector<double> single_dur_;  // per item, alone in a short pack
  std::vector<double> item_cost_;   // per item, added to an open short pack
  double mean_load_ = 0;
  // Sums over the sequences past the group candidates (always short).
  double tail_cost_ = 0;
  double tail_tokens_ = 0;
};

void StepPlanner::SortByLength() {
  // Two stable 16-bit radix passes on (2^32 - 1 - length): longest first, in
  // step order among equal lengths. Much faster than a comparison sort on
  // the 10^5 sequences of a large step, and the later passes over the
  // sequences then read memory in order.
  const int n = static_cast<int>(items_.size());
  std::vector<uint32_t> key(n);
  for (int i = 0; i < n; ++i) {
    key[i] = 0xFFFFFFFFu - static_cast<uint32_t>(items_[i].length);
  }
  std::vector<int> a(n), b(n);
  std::iota(a.begin(), a.end(), 0);
  for (int shift : {0, 16}) {
    std::vector<int> count(65537, 0);
    for (int i : a) ++count[((key[i] >> shift) & 0xFFFF) + 1];
    for (int k = 0; k < 65536; ++k) count[k + 1] += count[k];
    for (int i : a) b[count[(key[i] >> shift) & 0xFFFF]++] = i;
    a.swap(b);
  }
  std::vector<Item> sorted(n);
  for (int k = 0; k < n; ++k) sorted[k] = items_[a[k]];
  items_.swap(sorted);
}

void StepPlanner::ChooseShortPackConfig() {
  // The recompute ratio of packs of short sequences: the one with the least
  // time per token for a full pack (less recompute, or more room per pack).
  double best = std::numeric_limits<double>::infinity();
  for (int k = 0; k <= layers_; ++k) {
    const double cap = max_tokens_[k];
    if (cap < 1) continue;
    const double per_token =
        model_.TaskSecondsFromSums(1, true, cap, 0, Recompute(k)) / cap;
    if (per_token < best * (1 - 1e-12)) {
      best = per_token;
      short_k_ = k;
    }
  }
  short_recompute_ = Recompute(short_k_);
  short_cap_ = std::floor(max_tokens_[short_k_]);
  pack_overhead_ = PackCost(1, 0) - (PackCost(2, 0) - PackCost(1, 0));
  short_cost_per_token_ = PackCost(short_cap_, 0) / short_cap_;
}

GroupConfig StepPlanner::MakeConfig(const Item& it, int p, int k) const {
  GroupConfig c;
  c.p = p;
  c.k = k;
  const double r = Recompute(k);
  c.dur_intra = model_.TaskSecondsFromSums(p, true, it.length, it.units, r);
  c.dur_inter = model_.TaskSecondsFromSums(p, false, it.length, it.units, r);
  c.area = p * (p <= node_ ? c.dur_intra : c.dur_inter);
  c.spare_tokens = std::floor(p * max_tokens_[k]) - it.length;
  // Marginal GPU-seconds per token of a short sequence added to the group
  // (linear and all-to-all work; attention is the same anywhere).
  const double step = 1024;
  c.fill_cost_per_token = p *
                          (model_.TaskSecondsFromSums(
                               p, p <= node_, it.length + step, it.units, r) -
                           (p <= node_ ? c.dur_intra : c.dur_inter)) /
                          step;
  c.fill_area =
      c.area - c.spare_tokens *
                   std::max(0.0, short_cost_per_token_ - c.fill_cost_per_token);
  return c;
}

absl::Status StepPlanner::AddGroupConfigs(int i) {
  const Item& it = items_[i];
  std::vector<GroupConfig> configs;
  for (int p : sizes_) {
    const int k = MinRecompute(it.length / p);
    if (k >= 0) configs.push_back(MakeConfig(it, p, k));
  }
  if (configs.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("sample ", it.id, " of ", static_cast<int64_t>(it.length),
                     " tokens does not fit in memory on any group (sizes ",
                     absl::StrJoin(sizes_, ","), ") even with full recompute"));
  }
  configs_.push_back(std::move(configs));
  return absl::OkStatus();
}

absl::Status StepPlanner::ComputeGroupConfigs() {
  // Only a prefix of the longest sequences can ever run in a group of their
  // own: those too long for a short pack, and those whose pack alone would
  // take longer than the smallest split threshold. Lengths, and so pack
  // times, fall along `items_`.
  configs_.clear();
  single_dur_.resize(items_.size());
  item_cost_.resize(items_.size());
  double total_area = 0;
  const int n = static_cast<int>(items_.size());
  for (int i = 0; i < n; ++i) {
    const Item& it = items_[i];
    single_dur_[i] = PackCost(it.length, it.units);
    item_cost_[i] = single_dur_[i] - pack_overhead_;
    if (it.length > short_cap_) {
      RETURN_IF_ERROR(AddGroupConfigs(i));
      double best = std::numeric_limits<double>::infinity();
      for (const GroupConfig& c : configs_.back())
        best = std::min(best, c.area);
      total_area += best;
    } else {
      total_area += item_cost_[i] + pack_overhead_ * it.length / short_cap_;
    }
  }
  mean_load_ = total_area / world_;
  const double min_limit = *std::min_element(options_.split_thresholds.begin(),
                                             options_.split_thresholds.end()) *
                           mean_load_;
  for (int i = static_cast<int>(configs_.size()); i < n; ++i) {
    if (single_dur_[i] <= min_limit) break;
    RETURN_IF_ERROR(AddGroupConfigs(i));
  }
  tail_cost_ = 0;
  tail_tokens_ = 0;
  for (int i = static_cast<int>(configs_.size()); i < n; ++i) {
    tail_cost_ += item_cost_[i];
    tail_tokens_ += items_[i].length;
  }
  return absl::OkStatus();
}

std::vector<Block> StepPlanner::BlocksOf(int p) const {
  std::vector<Block> blocks;
  std::vector<bool> taken(world_, false);
  if (p <= node_) {
    for (int base = 0; base + node_ <= world_; base += node_) {
      for (int k = 0; (k + 1) * p <= node_; ++k) {
        blocks.push_back({base + k * p, true});
        taken[base + k * p] = true;
      }
    }
  }
  for (int first = 0; first + p <= world_; first += p) {
    if (taken[first]) continue;
    const bool intra = first / node_ == (first + p - 1) / node_;
    blocks.push_back({first, intra});
  }
  return blocks;
}

Draft StepPlanner::Build(double limit, bool fill) const {
  Draft d;
  d.finish.assign(world_, 0.0);
  d.rank_packs.assign(world_, {});
  std::vector<int> short_items;
  short_items.reserve(items_.size());
  // Only the sequences with group configurations (a prefix) can become
  // groups; every later one is short.
  const int n = static_cast<int>(items_.size());
  const int candidates = static_cast<int>(configs_.size());
  for (int i = 0; i < candidates; ++i) {
    const Item& it = items_[i];
    if (it.length <= short_cap_ && single_dur_[i] <= limit) {
      short_items.push_back(i);
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
    d.long_tasks.push_back(std::move(t));
  }
  short_items.resize(short_items.size() + (n - candidates));
  std::iota(short_items.end() - (n - candidates), short_items.end(),
            candidates);
  if (fill) Fill(&short_items, &d);
  // Largest groups first, longest first: groups of one size then start on
  // ranks that the larger groups released together.
  for (LongTask& t : d.long_tasks) t.dur_intra = LongDuration(t, true);
  std::sort(d.long_tasks.begin(), d.long_tasks.end(),
            [&](const LongTask& a, const LongTask& b) {
              if (a.config.p != b.config.p) return a.config.p > b.config.p;
              if (a.dur_intra != b.dur_intra) return a.dur_intra > b.dur_intra;
              return items_[a.item].id < items_[b.item].id;
            });
  int cached_p = -1;
  std::vector<Block> blocks;
  for (LongTask& t : d.long_tasks) {
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
        start = std::max(start, d.finish[r]);
        busy += d.finish[r];
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
      d.finish[r] = best_finish;
  }
  d.short_items = std::move(short_items);
  d.makespan = WaterLevel(d);
  return d;
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

StepPlan StepPlanner::Emit(int64_t step, const Draft& d,
                           double total_tokens) const {
  StepPlan plan;
  plan.step = step;
  plan.samples.assign(samples_.begin(), samples_.end());
  auto weight = [&](const Item& it) { return it.length / total_tokens; };
  for (const LongTask& t : d.long_tasks) {
    TaskPlan task;
    task.ranks.resize(t.config.p);
    std::iota(task.ranks.begin(), task.ranks.end(), t.first_rank);
    const Item& it = items_[t.item];
    task.samples = {it.id};
    task.loss_weights = {weight(it)};
    for (int i : t.extra) {
      task.samples.push_back(items_[i].id);
      task.loss_weights.push_back(weight(items_[i]));
    }
    task.recompute = Recompute(t.config.k);
    plan.tasks.push_back(std::move(task));
  }
  for (int r = 0; r < world_; ++r) {
    for (const Pack& pack : d.rank_packs[r]) {
      TaskPlan task;
      task.ranks = {r};
      task.recompute = short_recompute_;
      task.samples.reserve(pack.count);
      task.loss_weights.reserve(pack.count);
      for (int i = pack.head; i >= 0; i = d.next_item[i]) {
        task.samples.push_back(items_[i].id);
        task.loss_weights.push_back(weight(items_[i]));
      }
      plan.tasks.push_back(std::move(task));
    }
  }
  plan.predicted_makespan_s = d.makespan + model_.SyncSeconds();
  return plan;
}

absl::StatusOr<StepPlan> StepPlanner::Plan(int64_t step,
                                           absl::Span<const int64_t> samples,
                                           const LengthView& lengths) {
  if (samples.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step, " has no samples"));
  }
  samples_ = samples;
  items_.resize(samples.size());
  double total_tokens = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const int64_t id = samples[i];
    if (id < 0 || id >= lengths.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", step, ": sample ", id,
                       " is outside the length table of ", lengths.size()));
    }
    if (lengths[id] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", step, ": sample ", id,
                       " has non-positive length ", lengths[id]));
    }
    items_[i].id = id;
    items_[i].length = static_cast<double>(lengths[id]);
    items_[i].units = model_.AttentionUnits(items_[i].length);
    total_tokens += items_[i].length;
  }
  SortByLength();
  max_tokens_.resize(layers_ + 1);
  for (int k = 0; k <= layers_; ++k) {
    max_tokens_[k] = model_.MaxTokensPerGpu(Recompute(k));
  }
  if (max_tokens_[layers_] < 1) {
    return absl::FailedPreconditionError(
        "the model's static memory (weights and optimizer state) alone "
        "exceeds the memory cap; use more ranks");
  }
  ChooseShortPackConfig();
  absl::Status s = ComputeGroupConfigs();
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", step, ": ", s.message()));
  }
  // Every (threshold, fill) variant is built and estimated; the most
  // promising ones are finished exactly and the best of those is kept.
  std::vector<Draft> drafts;
  for (bool fill : {false, true}) {
    for (double beta : options_.split_thresholds) {
      drafts.push_back(Build(beta * mean_load_, fill));
    }
  }
  std::vector<int> order(drafts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return drafts[a].makespan < drafts[b].makespan;
  });
  // The water level is a close estimate only when every rank gets many short
  // sequences; with few a rank, all variants are finished.
  const bool many = items_.size() >= 16 * static_cast<size_t>(world_);
  const int finish =
      many ? std::min<int>(std::max(1, options_.finished_variants),
                           static_cast<int>(drafts.size()))
           : static_cast<int>(drafts.size());
  int best = -1;
  for (int k = 0; k < finish; ++k) {
    Draft& d = drafts[order[k]];
    Finish(&d);
    if (best < 0 || d.makespan < drafts[best].makespan) best = order[k];
  }
  return Emit(step, drafts[best], total_tokens);
}

}  // namespace

Planner::Planner(CostModel model, PlannerOptions options,
                 std::vector<int> sizes)
    : model_(std::move(model)),
      options_(std::move(options)),
      group_sizes_(std::move(sizes)) {}

absl::StatusOr<Planner> Planner::Create(CostModel model,
                                        PlannerOptions options) {
  if (options.world_size <= 0) {
    return absl::InvalidArgumentError("world_size must be positive");
  }
  if (options.split_thresholds.empty()) {
    return absl::InvalidArgumentError("split_thresholds must not be empty");
  }
  for (double t : options.split_thresholds) {
    if (!(t > 0)) {
      return absl::InvalidArgumentError("split_thresholds must be positive");
    }
  }
  const int heads = model.model().heads;
  std::vector<int> sizes;
  for (int p = 1; p <= options.world_size; ++p) {
    if (options.world_size % p == 0 && heads % p == 0) sizes.push_back(p);
  }
  if (model.gpus_per_node() <= 0) {
    return absl::InvalidArgumentError("gpus_per_node must be positive");
  }
  return Planner(std::move(model), std::move(options), std::move(sizes));
}

absl::StatusOr<StepPlan> Planner::PlanStep(int64_t step,
                                           absl::Span<const int64_t> samples,
                                           const LengthView& lengths) const {
  StepPlanner planner(model_, options_, group_sizes_);
  return planner.Plan(step, samples, lengths);
}

}  // namespace dcp
