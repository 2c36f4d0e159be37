#include "scheduler/planner/step_builder.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dcp {
namespace {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t RotateLeft(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

ShuffledOrder::ShuffledOrder(int64_t n, uint64_t seed)
    : ShuffledOrder(n, seed, n / 32) {}

ShuffledOrder::ShuffledOrder(int64_t n, uint64_t seed, int64_t dense_after)
    : n_(n), seed_(seed), dense_after_(dense_after) {
  ABSL_RAW_CHECK(n > 0, "ShuffledOrder needs at least one sample");
  if (n > int64_t{1} << 32) {
    dense_after_ = std::numeric_limits<int64_t>::max();
  }
  StartEpoch(0);
}

uint64_t ShuffledOrder::EpochSeed(uint64_t seed, int64_t epoch) {
  if (epoch == 0) return seed;
  uint64_t state =
      seed ^ (static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ULL);
  return SplitMix64(&state);
}

void ShuffledOrder::StartEpoch(int64_t epoch) {
  epoch_ = epoch;
  next_position_ = 0;
  next_partner_ = -1;
  swapped_.clear();
  dense_.clear();
  uint64_t sm = EpochSeed(seed_, epoch);
  for (uint64_t& word : state_) word = SplitMix64(&sm);
}

uint64_t ShuffledOrder::NextRandom() {
  // xoshiro256** (Blackman and Vigna).
  const uint64_t result = RotateLeft(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = RotateLeft(state_[3], 45);
  return result;
}

uint64_t ShuffledOrder::Uniform(uint64_t bound) {
  // Lemire, "Fast random integer generation in an interval" (2019).
  unsigned __int128 m = static_cast<unsigned __int128>(NextRandom()) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(NextRandom()) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

void ShuffledOrder::MakeDense() {
  dense_.resize(static_cast<size_t>(n_));
  std::iota(dense_.begin(), dense_.end(), uint32_t{0});
  for (const auto& [pos, id] : swapped_) {
    dense_[static_cast<size_t>(pos)] = static_cast<uint32_t>(id);
  }
  swapped_.clear();
  swapped_.rehash(0);  // Give the map's memory back.
}

int64_t ShuffledOrder::Next() {
  if (Done()) StartEpoch(epoch_ + 1);
  if (dense_.empty() && static_cast<int64_t>(swapped_.size()) >= dense_after_) {
    MakeDense();
  }
  const int64_t i = next_position_++;
  const int64_t j =
      next_partner_ >= 0
          ? next_partner_
          : i + static_cast<int64_t>(Uniform(static_cast<uint64_t>(n_ - i)));
  // The next position's partner, drawn now (the same draws in the same
  // order) so that its entry is in cache by the next call.
  next_partner_ = -1;
  if (next_position_ < n_) {
    next_partner_ = next_position_ +
                    static_cast<int64_t>(
                        Uniform(static_cast<uint64_t>(n_ - next_position_)));
    if (!dense_.empty()) {
      __builtin_prefetch(dense_.data() + next_partner_);
    }
  }
  if (!dense_.empty()) {
    // Position i is never read again: only j needs what was at i.
    const uint32_t at_j = dense_[static_cast<size_t>(j)];
    dense_[static_cast<size_t>(j)] = dense_[static_cast<size_t>(i)];
    return at_j;
  }
  auto value_at = [this](int64_t pos) {
    auto it = swapped_.find(pos);
    return it == swapped_.end() ? pos : it->second;
  };
  const int64_t at_i = value_at(i);
  const int64_t at_j = value_at(j);
  // Position i is never read again; position j (> i) now holds what was at i.
  swapped_.erase(i);
  if (j != i) {
    if (at_i == j) {
      swapped_.erase(j);
    } else {
      swapped_[j] = at_i;
    }
  }
  return at_j;
}

double DefaultSampleCost(int64_t length) {
  const double len = static_cast<double>(length);
  return len + len * len / 8192.0;
}

StepBuilder::StepBuilder(LengthView lengths, StepBuilderOptions options)
    : lengths_(lengths),
      options_(std::move(options)),
      order_(lengths.size(), options_.seed) {
  if (!options_.sample_cost) options_.sample_cost = DefaultSampleCost;
}

absl::StatusOr<StepBuilder> StepBuilder::Create(LengthView lengths,
                                                StepBuilderOptions options) {
  if (lengths.size() == 0) {
    return absl::InvalidArgumentError(
        "StepBuilder: the length table is empty; there are no samples to "
        "form steps from");
  }
  if (options.tokens_per_step <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("StepBuilder: tokens_per_step must be positive, got ",
                     options.tokens_per_step));
  }
  if (options.lookahead_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StepBuilder: lookahead_steps must be >= 0 (0 = off), got ",
        options.lookahead_steps));
  }
  return StepBuilder(lengths, std::move(options));
}

double StepBuilder::SampleCost(int64_t id) const {
  return options_.sample_cost(lengths_[id]);
}

StepBuilder::Drawn StepBuilder::Draw() {
  while (ahead_count_ < kDrawAhead) {
    Drawn& d = ahead_[(ahead_head_ + ahead_count_) % kDrawAhead];
    d.id = order_.Next();
    d.epoch = order_.epoch();
    d.ends_epoch = order_.Done();
    lengths_.Prefetch(d.id);
    ++ahead_count_;
  }
  const Drawn d = ahead_[ahead_head_];
  ahead_head_ = (ahead_head_ + 1) % kDrawAhead;
  --ahead_count_;
  return d;
}

absl::StatusOr<StepBuilder::FormedStep> StepBuilder::FormStep() {
  FormedStep step;
  // The cost estimates serve only the look-ahead.
  const bool costs = options_.lookahead_steps > 0;
  auto add = [&](int64_t id) -> absl::Status {
    const int64_t len = lengths_[id];
    if (len <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("StepBuilder: sample ", id, " has length ", len,
                       "; lengths must be positive"));
    }
    step.samples.push_back(id);
    step.tokens += len;
    if (costs) step.cost += SampleCost(id);
    return absl::OkStatus();
  };

