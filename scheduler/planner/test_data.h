#ifndef DCP_SCHEDULER_PLANNER_TEST_DATA_H_
#define DCP_SCHEDULER_PLANNER_TEST_DATA_H_

// Small models and traces the scheduler's tests share (testonly): every
// test trace generator is here.

#include <cstdint>
#include <random>
#include <vector>

#include "common/model_spec.h"

namespace dcp {
namespace testing_data {

/// A model with round numbers so figures can be checked by hand:
/// 90000 parameters a layer, P = 280000.
inline ModelSpec TinyModel() {
  ModelSpec m;
  m.name = "tiny";
  m.layers = 2;
  m.hidden = 100;
  m.heads = 4;
  m.kv_heads = 2;
  m.ffn = 200;
  m.vocab = 1000;
  m.causal = true;
  return m;
}

/// A cluster with round numbers, 2 GPUs a node, for hand-checked figures
/// with `TinyModel`; `hbm_bytes` of memory a GPU (all of it usable).
inline ClusterSpec RoundCluster(double hbm_bytes) {
  ClusterSpec c;
  c.peak_flops = 1e12;
  c.hbm_bytes = hbm_bytes;
  c.usable_fraction = 1.0;
  c.gpus_per_node = 2;
  c.intra_node_bw = 1e9;
  c.intra_node_latency_s = 1e-6;
  c.inter_node_bw = 1e8;
  c.inter_node_latency_s = 2e-6;
  c.gemm_eff_max = 0.5;
  c.gemm_eff_half_tokens = 100;
  c.attn_eff_max = 0.5;
  c.attn_eff_half_tokens = 100;
  c.overhead_per_layer_s = 1e-3;
  c.grad_sync_bw = 1e9;
  return c;
}

/// The generator the LCG traces below draw from (Knuth's MMIX constants), so
/// that they do not depend on the standard library's distributions.
class Lcg {
 public:
  explicit Lcg(uint64_t seed) : state_(seed) {}
  /// The next 31 random bits.
  uint64_t Next() {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return state_ >> 33;
  }

 private:
  uint64_t state_;
};

/// A deterministic trace of `n` lengths from `seed`: 90% short (128-3724
/// tokens), 10% long (8192-27992 tokens).
inline std::vector<int32_t> SkewedTrace(int n, uint64_t seed) {
  std::vector<int32_t> lengths;
  Lcg rng(seed);
  for (int i = 0; i < n; ++i) {
    const int32_t r = static_cast<int32_t>(rng.Next() % 1000);
    lengths.push_back(r < 900 ? 128 + r * 4 : 8192 + (r - 900) * 200);
  }
  return lengths;
}

/// Mostly short with a heavy tail: 10% long (8192-32767 tokens), the rest
/// 100-999 tokens.
inline std::vector<int32_t> HeavyTailTrace(int n, uint64_t seed) {
  std::vector<int32_t> lengths(n);
  Lcg rng(seed);
  for (int i = 0; i < n; ++i) {
    const uint64_t r = rng.Next();
    lengths[i] = static_cast<int32_t>(r % 10 == 0 ? 8192 + (r / 10) % 24576
                                                  : 100 + (r / 10) % 900);
  }
  return lengths;
}

/// `n` lengths uniform in [lo, hi].
inline std::vector<int32_t> UniformTrace(int n, int lo, int hi,
                                         uint64_t seed) {
  std::vector<int32_t> lengths(n);
  Lcg rng(seed);
  for (int i = 0; i < n; ++i) {
    lengths[i] = lo + static_cast<int32_t>(rng.Next() % (hi - lo + 1));
  }
  return lengths;
}

/// Three tiers from std::mt19937(seed): 85% short (64-2063 tokens), 13%
/// medium (2000-21999), 2% long (`long_min` to `long_min + long_span - 1`).
inline std::vector<int32_t> ThreeTierTrace(int n, uint32_t seed,
                                           int32_t long_min,
                                           int32_t long_span) {
  std::mt19937 rng(seed);
  std::vector<int32_t> lengths;
  for (int i = 0; i < n; ++i) {
    const int kind = rng() % 100;
    if (kind < 85) {
      lengths.push_back(64 + rng() % 2000);
    } else if (kind < 98) {
      lengths.push_back(2000 + rng() % 20000);
    } else {
      lengths.push_back(long_min + rng() % long_span);
    }
  }
  return lengths;
}

}  // namespace testing_data
}  // namespace dcp

#endif  // DCP_SCHEDULER_PLANNER_TEST_DATA_H_
