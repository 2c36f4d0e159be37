#ifndef DCP_TRAIN_TRANSFORMER_H_
#define DCP_TRAIN_TRANSFORMER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ATen/core/Tensor.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_spec.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace dcp::train {

struct TransformerWeights;

/// What a Transformer is: its shape, number type and initial weights.
/// Plain value type.
struct TransformerOptions {
  /// layers, hidden, heads, kv_heads, ffn, vocab, causal. hidden / heads
  /// (the head dimension) must be even (rotary positions).
  ModelSpec model;
  /// at::kFloat or at::kDouble.
  at::ScalarType dtype = at::kFloat;
  /// Weights are drawn (in float64, then cast) from a generator seeded with
  /// this, so every process building the same options gets the same
  /// weights, and float32 weights are the float64 ones rounded.
  uint64_t seed = 0;
  /// DiT variant only (model.causal == false): features per token of the
  /// input and of the predicted output. 0 means model.hidden.
  int64_t feature_dim = 0;
  double rope_theta = 10000.0;
  double norm_eps = 1e-6;
};

/// One packed task, whole: samples back to back, `cu_seqlens` their
/// boundaries (cu_seqlens[0] == 0, cu_seqlens.back() == T).
///
/// Decoder (causal): inputs and targets are int64 [T] token ids, and
/// targets[t] is the token to predict at position t (the caller shifts, so
/// every position of a sample has a target and a sample of L positions has
/// L loss terms). DiT: inputs and targets are [T, feature_dim] in the model's
/// dtype.
struct PackedTask {
  std::vector<int64_t> cu_seqlens;
  /// The plan's loss weight of each sample.
  std::vector<double> loss_weights;
  at::Tensor inputs;
  at::Tensor targets;
  /// The plan's activation-recompute ratio r in [0, 1]: the first
  /// round(r * layers) layers (half away from zero) are checkpointed.
  double recompute_ratio = 0.0;
};

/// One rank's part of a PackedTask: the same fields except that inputs and
/// targets hold only this rank's shard, shard_tokens rows (see PackLayout in
/// sequence_layout.h; the pack is padded at its end to shard_tokens * p,
/// and padding rows may hold anything). cu_seqlens stays global.
struct TaskShard {
  std::vector<int64_t> cu_seqlens;
  std::vector<double> loss_weights;
  at::Tensor inputs;
  at::Tensor targets;
  double recompute_ratio = 0.0;
};

/// Cuts rank `rank`'s shard out of a whole task for a group of
/// `group_size`, padding the pack minimally (token 0 / zero features).
/// `ring_size` c > 1 lays the pack out for u = group_size / c Ulysses
/// inside a ring of c (zig-zag, see PackLayout); `rank` is then the member
/// index m = j * u + i. INVALID_ARGUMENT (naming the numbers) when c does
/// not divide the group.
absl::StatusOr<TaskShard> ShardTask(const PackedTask& task, int group_size,
                                    int rank, int ring_size = 1);

/// The groups one member of a task's group of p = u * c runs it on
/// (ring_spec.md): its Ulysses subgroup (size u, rank i) and its ring (size
/// c, rank j), so that its member index is m = j * u + i. A null group
/// stands for a group of one. Not owned beyond the references held.
struct SequenceGroups {
  c10::intrusive_ptr<c10d::ProcessGroup> ulysses;
  c10::intrusive_ptr<c10d::ProcessGroup> ring;
};

/// What one rank computes for its shard.
struct TaskResult {
  /// [shard_tokens, vocab] logits (decoder) or [shard_tokens, feature_dim]
  /// predictions (DiT); rows of padding tokens are unspecified (finite).
  at::Tensor output;
  /// [real tokens of the shard]: unweighted loss of each real token
  /// (cross-entropy, or mean squared error over features).
  at::Tensor token_loss;
  /// Scalar, the rank's share of the task's weighted loss:
  ///   sum over the shard's real tokens t of
  ///     token_loss[t] * loss_weight[s(t)] / length[s(t)]
  /// where s(t) is t's sample. Every token lives on exactly one rank, so the
  /// sum of `loss` over the group's ranks is the task's loss
  ///   sum over samples s of loss_weight[s] * mean_t token_loss(s, t).
  /// Back-propagating each rank's `loss` leaves on each rank's parameters
  /// that rank's share of the gradient; the sum over the group equals the
  /// gradient of the task's loss. A trainer sums `loss` over a rank's
  /// micro-steps and all-reduces (sums) gradients over the data-parallel
  /// world (every rank of the world, sequence-parallel peers included).
  at::Tensor loss;
};