  Drawn first = carried_;
  carried_ = Drawn{};
  if (first.id < 0) first = Draw();
  step.epoch = first.epoch;
  RETURN_IF_ERROR(add(first.id));
  // A step ends at the end of its epoch so that no sample can be in it twice.
  for (bool ends = first.ends_epoch; !ends;) {
    const Drawn d = Draw();
    if (step.tokens + lengths_[d.id] > options_.tokens_per_step) {
      carried_ = d;
      break;
    }
    RETURN_IF_ERROR(add(d.id));
    ends = d.ends_epoch;
  }
  return step;
}

std::vector<int> StepBuilder::ShortestFirst(const FormedStep& step) const {
  std::vector<int> order(step.samples.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const int64_t la = lengths_[step.samples[a]];
    const int64_t lb = lengths_[step.samples[b]];
    return la != lb ? la < lb : step.samples[a] < step.samples[b];
  });
  return order;
}

StepBuilder::Exchange StepBuilder::BestExchange(const FormedStep& a,
                                                const FormedStep& b,
                                                double bar) const {
  const int64_t budget = options_.tokens_per_step;
  // b's samples shortest first, with prefix sums: a sample x of `a` moves to
  // `b` in exchange for the fewest of b's shortest samples that make room.
  const std::vector<int> order = ShortestFirst(b);
  std::vector<int64_t> prefix_len(order.size() + 1, 0);
  std::vector<double> prefix_cost(order.size() + 1, 0.0);
  for (size_t k = 0; k < order.size(); ++k) {
    const int64_t id = b.samples[order[k]];
    prefix_len[k + 1] = prefix_len[k] + lengths_[id];
    prefix_cost[k + 1] = prefix_cost[k] + SampleCost(id);
  }
  Exchange best;
  best.max_cost = bar;
  for (size_t xi = 0; xi < a.samples.size(); ++xi) {
    const int64_t lx = lengths_[a.samples[xi]];
    const double cx = SampleCost(a.samples[xi]);
    const int64_t need = b.tokens + lx - budget;
    const size_t k = static_cast<size_t>(
        std::lower_bound(prefix_len.begin(), prefix_len.end(), need) -
        prefix_len.begin());
    if (k >= prefix_len.size()) continue;
    if (a.tokens - lx + prefix_len[k] > budget) continue;
    if (a.samples.size() - 1 + k == 0) continue;  // a step keeps a sample
    const double m =
        std::max(a.cost - cx + prefix_cost[k], b.cost + cx - prefix_cost[k]);
    if (m < best.max_cost) {
      best.max_cost = m;
      best.one = static_cast<int>(xi);
      best.k = k;
    }
  }
  return best;
}

