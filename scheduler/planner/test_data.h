#ifndef DCP_SCHEDULER_PLANNER_TEST_DATA_H_
#define DCP_SCHEDULER_PLANNER_TEST_DATA_H_

// Small models and traces the scheduler's tests share (testonly).

#include <cstdint>
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

/// A deterministic trace of `n` lengths from `seed`: 90% short (128-3724
/// tokens), 10% long (8192-27992 tokens).
inline std::vector<int32_t> SkewedTrace(int n, uint64_t seed) {
  std::vector<int32_t> lengths;
  uint64_t x = seed;
  for (int i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const int32_t r = static_cast<int32_t>((x >> 33) % 1000);
    lengths.push_back(r < 900 ? 128 + r * 4 : 8192 + (r - 900) * 200);
  }
  return lengths;
}

}  // namespace testing_data
}  // namespace dcp

#endif  // DCP_SCHEDULER_PLANNER_TEST_DATA_H_
