#ifndef DCP_KERNELS_ULYSSES_ATTENTION_H_
#define DCP_KERNELS_ULYSSES_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "comm/communicator.h"

namespace dcp {

/// Shape and masking of an attention layer over packed sequences.
///
/// Tensors are row-major [tokens, num_heads, head_dim] float arrays. The
/// tokens of several sequences are packed back to back; `cu_seqlens` holds
/// their boundaries (cu_seqlens[0] = 0, non-decreasing, the last entry is the
/// number of tokens), as in FlashAttention's varlen API: a token attends only
/// to tokens of its own sequence.
struct AttentionOptions {
  int num_heads = 0;
  int head_dim = 0;
  /// Whether a token attends only to itself and the tokens before it.
  bool causal = true;
  /// Softmax scale; 0 means 1 / sqrt(head_dim).
  float scale = 0.0f;
};

/// Scaled dot-product attention of every head over all tokens, in one
/// process: the reference the sequence-parallel layer is checked against.
/// `q`, `k`, `v` and `out` are [T, num_heads, head_dim]. INVALID_ARGUMENT for
/// inconsistent sizes or boundaries. Pure; thread-safe.
absl::Status ReferenceAttention(absl::Span<const float> q,
                                absl::Span<const float> k,
                                absl::Span<const float> v,
                                absl::Span<const int64_t> cu_seqlens,
                                const AttentionOptions& options,
                                absl::Span<float> out);

/// The Ulysses sequence-parallel attention layer, run by every member of
/// `comm` (p = comm.size() ranks).
///
/// Rank r holds the tokens [r*t, (r+1)*t) of the packed batch (T = p*t
/// tokens), all heads: `q`, `k`, `v` and `out` are [t, num_heads, head_dim].
/// One all-to-all turns them into all T tokens of num_heads/p heads (rank r
/// gets heads [r*h, (r+1)*h), h = num_heads/p); each rank attends over full
/// sequences for its heads; a second all-to-all brings every token's output
/// back to the rank that holds the token. `cu_seqlens` are the global
/// boundaries over all T tokens, identical on every rank.
///
/// INVALID_ARGUMENT when num_heads is not divisible by p or sizes disagree;
/// the communicator's error when a collective fails. Thread-compatible
/// (it runs collectives on `comm`).
///
/// This is the CPU version, over any Communicator (Gloo in tests). There is
/// no GPU version yet.
///
///   AttentionOptions options;
///   options.num_heads = 32;
///   options.head_dim = 128;
///   RETURN_IF_ERROR(UlyssesAttention(*comm, q, k, v, cu_seqlens, options,
///                                    absl::MakeSpan(out)));
absl::Status UlyssesAttention(Communicator& comm, absl::Span<const float> q,
                              absl::Span<const float> k,
                              absl::Span<const float> v,
                              absl::Span<const int64_t> cu_seqlens,
                              const AttentionOptions& options,
                              absl::Span<float> out);

}  // namespace dcp

#endif  // DCP_KERNELS_ULYSSES_ATTENTION_H_
