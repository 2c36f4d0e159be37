#include "scheduler/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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
  int first_rank = 0;
};

struct Pack {
  double tokens = 0;
  double units = 0;
  std::vector<int> items;
};

// Everything one candidate plan consists of before it becomes a StepPlan.
struct Draft {
  std::vector<LongTask> long_tasks;           // in execution order
  std::vector<std::vector<Pack>> rank_packs;  // short packs of each rank
  std::vector<double> finish;                 // predicted finish per rank
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

  void ChooseShortPackConfig();
  absl::Status ComputeGroupConfigs();
  std::vector<Block> BlocksOf(int p) const;
  Draft Build(double limit, bool fill) const;
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

  std::vector<Item> items_;
  std::vector<double> max_tokens_;  // per recompute step k
  int short_k_ = 0;
  double short_recompute_ = 0;
  double short_cap_ = 0;
  double pack_overhead_ = 0;
  double short_cost_per_token_ = 0;  // in a full short pack, overhead shared
  std::vector<std::vector<GroupConfig>> configs_;  // per item, per feasible p
  std::vector<double> single_dur_;  // per item, alone in a short pack
  double mean_load_ = 0;
};

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

absl::Status StepPlanner::ComputeGroupConfigs() {
  configs_.assign(items_.size(), {});
  single_dur_.assign(items_.size(), 0);
  double total_area = 0;
  for (size_t i = 0; i < items_.size(); ++i) {
    const Item& it = items_[i];
    single_dur_[i] = PackCost(it.length, it.units);
    double best_area = std::numeric_limits<double>::infinity();
    for (int p : sizes_) {
      const int k = MinRecompute(it.length / p);
      if (k < 0) continue;
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
      c.fill_cost_per_token =
          p *
          (model_.TaskSecondsFromSums(p, p <= node_, it.length + step, it.units, r) -
           model_.TaskSecondsFromSums(p, p <= node_, it.length, it.units, r)) /
          step;
      c.fill_area =
          c.area - c.spare_tokens * std::max(0.0, short_cost_per_token_ -
                                                      c.fill_cost_per_token);
      best_area = std::min(best_area, c.area);
      configs_[i].push_back(c);
    }
    if (configs_[i].empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sample ", it.id, " of ", static_cast<int64_t>(it.length),
          " tokens does not fit in memory on any group (sizes ",
          absl::StrJoin(sizes_, ","), ") even with full recompute"));
    }
    total_area += it.length <= short_cap_ ? ItemCost(it) +
                                                pack_overhead_ * it.length /
                                                    short_cap_
                                          : best_area;
  }
  mean_load_ = total_area / world_;
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
  for (size_t i = 0; i < items_.size(); ++i) {
    const Item& it = items_[i];
    if (it.length <= short_cap_ && single_dur_[i] <= limit) {
      short_items.push_back(static_cast<int>(i));
      continue;
    }
    // The config with the least GPU-seconds among those short enough, else
    // the shortest one.
    const GroupConfig* best = nullptr;
    for (const GroupConfig& c : configs_[i]) {
      const double dur = c.p <= node_ ? c.dur_intra : c.dur_inter;
      const double area = fill ? c.fill_area : c.area;
      if (dur <= limit &&
          (best == nullptr || area < (fill ? best->fill_area : best->area))) {
        best = &c;
      }
    }
    if (best == nullptr) {
      for (const GroupConfig& c : configs_[i]) {
        const double dur = c.p <= node_ ? c.dur_intra : c.dur_inter;
        const double best_dur =
            best == nullptr ? 0 : (best->p <= node_ ? best->dur_intra : best->dur_inter);
        if (best == nullptr || dur < best_dur) best = &c;
      }
    }
    LongTask t;
    t.item = static_cast<int>(i);
    t.config = *best;
    t.tokens = it.length;
    t.units = it.units;
    d.long_tasks.push_back(std::move(t));
  }
  if (fill) Fill(&short_items, &d);
  std::vector<double> dur_intra(items_.size());
  for (const LongTask& t : d.long_tasks) dur_intra[t.item] = LongDuration(t, true);

  // Largest groups first, longest first: groups of one size then start on
  // ranks that the larger groups released together.
  std::sort(d.long_tasks.begin(), d.long_tasks.end(),
            [&](const LongTask& a, const LongTask& b) {
              if (a.config.p != b.config.p) return a.config.p > b.config.p;
              if (dur_intra[a.item] != dur_intra[b.item]) {
                return dur_intra[a.item] > dur_intra[b.item];
              }
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
    const double di = LongDuration(t, true);
    const double de = LongDuration(t, false);
    for (const Block& b : blocks) {
      double start = 0;
      for (int r = b.first; r < b.first + p; ++r) start = std::max(start, d.finish[r]);
      double idle = 0;
      for (int r = b.first; r < b.first + p; ++r) idle += start - d.finish[r];
      const double finish = start + (b.intra ? di : de);
      if (finish < best_finish - 1e-12 ||
          (finish < best_finish + 1e-12 && idle < best_idle)) {
        best_finish = finish;
        best_idle = idle;
        best = &b;
      }
    }
    t.first_rank = best->first;
    for (int r = best->first; r < best->first + p; ++r) d.finish[r] = best_finish;
  }
  Deal(short_items, &d);
  Refine(&d);
  d.makespan = *std::max_element(d.finish.begin(), d.finish.end());
  return d;
}

