#ifndef DCP_TRAIN_TRANSFORMER_LAYERS_H_
#define DCP_TRAIN_TRANSFORMER_LAYERS_H_

// What transformer.cc (the model: shard checks, the forward pass, Create,
// Run) and transformer_layers.cc (the weights' initialization and one
// layer's forward pass: attention and MLP) share: the weights, the context
// every layer of a Run reads, and the Status carried through torch code.
// Private to the transformer library.

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"
#include "train/ring_attention.h"
#include "train/sequence_layout.h"
#include "train/transformer.h"

namespace dcp::train {

struct LayerWeights {
  at::Tensor attn_norm, wq, wk, wv, wo;
  at::Tensor mlp_norm, w_gate, w_up, w_down;

  std::vector<at::Tensor> All() const {
    return {attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down};
  }
};

// Weights use the nn::Linear layout [out, in]. Decoder: `input` is the token
// embedding [vocab, hidden] and `head` the LM head [vocab, hidden]; DiT:
// `input` is the input projection [hidden, features] (+ input_bias) and
// `head` the output projection [features, hidden] (+ head_bias).
struct TransformerWeights {
  torch::nn::Module module;
  std::vector<LayerWeights> layers;
  at::Tensor input, input_bias, final_norm, head, head_bias;
};

namespace transformer_internal {

// Carries a Status through torch code (layer functions, autograd) that can
// only throw; Run turns it back into the Status.
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(absl::Status status)
      : std::runtime_error(status.ToString()), status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

at::Tensor OrThrow(absl::StatusOr<at::Tensor> tensor);

// What every layer of one Run reads besides its weights. Shared with the
// checkpointed layers' closures, which the backward pass runs after Run.
struct RunContext {
  TransformerOptions options;
  HeadLayout heads;
  std::vector<int64_t> cu_seqlens;
  int64_t total_tokens = 0;
  at::Tensor cos, sin;  // [shard_tokens, 1, head_dim / 2]
  c10::intrusive_ptr<c10d::ProcessGroup> group;  // Ulysses (sub)group.
  c10::intrusive_ptr<c10d::ProcessGroup> ring;   // Null unless c > 1.
  RingMask ring_mask;
};

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// One layer: x + attention of its norm, then + the MLP of that one's norm.
at::Tensor LayerForward(const LayerWeights& w, const RunContext& c,
                        const at::Tensor& x);

// The weights of a model of `o`, drawn from a generator seeded with o.seed.
std::unique_ptr<TransformerWeights> InitWeights(const TransformerOptions& o);

}  // namespace transformer_internal
}  // namespace dcp::train

#endif  // DCP_TRAIN_TRANSFORMER_LAYERS_H_
