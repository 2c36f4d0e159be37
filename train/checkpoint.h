#ifndef DCP_TRAIN_CHECKPOINT_H_
#define DCP_TRAIN_CHECKPOINT_H_

#include <functional>

#include "ATen/core/Tensor.h"
#include "absl/status/statusor.h"

namespace dcp::train {

/// A function of one activation tensor, e.g. a transformer layer. It may read
/// parameters it holds itself and may communicate (its collectives then run
/// again, in the same order, when the backward pass recomputes it).
using LayerFunction = std::function<at::Tensor(const at::Tensor&)>;

/// How Checkpoint recomputes. Plain value type.
struct CheckpointOptions {
  /// Restore the default CPU generator's state before recomputing, so random
  /// ops (dropout) draw the same numbers as in the forward pass. Costs a copy
  /// of the generator state per call; off by default because dcp's models
  /// draw nothing.
  bool preserve_rng_state = false;
};

/// Activation recompute: returns fn(input) while keeping only `input`; the
/// backward pass re-runs fn with gradients enabled and back-propagates
/// through that recomputation. `params` must list every tensor fn reads that
/// needs a gradient (other than input); their gradients reach them through
/// the ordinary autograd graph, so both Tensor::backward and
/// torch::autograd::grad see them.
///
/// Gradients equal those of calling fn directly (bitwise for deterministic
/// fn). Errors thrown by fn in the forward pass come back as INTERNAL naming
/// the failure; errors in the recomputation surface from the backward call
/// (see Backward in transformer.h). Stateless and thread-safe; fn and params
/// are kept alive by the autograd graph until it is freed.
absl::StatusOr<at::Tensor> Checkpoint(LayerFunction fn, const at::Tensor& input,
                                      const std::vector<at::Tensor>& params,
                                      CheckpointOptions options = {});

}  // namespace dcp::train

#endif  // DCP_TRAIN_CHECKPOINT_H_
