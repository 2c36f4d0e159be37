#include "kernels/ulysses_attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dcp {
namespace {

absl::Status CheckOptions(const AttentionOptions& options) {
  if (options.num_heads <= 0 || options.head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention needs num_heads > 0 and head_dim > 0, got num_heads=",
        options.num_heads, " head_dim=", options.head_dim));
  }
  if (!(options.scale >= 0.0f) || std::isinf(options.scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention scale must be finite and >= 0 (0: default), "
                     "got ",
                     options.scale));
  }
  return absl::OkStatus();
}

absl::Status CheckSeqlens(absl::Span<const int64_t> cu_seqlens,
                          int64_t num_tokens) {
  if (cu_seqlens.size() < 2 || cu_seqlens.front() != 0 ||
      cu_seqlens.back() != num_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cu_seqlens must start at 0 and end at the number of tokens (",
        num_tokens, "), with at least one sequence"));
  }
  for (size_t i = 1; i < cu_seqlens.size(); ++i) {
    if (cu_seqlens[i] < cu_seqlens[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("cu_seqlens must be non-decreasing; entry ", i, " is ",
                       cu_seqlens[i], " < ", cu_seqlens[i - 1]));
    }
  }
  return absl::OkStatus();
}

// Attention of `heads` heads over `num_tokens` packed tokens; all arrays are
// [num_tokens, heads, head_dim]. Sums are accumulated in double so the result
// does not depend on how tokens are split across ranks.
void Attend(const float* q, const float* k, const float* v,
            absl::Span<const int64_t> cu_seqlens, int heads, int head_dim,
            bool causal, float scale, float* out) {
  const int64_t stride = static_cast<int64_t>(heads) * head_dim;
  std::vector<double> scores;
  std::vector<double> acc(head_dim);
  for (size_t s = 0; s + 1 < cu_seqlens.size(); ++s) {
    const int64_t begin = cu_seqlens[s];
    const int64_t end = cu_seqlens[s + 1];
    for (int64_t i = begin; i < end; ++i) {
      const int64_t last = causal ? i + 1 : end;
      scores.resize(last - begin);
      for (int h = 0; h < heads; ++h) {
        const float* qi = q + i * stride + h * head_dim;
        double max_score = -INFINITY;
        for (int64_t j = begin; j < last; ++j) {
          const float* kj = k + j * stride + h * head_dim;
          double dot = 0.0;
          for (int d = 0; d < head_dim; ++d) dot += double{qi[d]} * kj[d];
          scores[j - begin] = dot * scale;
          max_score = std::max(max_score, scores[j - begin]);
        }
        double denominator = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = begin; j < last; ++j) {
          const double weight = std::exp(scores[j - begin] - max_score);
          denominator += weight;
          const float* vj = v + j * stride + h * head_dim;
          for (int d = 0; d < head_dim; ++d) acc[d] += weight * vj[d];
        }
        float* oi = out + i * stride + h * head_dim;
        for (int d = 0; d < head_dim; ++d) {
          oi[d] = static_cast<float>(acc[d] / denominator);
        }
      }
    }
  }
}

float Scale(const AttentionOptions& options) {
  return options.scale > 0.0f
             ? options.scale
             : 1.0f / std::sqrt(static_cast<float>(options.head_dim));
}

}  // namespace

absl::Status ReferenceAttention(absl::Span<const float> q,
                                absl::Span<const float> k,
                                absl::Span<const float> v,
                                absl::Span<const int64_t> cu_seqlens,
                                const AttentionOptions& options,
                                absl::Span<float> out) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  const size_t stride = static_cast<size_t>(options.num_heads) *
                        static_cast<size_t>(options.head_dim);
  if (q.size() % stride != 0 || k.size() != q.size() || v.size() != q.size() ||
      out.size() != q.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("q, k, v and out must all be [tokens, ", options.num_heads,
                     ", ", options.head_dim, "]; sizes are ", q.size(), ", ",
                     k.size(), ", ", v.size(), ", ", out.size()));
  }
  const int64_t num_tokens = static_cast<int64_t>(q.size() / stride);
  if (absl::Status s = CheckSeqlens(cu_seqlens, num_tokens); !s.ok()) return s;
  Attend(q.data(), k.data(), v.data(), cu_seqlens, options.num_heads,
         options.head_dim, options.causal, Scale(options), out.data());
  return absl::OkStatus();
}