/// A small transformer described by a ModelSpec, trained on packed tasks,
/// optionally Ulysses sequence-parallel.
///
/// Decoder (`causal`): token embedding; per layer RMSNorm -> attention with
/// rotary positions and grouped-query attention -> residual, RMSNorm ->
/// SwiGLU MLP -> residual; final RMSNorm; LM head (untied); per-token
/// cross-entropy. DiT (`!causal`): a linear input projection of per-token
/// features, the same blocks with bidirectional attention, final RMSNorm, an
/// output projection, per-token MSE. Attention is block-diagonal per sample
/// (causal within a sample for the decoder) and positions restart at 0 for
/// each sample.
///
/// Thread-compatible: one thread at a time per object (Run and backward
/// accumulate into the parameters' gradients). Each rank of a group holds
/// its own Transformer built from the same options.
///
///   ASSIGN_OR_RETURN(auto model, Transformer::Create(options));
///   ASSIGN_OR_RETURN(TaskShard shard, ShardTask(task, group->getSize(),
///                                               group->getRank()));
///   ASSIGN_OR_RETURN(TaskResult result, model->Run(shard, group));
///   RETURN_IF_ERROR(Backward(result.loss));
class Transformer {
 public:
  /// INVALID_ARGUMENT for an invalid ModelSpec, an odd head dimension or a
  /// dtype other than float32/float64.
  static absl::StatusOr<std::unique_ptr<Transformer>> Create(
      const TransformerOptions& options);

  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  /// Forward pass of this rank's shard. `group` is the task's
  /// sequence-parallel group (null or size 1: no communication); every rank
  /// of it must call Run with its own shard of the same task, and then
  /// Backward on its loss. Before any all-to-all the group agrees (one
  /// 5-integer all-reduce) that every rank accepted its shard, so a refusal
  /// on one rank fails all of them instead of hanging the others:
  /// INVALID_ARGUMENT on the rank with a malformed shard, a group size that
  /// does not divide heads (naming p and heads), a token id or target out of
  /// range, or ranks disagreeing on the shard or pack size; ABORTED on the
  /// ranks whose peer refused; UNAVAILABLE or INTERNAL if a collective or a
  /// torch op fails.
  absl::StatusOr<TaskResult> Run(
      const TaskShard& shard,
      const c10::intrusive_ptr<c10d::ProcessGroup>& group) const {
    return Run(shard, SequenceGroups{group, {}});
  }
  /// Run on a hybrid group: u-way Ulysses all-to-alls over
  /// `groups.ulysses` around ring attention over `groups.ring` (when the
  /// ring is longer than 1; else exactly the Ulysses path above). The shard
  /// is the member's part of the zig-zag layout (ShardTask with ring_size =
  /// c). The agreement runs over the subgroup, then the ring. Also
  /// INVALID_ARGUMENT on every member when u does not divide the heads
  /// (naming u, c and heads).
  absl::StatusOr<TaskResult> Run(const TaskShard& shard,
                                 const SequenceGroups& groups) const;
  /// Run without sequence parallelism (a group of one).
  absl::StatusOr<TaskResult> Run(const TaskShard& shard) const {
    return Run(shard, SequenceGroups());
  }

  /// Every parameter, in a fixed order (the same on every rank).
  std::vector<at::Tensor> parameters() const;
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;
  /// The module holding the parameters (for optimizers, saving, `to`).
  torch::nn::Module& module() const;
  const TransformerOptions& options() const { return options_; }

 private:
  Transformer(TransformerOptions options,
              std::unique_ptr<TransformerWeights> weights);

  TransformerOptions options_;
  std::unique_ptr<TransformerWeights> weights_;
};

/// loss.backward() with errors (a failed collective of a peer, a failed
/// recomputation) returned as INTERNAL naming the failure instead of thrown.
absl::Status Backward(const at::Tensor& loss);

}  // namespace dcp::train

#endif  // DCP_TRAIN_TRANSFORMER_H_
