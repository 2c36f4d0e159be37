#ifndef DCP_TRAIN_ULYSSES_H_
#define DCP_TRAIN_ULYSSES_H_

#include "ATen/core/Tensor.h"
#include "absl/status/statusor.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"

namespace dcp::train {

/// The two layout changes of Ulysses sequence parallelism over a group of p
/// ranks, each rank holding a contiguous shard of the (padded) sequence:
///
///   SequenceToHeads: [s/p, n, d] sequence-sharded -> [s, n/p, d]
///                    head-sharded (rank r gets heads [r n/p, (r+1) n/p) of
///                    every token, tokens in rank order);
///   HeadsToSequence: the inverse.
///
/// Both are differentiable: the backward of each is the other. The exchange
/// is one c10d `alltoall_base` with equal splits (empty split vectors) on a
/// contiguous [p, s/p, n/p, d] buffer, which Gloo 1.13 implements for CPU
/// tensors; NCCL offers the same op. A null group or a group of one does the
/// same reshapes without communication.
///
/// Every rank of the group must make the same calls in the same order
/// (forward and backward); the group must outlive the autograd graph, which
/// holds a reference to it. INVALID_ARGUMENT if x is not 3-d or n (resp. the
/// sequence) does not divide over p; UNAVAILABLE naming the group if the
/// collective fails. Thread-safe as far as the group is.
absl::StatusOr<at::Tensor> SequenceToHeads(
    const at::Tensor& x, const c10::intrusive_ptr<c10d::ProcessGroup>& group);

absl::StatusOr<at::Tensor> HeadsToSequence(
    const at::Tensor& x, const c10::intrusive_ptr<c10d::ProcessGroup>& group);

}  // namespace dcp::train

#endif  // DCP_TRAIN_ULYSSES_H_
