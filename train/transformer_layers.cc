// The transformer's layer and weights: one layer's forward pass (RMSNorm,
// rotary positions, Ulysses attention over the sequence-parallel group, with
// ring attention round a ring when there is one, and the SwiGLU MLP) and the
// initialization of every weight. transformer.cc holds the model around them.

#include "train/transformer_layers.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "train/ring_attention.h"
#include "train/sequence_layout.h"
#include "train/ulysses.h"

namespace dcp::train {
namespace transformer_internal {

namespace {

// Rotates the two halves of each head's dimensions by the token's angles.
at::Tensor Rope(const at::Tensor& x, const RunContext& c) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return at::cat({x1 * c.cos - x2 * c.sin, x2 * c.cos + x1 * c.sin}, -1);
}

// Attention over the whole padded pack for this rank's heads: q [S, h, d],
// k, v [S, e, d] with h a multiple of e. Block-diagonal per sample; padding
// rows come out zero and are read by no one.
at::Tensor VarlenAttention(const at::Tensor& q, const at::Tensor& k,
                           const at::Tensor& v, const RunContext& c) {
  const int64_t group = q.size(1) / k.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  std::vector<at::Tensor> pieces;
  for (size_t s = 0; s + 1 < c.cu_seqlens.size(); ++s) {
    const int64_t begin = c.cu_seqlens[s];
    const int64_t len = c.cu_seqlens[s + 1] - begin;
    at::Tensor qs = q.narrow(0, begin, len).transpose(0, 1);  // [h, L, d]
    at::Tensor ks = k.narrow(0, begin, len).transpose(0, 1);  // [e, L, d]
    at::Tensor vs = v.narrow(0, begin, len).transpose(0, 1);
    if (group > 1) {
      ks = ks.repeat_interleave(group, 0);
      vs = vs.repeat_interleave(group, 0);
    }
    at::Tensor scores = at::matmul(qs, ks.transpose(1, 2)) * scale;
    if (c.options.model.causal) {
      at::Tensor future = at::ones({len, len}, q.options().dtype(at::kBool))
                              .triu(/*diagonal=*/1);
      scores =
          scores.masked_fill(future, -std::numeric_limits<double>::infinity());
    }
    pieces.push_back(at::matmul(at::softmax(scores, -1), vs).transpose(0, 1));
  }
  const int64_t padding = q.size(0) - c.total_tokens;
  if (padding > 0) {
    pieces.push_back(at::zeros({padding, q.size(1), q.size(2)}, q.options()));
  }
  return at::cat(pieces, 0);
}

// Ulysses attention on the rank's shard x [s/p, hidden]: project and rotate
// on the shard, one all-to-all of q, k, v together to head-sharded, attention
// over the whole sequence (with a ring: over the ring shard, then round the
// ring), one all-to-all back.
at::Tensor Attention(const LayerWeights& w, const RunContext& c,
                     const at::Tensor& x) {
  const HeadLayout& hl = c.heads;
  const int64_t s_local = x.size(0), p = hl.group_size;
  const int64_t d = c.options.model.hidden / hl.heads;
  at::Tensor q = Rope(at::linear(x, w.wq).view({s_local, hl.heads, d}), c);
  at::Tensor k = Rope(at::linear(x, w.wk).view({s_local, hl.kv_heads, d}), c);
  at::Tensor v = at::linear(x, w.wv).view({s_local, hl.kv_heads, d});
  if (hl.kv_replication > 1) {
    k = k.repeat_interleave(hl.kv_replication, 1);
    v = v.repeat_interleave(hl.kv_replication, 1);
  }
  // Lay out, per destination rank, its query heads then its kv heads.
  const int64_t h = hl.local_heads(), e = hl.local_kv_heads();
  at::Tensor qkv =
      at::cat({q.reshape({s_local, p, h, d}), k.reshape({s_local, p, e, d}),
               v.reshape({s_local, p, e, d})},
              2)
          .reshape({s_local, p * (h + 2 * e), d});
  at::Tensor full = OrThrow(SequenceToHeads(qkv, c.group));  // [S, h+2e, d]
  at::Tensor out =
      c.ring ? OrThrow(RingAttention(full.narrow(1, 0, h), full.narrow(1, h, e),
                                     full.narrow(1, h + e, e), c.ring_mask,
                                     c.ring))
             : VarlenAttention(full.narrow(1, 0, h), full.narrow(1, h, e),
                               full.narrow(1, h + e, e), c);
  out = OrThrow(HeadsToSequence(out, c.group));  // [s/p, heads, d]
  return at::linear(out.reshape({s_local, hl.heads * d}), w.wo);
}

at::Tensor Mlp(const LayerWeights& w, const at::Tensor& x) {
  return at::linear(at::silu(at::linear(x, w.w_gate)) * at::linear(x, w.w_up),
                    w.w_down);
}

// Draws in float64 from `gen` so that weights do not depend on dtype.
at::Tensor Normal(at::Generator& gen, std::vector<int64_t> shape, double std,
                  at::ScalarType dtype) {
  return (at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble)) * std)
      .to(dtype);
}

}  // namespace