void StepBuilder::Apply(const Exchange& exchange, FormedStep& a,
                        FormedStep& b) const {
  const std::vector<int> order = ShortestFirst(b);
  const int64_t x = a.samples[exchange.one];
  a.samples.erase(a.samples.begin() + exchange.one);
  std::vector<bool> leaves(b.samples.size(), false);
  for (size_t k = 0; k < exchange.k; ++k) leaves[order[k]] = true;
  std::vector<int64_t> kept;
  kept.reserve(b.samples.size() - exchange.k + 1);
  for (size_t i = 0; i < b.samples.size(); ++i) {
    (leaves[i] ? a.samples : kept).push_back(b.samples[i]);
  }
  kept.push_back(x);
  b.samples = std::move(kept);
  // Recomputed rather than updated so that rounding does not accumulate.
  for (FormedStep* s : {&a, &b}) {
    s->tokens = 0;
    s->cost = 0;
    for (int64_t id : s->samples) {
      s->tokens += lengths_[id];
      s->cost += SampleCost(id);
    }
  }
}

bool StepBuilder::ImproveOnce() {
  const int n = static_cast<int>(window_.size());
  int heavy = 0;
  for (int i = 1; i < n; ++i) {
    if (window_[i].cost > window_[heavy].cost) heavy = i;
  }
  FormedStep& h = window_[heavy];
  // Partners: the lighter steps of the same epoch, lightest first.
  std::vector<int> partners;
  for (int i = 0; i < n; ++i) {
    if (i != heavy && window_[i].epoch == h.epoch && window_[i].cost < h.cost) {
      partners.push_back(i);
    }
  }
  std::sort(partners.begin(), partners.end(), [&](int a, int b) {
    return window_[a].cost != window_[b].cost
               ? window_[a].cost < window_[b].cost
               : a < b;
  });
  // Improvements below this are rounding noise, not progress.
  const double bar = h.cost - 1e-9 * std::abs(h.cost);
  for (int li : partners) {
    FormedStep& l = window_[li];
    // One heavy sample for a few short light ones (costs that grow with
    // the length), or one light sample for a few short heavy ones (costs
    // that do not, e.g. a per-sample overhead).
    const Exchange give = BestExchange(h, l, bar);
    const Exchange take = BestExchange(l, h, bar);
    if (give.one < 0 && take.one < 0) continue;
    if (take.one < 0 || (give.one >= 0 && give.max_cost <= take.max_cost)) {
      Apply(give, h, l);
    } else {
      Apply(take, l, h);
    }
    return true;
  }
  return false;
}

void StepBuilder::Rebalance() {
  // Every exchange lowers the window's costs sorted in descending order
  // lexicographically, so this terminates anyway; the cap bounds the time.
  const int max_exchanges = 16 * static_cast<int>(window_.size());
  for (int i = 0; i < max_exchanges; ++i) {
    if (!ImproveOnce()) break;
  }
}

absl::StatusOr<std::vector<int64_t>> StepBuilder::NextStep() {
  const size_t wanted = static_cast<size_t>(options_.lookahead_steps) + 1;
  while (window_.size() < wanted) {
    ASSIGN_OR_RETURN(FormedStep step, FormStep());
    window_.push_back(std::move(step));
  }
  if (options_.lookahead_steps > 0) Rebalance();
  std::vector<int64_t> out = std::move(window_.front().samples);
  window_.pop_front();
  ++steps_emitted_;
  return out;
}

absl::StatusOr<std::vector<std::vector<int64_t>>> BuildSteps(
    LengthView lengths, const StepBuilderOptions& options, int64_t num_steps) {
  if (num_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("BuildSteps: num_steps must be >= 0, got ", num_steps));
  }
  ASSIGN_OR_RETURN(StepBuilder builder, StepBuilder::Create(lengths, options));
  std::vector<std::vector<int64_t>> steps;
  steps.reserve(static_cast<size_t>(num_steps));
  for (int64_t i = 0; i < num_steps; ++i) {
    ASSIGN_OR_RETURN(std::vector<int64_t> step, builder.NextStep());
    steps.push_back(std::move(step));
  }
  return steps;
}

}  // namespace dcp