void StepPlanner::Fill(std::vector<int>* short_items, Draft* d) const {
  // First fit decreasing of short sequences into the spare memory of groups
  // where they cost less than in a pack of their own.
  std::vector<LongTask*> open;
  for (LongTask& t : d->long_tasks) {
    if (t.config.spare_tokens >= 1 &&
        t.config.fill_cost_per_token < short_cost_per_token_) {
      open.push_back(&t);
    }
  }
  if (open.empty()) return;
  std::vector<int> order = *short_items;
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (items_[a].length != items_[b].length) {
      return items_[a].length > items_[b].length;
    }
    return items_[a].id < items_[b].id;
  });
  std::vector<int> rest;
  rest.reserve(order.size());
  for (int i : order) {
    const Item& it = items_[i];
    bool placed = false;
    for (size_t g = 0; g < open.size(); ++g) {
      LongTask& t = *open[g];
      if (t.tokens - items_[t.item].length + it.length <= t.config.spare_tokens) {
        t.extra.push_back(i);
        t.tokens += it.length;
        t.units += it.units;
        placed = true;
        if (t.config.spare_tokens - (t.tokens - items_[t.item].length) < 1) {
          open.erase(open.begin() + g);
        }
        break;
      }
    }
    if (!placed) rest.push_back(i);
  }
  *short_items = std::move(rest);
}

void StepPlanner::Deal(const std::vector<int>& short_items, Draft* d) const {
  std::vector<int> order = short_items;
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (items_[a].length != items_[b].length) {
      return items_[a].length > items_[b].length;
    }
    return items_[a].id < items_[b].id;
  });
  using Entry = std::pair<double, int>;  // (finish, rank), least first
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (int r = 0; r < world_; ++r) heap.push({d->finish[r], r});
  const int max_candidates = std::max(1, options_.candidate_ranks);
  std::vector<Entry> popped;
  for (int i : order) {
    const Item& it = items_[i];
    const double add = ItemCost(it);
    // Small items nearly always fit an open pack: one candidate suffices.
    const int candidates =
        it.length * 16 > short_cap_ ? max_candidates : 1;
    popped.clear();
    double best_finish = std::numeric_limits<double>::infinity();
    int best_rank = -1;
    int best_pack = -1;
    for (int c = 0; c < candidates && !heap.empty(); ++c) {
      Entry e = heap.top();
      heap.pop();
      popped.push_back(e);
      // Best fit: the fullest pack with room.
      const std::vector<Pack>& packs = d->rank_packs[e.second];
      int fit = -1;
      for (size_t k = 0; k < packs.size(); ++k) {
        if (packs[k].tokens + it.length <= short_cap_ &&
            (fit < 0 || packs[k].tokens > packs[fit].tokens)) {
          fit = static_cast<int>(k);
        }
      }
      const double finish = e.first + add + (fit < 0 ? pack_overhead_ : 0.0);
      if (finish < best_finish - 1e-12) {
        best_finish = finish;
        best_rank = e.second;
        best_pack = fit;
      }
    }
    std::vector<Pack>& packs = d->rank_packs[best_rank];
    if (best_pack < 0) {
      packs.emplace_back();
      best_pack = static_cast<int>(packs.size()) - 1;
    }
    Pack& pack = packs[best_pack];
    pack.tokens += it.length;
    pack.units += it.units;
    pack.items.push_back(i);
    d->finish[best_rank] = best_finish;
    for (const Entry& e : popped) {
      heap.push({e.second == best_rank ? best_finish : e.first, e.second});
    }
  }
}

