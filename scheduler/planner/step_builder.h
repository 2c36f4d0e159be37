#ifndef DCP_SCHEDULER_PLANNER_STEP_BUILDER_H_
#define DCP_SCHEDULER_PLANNER_STEP_BUILDER_H_

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "scheduler/planner/plan.h"

namespace dcp {

/// A seeded random permutation of the sample ids [0, n), drawn one id at a
/// time, repeated epoch after epoch.
///
/// It is a lazy Fisher–Yates shuffle: position i swaps with a uniform
/// position in [i, n), and only the positions that have been swapped away
/// from their identity value are stored (in a hash map), so drawing k ids
/// costs O(k) time and memory whatever n is; 100M samples are fine when only
/// the first few steps are wanted. Once the map holds more than
/// `dense_after` positions (default n / 32) the epoch goes on in a plain
/// array of n ids, which is then smaller than the map would grow and several
/// times faster to draw from (no hashing, one random access a draw); the ids
/// drawn are the same either way.
///
/// The generator is xoshiro256** seeded through splitmix64 and the bounded
/// draw is Lemire's unbiased multiply-and-reject, all in integer arithmetic:
/// the same (n, seed) gives the same ids on every platform and compiler.
/// Epoch e (0-based) is an independent shuffle seeded with
/// `EpochSeed(seed, e)` (epoch 0 uses `seed` itself); when an epoch's ids are
/// exhausted the next epoch starts on the following `Next()`.
///
/// Thread-compatible value type.
///
///   ShuffledOrder order(lengths.size(), /*seed=*/42);
///   int64_t first = order.Next();
class ShuffledOrder {
 public:
  /// `n` must be positive (CHECKed: callers validate user input first).
  ShuffledOrder(int64_t n, uint64_t seed);
  /// With the switch to the array after `dense_after` stored positions
  /// (0: from the first draw; INT64_MAX: never). For tests and benchmarks.
  ShuffledOrder(int64_t n, uint64_t seed, int64_t dense_after);

  /// The next id of the permutation. After the last id of an epoch, the
  /// next call starts a new epoch.
  int64_t Next();

  /// Whether every id of the current epoch has been drawn (the next `Next()`
  /// would start a new epoch).
  bool Done() const { return next_position_ == n_; }

  /// The epoch of the most recently drawn id (0 before the first draw).
  int64_t epoch() const { return epoch_; }

  int64_t size() const { return n_; }

  /// Positions currently held: those in the swap map, O(ids drawn in this
  /// epoch), or n once the epoch went on in the array.
  int64_t stored_positions() const {
    return dense_.empty() ? static_cast<int64_t>(swapped_.size()) : n_;
  }

  /// The seed of epoch `epoch`: `seed` for epoch 0, else a splitmix64 hash
  /// of `seed` mixed with the epoch number.
  static uint64_t EpochSeed(uint64_t seed, int64_t epoch);

 private:
  void StartEpoch(int64_t epoch);
  uint64_t NextRandom();
  /// Uniform in [0, bound), bound > 0.
  uint64_t Uniform(uint64_t bound);
  /// Moves the current epoch from the swap map into `dense_`.
  void MakeDense();