absl::Status UlyssesAttention(Communicator& comm, absl::Span<const float> q,
                              absl::Span<const float> k,
                              absl::Span<const float> v,
                              absl::Span<const int64_t> cu_seqlens,
                              const AttentionOptions& options,
                              absl::Span<float> out) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  const int p = comm.size();
  const int num_heads = options.num_heads;
  const int head_dim = options.head_dim;
  if (num_heads % p != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Ulysses attention splits heads across the group: num_heads (",
        num_heads, ") must be divisible by the group size (", p,
        "); use a group size that divides it"));
  }
  const size_t stride =
      static_cast<size_t>(num_heads) * static_cast<size_t>(head_dim);
  if (q.size() % stride != 0 || k.size() != q.size() || v.size() != q.size() ||
      out.size() != q.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("q, k, v and out must all be [local tokens, ", num_heads,
                     ", ", head_dim, "]; sizes are ", q.size(), ", ", k.size(),
                     ", ", v.size(), ", ", out.size()));
  }
  const int64_t t = static_cast<int64_t>(q.size() / stride);
  const int64_t total = t * p;
  if (absl::Status s = CheckSeqlens(cu_seqlens, total); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.message(), " (", p, " ranks x ", t, " local tokens)"));
  }

  const int h = num_heads / p;  // Heads per rank after the exchange.
  const size_t block = static_cast<size_t>(h) * head_dim;  // One token's part.
  const size_t tensor_block = static_cast<size_t>(t) * block;
  // q, k and v travel in one all-to-all: the block for rank j is
  // [3][t][h][head_dim], the heads j owns, of this rank's tokens.
  const size_t per_peer = 3 * tensor_block;
  std::vector<float> send(per_peer * p);
  const absl::Span<const float> inputs[3] = {q, k, v};
  for (int j = 0; j < p; ++j) {
    for (int x = 0; x < 3; ++x) {
      float* dst = send.data() + j * per_peer + x * tensor_block;
      for (int64_t i = 0; i < t; ++i) {
        const float* src = inputs[x].data() + i * stride + j * block;
        std::copy(src, src + block, dst + i * block);
      }
    }
  }
  std::vector<float> recv(per_peer * p);
  if (absl::Status s = comm.AllToAll(send.data(), recv.data(), per_peer);
      !s.ok()) {
    return s;
  }

  // Block i of `recv` holds rank i's tokens, which come i-th in the batch:
  // gathering blocks in rank order gives [T][h][head_dim] for each tensor.
  std::vector<float> full[3];
  for (int x = 0; x < 3; ++x) {
    full[x].resize(static_cast<size_t>(total) * block);
    for (int i = 0; i < p; ++i) {
      const float* src = recv.data() + i * per_peer + x * tensor_block;
      std::copy(src, src + tensor_block, full[x].data() + i * tensor_block);
    }
  }
  std::vector<float> attended(static_cast<size_t>(total) * block);
  Attend(full[0].data(), full[1].data(), full[2].data(), cu_seqlens, h,
         head_dim, options.causal, Scale(options), attended.data());

  // Back: tokens [i*t, (i+1)*t) of `attended` are rank i's, contiguous.
  std::vector<float> back(tensor_block * p);
  if (absl::Status s =
          comm.AllToAll(attended.data(), back.data(), tensor_block);
      !s.ok()) {
    return s;
  }
  // Block j holds heads [j*h, (j+1)*h) of this rank's tokens.
  for (int j = 0; j < p; ++j) {
    for (int64_t i = 0; i < t; ++i) {
      const float* src = back.data() + j * tensor_block + i * block;
      std::copy(src, src + block, out.data() + i * stride + j * block);
    }
  }
  return absl::OkStatus();
}

}  // namespace dcp