void StepPlanner::Refine(Draft* d) const {
  // Move single short sequences from the rank that finishes last to the one
  // that finishes first while that lowers the later of the two.
  for (int move = 0; move < options_.refine_moves; ++move) {
    const int hi = static_cast<int>(
        std::max_element(d->finish.begin(), d->finish.end()) - d->finish.begin());
    const int lo = static_cast<int>(
        std::min_element(d->finish.begin(), d->finish.end()) - d->finish.begin());
    if (hi == lo) return;
    std::vector<Pack>& from = d->rank_packs[hi];
    std::vector<Pack>& to = d->rank_packs[lo];
    double best_peak = d->finish[hi] - 1e-9;
    int best_pack = -1, best_pos = -1, best_dest = -1;
    double best_out = 0, best_in = 0;
    for (size_t k = 0; k < from.size(); ++k) {
      for (size_t j = 0; j < from[k].items.size(); ++j) {
        const Item& it = items_[from[k].items[j]];
        const double out =
            ItemCost(it) + (from[k].items.size() == 1 ? pack_overhead_ : 0.0);
        int dest = -1;
        for (size_t m = 0; m < to.size(); ++m) {
          if (to[m].tokens + it.length <= short_cap_ &&
              (dest < 0 || to[m].tokens > to[dest].tokens)) {
            dest = static_cast<int>(m);
          }
        }
        const double in = ItemCost(it) + (dest < 0 ? pack_overhead_ : 0.0);
        const double peak = std::max(d->finish[hi] - out, d->finish[lo] + in);
        if (peak < best_peak) {
          best_peak = peak;
          best_pack = static_cast<int>(k);
          best_pos = static_cast<int>(j);
          best_dest = dest;
          best_out = out;
          best_in = in;
        }
      }
    }
    if (best_pack < 0) return;
    Pack& src = from[best_pack];
    const int i = src.items[best_pos];
    src.items.erase(src.items.begin() + best_pos);
    src.tokens -= items_[i].length;
    src.units -= items_[i].units;
    if (src.items.empty()) from.erase(from.begin() + best_pack);
    if (best_dest < 0) {
      to.emplace_back();
      best_dest = static_cast<int>(to.size()) - 1;
    }
    to[best_dest].tokens += items_[i].length;
    to[best_dest].units += items_[i].units;
    to[best_dest].items.push_back(i);
    d->finish[hi] -= best_out;
    d->finish[lo] += best_in;
  }
}

StepPlan StepPlanner::Emit(int64_t step, const Draft& d,
                           double total_tokens) const {
  StepPlan plan;
  plan.step = step;
  plan.samples.reserve(items_.size());
  for (const Item& it : items_) plan.samples.push_back(it.id);
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
      for (int i : pack.items) {
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
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", step, ": sample ", id, " has non-positive length ",
          lengths[id]));
    }
    items_[i].id = id;
    items_[i].length = static_cast<double>(lengths[id]);
    items_[i].units = model_.AttentionUnits(items_[i].length);
    total_tokens += items_[i].length;
  }
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
  Draft best;
  for (bool fill : {false, true}) {
    for (double beta : options_.split_thresholds) {
      Draft d = Build(beta * mean_load_, fill);
      if (d.makespan < best.makespan) best = std::move(d);
    }
  }
  return Emit(step, best, total_tokens);
}

}  // namespace

Planner::Planner(CostModel model, PlannerOptions options, std::vector<int> sizes)
    : model_(std::move(model)),
      options_(std::move(options)),
      group_sizes_(std::move(sizes)) {}

absl::StatusOr<Planner> Planner::Create(CostModel model, PlannerOptions options) {
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
