#ifndef DCP_TRAIN_RING_ATTENTION_H_
#define DCP_TRAIN_RING_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/statusor.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"

namespace dcp::train {

/// Which keys each query may read, by global pack positions: for every ring
/// position r, the pack position and the sample of each token of r's ring
/// shard (ring_spec.md; PackLayout::RingShardPositions). A query reads a key
/// when both lie in the same sample (sample >= 0; -1 marks padding, which
/// reads nothing and is read by no one) and, when `causal`, the key's
/// position is at most the query's. Plain value type.
struct RingMask {
  bool causal = true;
  /// [c][S]: pack positions of ring position r's tokens.
  std::vector<std::vector<int64_t>> positions;
  /// [c][S]: their samples, -1 for padding.
  std::vector<std::vector<int64_t>> samples;
};

/// Blockwise (ring) attention over the c ring positions of `ring`: each
/// holds q [S, h, d] and k, v [S, e, d] of its ring shard (h a multiple of
/// e: grouped-query attention), and gets back its queries' attention over
/// every ring position's keys, [S, h, d], with softmax scale 1 / sqrt(d).
///
/// Forward: the K/V block travels round the ring (c - 1 passes, each a
/// send to ring rank j + 1 and a receive from j - 1, overlapped with the
/// current block's compute); block outputs merge by log-sum-exp, and a row
/// whose keys are all masked comes out zero. Backward recomputes the block
/// probabilities from the saved log-sum-exp, accumulates dQ locally and
/// sends the K/V blocks round again together with their dK/dV
/// accumulators, which arrive home after c passes. Send/recv tags differ
/// per pass and direction.
///
/// Differentiable in q, k, v. Every ring rank must make the same calls in
/// the same order (forward and backward); the group must outlive the
/// autograd graph, which holds a reference to it. A null group or a ring
/// of one computes the same locally. INVALID_ARGUMENT for shapes that do
/// not agree with each other or with `mask` (naming them); UNAVAILABLE
/// naming the ring if a send or receive fails. Thread-safe as far as the
/// group is.
///
///   RingMask mask = ...;  // from PackLayout::RingShardPositions / SampleAt
///   ASSIGN_OR_RETURN(at::Tensor out, RingAttention(q, k, v, mask, ring));
absl::StatusOr<at::Tensor> RingAttention(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const RingMask& mask, const c10::intrusive_ptr<c10d::ProcessGroup>& ring);

}  // namespace dcp::train

#endif  // DCP_TRAIN_RING_ATTENTION_H_
