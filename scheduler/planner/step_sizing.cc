#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "scheduler/planner/step_planner.h"

namespace dcp {
namespace planner_internal {

void StepPlanner::SortByLength() {
  // A stable LSD radix sort on (longest - length), longest first and in
  // step order among equal lengths. Each entry carries its key above its
  // position, so the passes read memory in order, and the digits are as
  // narrow as the longest length allows (two passes of 10 bits for a
  // 524288-token window): much faster than a comparison sort on the 10^5
  // sequences of a large step, and the later passes over the sequences then
  // read memory in order. The items are written once, sorted, from the keys.
  const std::vector<uint32_t>& length = read_lengths_;
  const int n = static_cast<int>(length.size());
  const uint32_t longest = *std::max_element(length.begin(), length.end());
  std::vector<uint64_t> a(n), b(n);
  for (int i = 0; i < n; ++i) {
    a[i] = (static_cast<uint64_t>(longest - length[i]) << 32) |
           static_cast<uint32_t>(i);
  }
  int bits = 0;
  while (bits < 32 && (static_cast<uint64_t>(longest) >> bits) != 0) ++bits;
  const int digit = std::clamp((bits + 1) / 2, 1, 16);
  const uint64_t mask = (uint64_t{1} << digit) - 1;
  std::vector<int> count(mask + 2);
  for (int shift = 32; shift < 32 + bits; shift += digit) {
    std::fill(count.begin(), count.end(), 0);
    for (uint64_t v : a) ++count[((v >> shift) & mask) + 1];
    for (size_t k = 0; k + 1 < count.size(); ++k) count[k + 1] += count[k];
    for (uint64_t v : a) b[count[(v >> shift) & mask]++] = v;
    a.swap(b);
  }
  items_.resize(n);
  constexpr int kPrefetchAhead = 16;
  for (int k = 0; k < n; ++k) {
    if (k + kPrefetchAhead < n) {
      __builtin_prefetch(samples_.data() +
                         (a[k + kPrefetchAhead] & 0xFFFFFFFFu));
    }
    Item& it = items_[k];
    it.id = samples_[a[k] & 0xFFFFFFFFu];
    it.length =
        static_cast<double>(longest - static_cast<uint32_t>(a[k] >> 32));
    it.units = model_.AttentionUnits(it.length);
  }
}

void StepPlanner::ChooseShortPackConfig() {
  // The recompute ratio of packs of short sequences: the one with the least
  // time per token for a full pack (less recompute, or more room per pack).
  // With one ratio for every task, that is the packs' too.
  double best = std::numeric_limits<double>::infinity();
  for (int k = fixed_k_ < 0 ? 0 : fixed_k_;
       k <= (fixed_k_ < 0 ? layers_ : fixed_k_); ++k) {
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

int StepPlanner::BestUlysses(int p, double tokens, double units, int k,
                             double* seconds) const {
  const bool intra = p <= node_;
  const double r = Recompute(k);
  int best_u = 1;
  double best = std::numeric_limits<double>::infinity();
  for (int u : head_divisors_) {
    if (u > p || p % u != 0 || !RunsUlysses(p, u)) continue;
    const double s = model_.TaskSecondsFromSums(p, intra, tokens, units, r, u);
    if (s < best * (1 - 1e-12)) {
      best = s;
      best_u = u;
    }
  }
  if (seconds != nullptr) *seconds = best;
  return best_u;
}

int StepPlanner::UniformUlysses(int p) const {
  const Item& longest = items_.front();
  const int k = MinRecompute(longest.length / p);
  return BestUlysses(p, longest.length, longest.units, std::max(k, 0));
}

GroupConfig StepPlanner::MakeConfig(const Item& it, int p, int k) const {
  GroupConfig c;
  c.p = p;
  c.k = k;
  // BestUlysses prices a group that fits a node with its links: that
  // duration is one of the two.
  double best = 0;
  c.u = BestUlysses(p, it.length, it.units, k, &best);
  const double r = Recompute(k);
  c.dur_intra =
      p <= node_
          ? best
          : model_.TaskSecondsFromSums(p, true, it.length, it.units, r, c.u);
  c.dur_inter =
      p > node_
          ? best
          : model_.TaskSecondsFromSums(p, false, it.length, it.units, r, c.u);
  c.area = p * (p <= node_ ? c.dur_intra : c.dur_inter);
  c.spare_tokens = std::floor(p * max_tokens_[k]) - it.length;
  // Marginal GPU-seconds per token of a short sequence added to the group
  // (linear and all-to-all work; attention is the same anywhere).
  const double step = 1024;
  c.fill_cost_per_token = p *
                          (model_.TaskSecondsFromSums(p, p <= node_,
                                                      it.length + step,
                                                      it.units, r, c.u) -
                           (p <= node_ ? c.dur_intra : c.dur_inter)) /
                          step;
  c.fill_area =
      c.area - c.spare_tokens *
                   std::max(0.0, short_cost_per_token_ - c.fill_cost_per_token);
  return c;
}

absl::Status StepPlanner::AddGroupConfigs(int i) {
  const Item& it = items_[i];
  // The previous candidate, when as long, has the same configurations.
  if (i > 0 && static_cast<size_t>(i) == configs_.size() &&
      items_[i - 1].length == it.length) {
    configs_.push_back(configs_.back());
    return absl::OkStatus();
  }
  ConfigRange range;
  range.begin = static_cast<int>(config_pool_.size());
  for (int p : sizes_) {
    const int k = MinRecompute(it.length / p);
    if (k < 0 || (fixed_k_ >= 0 && k > fixed_k_)) continue;
    config_pool_.push_back(MakeConfig(it, p, fixed_k_ >= 0 ? fixed_k_ : k));
  }
  range.end = static_cast<int>(config_pool_.size());
  if (range.begin == range.end) {
    return absl::FailedPreconditionError(
        absl::StrCat("sample ", it.id, " of ", static_cast<int64_t>(it.length),
                     " tokens does not fit in memory on any group (sizes ",
                     absl::StrJoin(sizes_, ","), ") ",
                     fixed_k_ >= 0
                         ? absl::StrCat("at recompute ", Recompute(fixed_k_))
                         : std::string("even with full recompute")));
  }
  configs_.push_back(range);
  return absl::OkStatus();
}

absl::Status StepPlanner::ComputeGroupConfigs() {
  // Only a prefix of the longest sequences can ever run in a group of their
  // own: those too long for a short pack, and those whose pack alone would
  // take longer than the smallest split threshold. Lengths, and so pack
  // times, fall along `items_`.
  configs_.clear();
  config_pool_.clear();
  single_dur_.resize(items_.size());
  item_cost_.resize(items_.size());
  double total_area = 0;
  const int n = static_cast<int>(items_.size());
  // Costs depend on the length alone, and equal lengths are adjacent: each
  // is computed once per distinct length.
  double best_area = 0;
  for (int i = 0; i < n; ++i) {
    const Item& it = items_[i];
    const bool repeat = i > 0 && it.length == items_[i - 1].length;
    single_dur_[i] =
        repeat ? single_dur_[i - 1] : PackCost(it.length, it.units);
    item_cost_[i] = single_dur_[i] - pack_overhead_;
    if (it.length > short_cap_) {
      RETURN_IF_ERROR(AddGroupConfigs(i));
      if (!repeat) {
        best_area = std::numeric_limits<double>::infinity();
        for (const GroupConfig& c : Configs(i))
          best_area = std::min(best_area, c.area);
      }
      total_area += best_area;
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

}  // namespace planner_internal
}  // namespace dcp