at::Tensor OrThrow(absl::StatusOr<at::Tensor> tensor) {
  if (!tensor.ok()) throw StatusError(tensor.status());
  return *std::move(tensor);
}

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * weight;
}

at::Tensor LayerForward(const LayerWeights& w, const RunContext& c,
                        const at::Tensor& x) {
  const double eps = c.options.norm_eps;
  at::Tensor h = x + Attention(w, c, RmsNorm(x, w.attn_norm, eps));
  return h + Mlp(w, RmsNorm(h, w.mlp_norm, eps));
}

std::unique_ptr<TransformerWeights> InitWeights(const TransformerOptions& o) {
  const ModelSpec& m = o.model;
  const int64_t d = m.hidden / m.heads;
  const int64_t features = o.feature_dim > 0 ? o.feature_dim : m.hidden;
  const double in_std = 1.0 / std::sqrt(static_cast<double>(m.hidden));
  const double out_std = in_std / std::sqrt(2.0 * m.layers);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  auto w = std::make_unique<TransformerWeights>();
  auto ones = [&](int64_t n) { return at::ones({n}, at::dtype(o.dtype)); };
  auto zeros = [&](int64_t n) { return at::zeros({n}, at::dtype(o.dtype)); };
  torch::nn::Module& root = w->module;
  if (m.causal) {
    w->input = root.register_parameter(
        "embed", Normal(gen, {m.vocab, m.hidden}, 1.0, o.dtype));
  } else {
    w->input = root.register_parameter(
        "input_proj",
        Normal(gen, {m.hidden, features},
               1.0 / std::sqrt(static_cast<double>(features)), o.dtype));
    w->input_bias = root.register_parameter("input_bias", zeros(m.hidden));
  }
  auto layers =
      root.register_module("layers", std::make_shared<torch::nn::Module>());
  const double ffn_std =
      1.0 / std::sqrt(static_cast<double>(m.ffn)) / std::sqrt(2.0 * m.layers);
  for (int l = 0; l < m.layers; ++l) {
    auto layer = layers->register_module(std::to_string(l),
                                         std::make_shared<torch::nn::Module>());
    auto param = [&](const char* name, at::Tensor t) {
      return layer->register_parameter(name, std::move(t));
    };
    LayerWeights lw;
    lw.attn_norm = param("attn_norm", ones(m.hidden));
    lw.wq = param("wq", Normal(gen, {m.heads * d, m.hidden}, in_std, o.dtype));
    lw.wk =
        param("wk", Normal(gen, {m.kv_heads * d, m.hidden}, in_std, o.dtype));
    lw.wv =
        param("wv", Normal(gen, {m.kv_heads * d, m.hidden}, in_std, o.dtype));
    lw.wo = param("wo", Normal(gen, {m.hidden, m.heads * d}, out_std, o.dtype));
    lw.mlp_norm = param("mlp_norm", ones(m.hidden));
    lw.w_gate =
        param("w_gate", Normal(gen, {m.ffn, m.hidden}, in_std, o.dtype));
    lw.w_up = param("w_up", Normal(gen, {m.ffn, m.hidden}, in_std, o.dtype));
    lw.w_down =
        param("w_down", Normal(gen, {m.hidden, m.ffn}, ffn_std, o.dtype));
    w->layers.push_back(std::move(lw));
  }
  w->final_norm = root.register_parameter("final_norm", ones(m.hidden));
  const int64_t out_dim = m.causal ? m.vocab : features;
  w->head = root.register_parameter(
      m.causal ? "lm_head" : "output_proj",
      Normal(gen, {out_dim, m.hidden}, in_std, o.dtype));
  if (!m.causal)
    w->head_bias = root.register_parameter("output_bias", zeros(out_dim));
  return w;
}

}  // namespace transformer_internal
}  // namespace dcp::train