  int64_t n_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  int64_t next_position_ = 0;
  /// The swap partner of `next_position_`, drawn one call early so that the
  /// array's entry is prefetched; -1 when not drawn yet.
  int64_t next_partner_ = -1;
  uint64_t state_[4];
  int64_t dense_after_;
  /// Position -> id for positions >= next_position_ whose id differs from
  /// the position; empty once `dense_` is in use.
  absl::flat_hash_map<int64_t, int64_t> swapped_;
  /// Position -> id for every position (valid from next_position_ on) once
  /// the epoch went dense; empty before. 32-bit ids halve the array; an n
  /// beyond 2^32 stays in the map.
  std::vector<uint32_t> dense_;
};

/// How global batches (steps) are formed; see `StepBuilder`.
struct StepBuilderOptions {
  /// Token budget of one step (lengths truncated to the context window).
  /// Must be positive.
  int64_t tokens_per_step = 0;
  /// Seed of the shuffle (`ShuffledOrder`).
  uint64_t seed = 0;
  /// How many steps beyond the next one are kept formed so that samples can
  /// be moved between them to even out their estimated cost; 0 = off.
  int lookahead_steps = 0;
  /// Estimated cost of a sample of the given (truncated) length, used only
  /// by the look-ahead. Empty means `DefaultSampleCost`.
  std::function<double(int64_t length)> sample_cost;
};

/// The default look-ahead cost estimate: `len + len*len/8192`, linear work
/// plus attention that grows with the square of the length.
double DefaultSampleCost(int64_t length);

/// Forms global batches from a seeded shuffle of all samples by a token
/// budget.
///
/// Samples are taken in `ShuffledOrder`; each is added to the current step
/// while the step's tokens stay within `tokens_per_step`; the sample that
/// would overflow starts the next step. A step always has at least one
/// sample (a sample longer than the budget is a step of its own), and a step
/// never spans two epochs: the last step of an epoch holds what is left of
/// it, so within an epoch every sample is in exactly one step.
///
/// With `lookahead_steps = K > 0` the builder keeps the next K+1 steps formed
/// and, before emitting the first of them, greedily exchanges samples
/// between the heaviest step of the window and a lighter one of the same
/// epoch while that lowers the pair's larger estimated cost and keeps both
/// within the token budget. An exchange moves one sample one way and the
/// fewest shortest samples that make room for it the other way; at most
/// 16*(K+1) exchanges happen per emitted step. Samples are never dropped or
/// repeated and steps are emitted in the order they were formed; an emitted
/// step is final.
///
/// Thread-compatible; keeps a `LengthView`, so the length table must outlive
/// the builder. Memory is O(samples drawn), independent of the table size.
///
///   ASSIGN_OR_RETURN(StepBuilder builder,
///                    StepBuilder::Create(lengths, {.tokens_per_step = 1 << 20,
///                                                  .seed = 7}));
///   ASSIGN_OR_RETURN(std::vector<int64_t> step0, builder.NextStep());
class StepBuilder {
 public:
  /// INVALID_ARGUMENT for an empty length table, a non-positive token budget
  /// or a negative look-ahead.
  static absl::StatusOr<StepBuilder> Create(LengthView lengths,
                                            StepBuilderOptions options);

  StepBuilder(StepBuilder&&) = default;
  StepBuilder& operator=(StepBuilder&&) = default;

  /// Sample ids of the next step, in shuffled order (samples the look-ahead
  /// moved in come last). INVALID_ARGUMENT when a drawn sample has a
  /// non-positive length; the builder must not be used after an error.
  absl::StatusOr<std::vector<int64_t>> NextStep();

  /// Number of steps emitted so far.
  int64_t steps_emitted() const { return steps_emitted_; }

 private:
  struct FormedStep {
    std::vector<int64_t> samples;
    int64_t tokens = 0;
    double cost = 0;
    int64_t epoch = 0;
  };

  StepBuilder(LengthView lengths, StepBuilderOptions options);

  /// A sample as drawn from the shuffle.
  struct Drawn {
    int64_t id = -1;
    int64_t epoch = 0;
    bool ends_epoch = false;  // the last sample of its epoch
  };
  /// The next sample of the shuffle. Samples are drawn `kDrawAhead` ahead
  /// of use and their lengths prefetched: a step reads the length table in
  /// shuffled order, a cache miss a sample otherwise.
  Drawn Draw();
  static constexpr int kDrawAhead = 16;

  absl::StatusOr<FormedStep> FormStep();
  /// Moves samples between the steps of `window_` (see the class comment).
  void Rebalance();
  /// One sample of `a` goes to `b` and the `k` shortest samples of `b` go
  /// to `a`; `one` < 0 when no such exchange lowers the pair's larger cost
  /// below the bar.
  struct Exchange {
    int one = -1;
    size_t k = 0;
    double max_cost = 0;
  };
  Exchange BestExchange(const FormedStep& a, const FormedStep& b,
                        double bar) const;
  void Apply(const Exchange& exchange, FormedStep& a, FormedStep& b) const;
  std::vector<int> ShortestFirst(const FormedStep& step) const;
  /// One exchange between the heaviest step of the window and a lighter
  /// step of its epoch (lightest first); false when none helps.
  bool ImproveOnce();
  double SampleCost(int64_t id) const;

  LengthView lengths_;
  StepBuilderOptions options_;
  ShuffledOrder order_;
  /// Drawn samples not yet used: a ring of `ahead_count_` from `ahead_head_`.
  std::array<Drawn, kDrawAhead> ahead_;
  int ahead_head_ = 0;
  int ahead_count_ = 0;
  /// A drawn sample that did not fit the previous step; id -1 when none.
  Drawn carried_;
  std::deque<FormedStep> window_;
  int64_t steps_emitted_ = 0;
};

/// The first `num_steps` steps of a `StepBuilder` over `lengths`.
absl::StatusOr<std::vector<std::vector<int64_t>>> BuildSteps(
    LengthView lengths, const StepBuilderOptions& options, int64_t num_steps);

}  // namespace dcp

#endif  // DCP_SCHEDULER_PLANNER_STEP_BUILDER_H_
