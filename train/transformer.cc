// The transformer model around its layers: the checks of a shard and the
// group's agreement on it, the forward pass over the layers and the losses
// of the shard's tokens, ShardTask, Transformer's Create and Run, and
// Backward. One layer's forward pass and the weights' initialization are in
// transformer_layers.cc.

#include "train/transformer.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "train/checkpoint.h"
#include "train/ring_attention.h"
#include "train/sequence_layout.h"
#include "train/transformer_layers.h"

namespace dcp::train {

using transformer_internal::InitWeights;
using transformer_internal::LayerForward;
using transformer_internal::OrThrow;
using transformer_internal::RmsNorm;
using transformer_internal::RunContext;
using transformer_internal::StatusError;

namespace {

int64_t Features(const TransformerOptions& o) {
  return o.feature_dim > 0 ? o.feature_dim : o.model.hidden;
}

// Checks one tensor of a shard or task: `rows` rows, int64 token ids below
// vocab (decoder, real rows only) or [rows, features] in the model dtype.
absl::Status CheckTokens(const TransformerOptions& o, const at::Tensor& t,
                         const char* what, int64_t rows, int64_t real_rows) {
  if (!t.defined())
    return absl::InvalidArgumentError(absl::StrCat(what, " is undefined"));
  if (o.model.causal) {
    if (t.scalar_type() != at::kLong || t.dim() != 1 || t.size(0) != rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " must be int64 token ids of shape [", rows, "], got ",
          c10::toString(t.scalar_type()), " ", c10::str(t.sizes())));
    }
    if (real_rows > 0) {
      at::Tensor real = t.narrow(0, 0, real_rows);
      const int64_t lo = real.min().item<int64_t>();
      const int64_t hi = real.max().item<int64_t>();
      if (lo < 0 || hi >= o.model.vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " holds token ids in [", lo, ", ", hi,
                         "], outside the vocabulary [0, ", o.model.vocab, ")"));
      }
    }
    return absl::OkStatus();
  }
  if (t.scalar_type() != o.dtype || t.dim() != 2 || t.size(0) != rows ||
      t.size(1) != Features(o)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be ", c10::toString(o.dtype),
                     " features of shape [", rows, ", ", Features(o), "], got ",
                     c10::toString(t.scalar_type()), " ", c10::str(t.sizes())));
  }
  return absl::OkStatus();
}

absl::Status CheckPlanFields(const TransformerOptions& o, int num_samples,
                             const std::vector<double>& loss_weights,
                             double recompute_ratio) {
  if (static_cast<int>(loss_weights.size()) != num_samples) {
    return absl::InvalidArgumentError(
        absl::StrCat("the task has ", num_samples, " samples but ",
                     loss_weights.size(), " loss weights"));
  }
  for (double w : loss_weights) {
    if (!std::isfinite(w)) {
      return absl::InvalidArgumentError("loss weights must be finite");
    }
  }
  if (!(recompute_ratio >= 0.0 && recompute_ratio <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "recompute ratio must lie in [0, 1], got ", recompute_ratio));
  }
  return absl::OkStatus();
}

// Zero rows appended to a shard's tensor (decoder: token 0).
at::Tensor PadRows(const at::Tensor& t, int64_t rows) {
  if (rows == 0) return t;
  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
  shape[0] = rows;
  return at::cat({t, at::zeros(shape, t.options())}, 0);
}

// Rotary angles of the shard's tokens: [shard_tokens, 1, head_dim / 2].
std::pair<at::Tensor, at::Tensor> RotaryTables(const TransformerOptions& o,
                                               const PackLayout& layout,
                                               int rank) {
  const int64_t half = o.model.hidden / o.model.heads / 2;
  const std::vector<int64_t> positions = layout.ShardPositions(rank);
  at::Tensor pos = at::tensor(positions, at::kLong).to(at::kDouble);
  at::Tensor inv_freq = at::pow(
      o.rope_theta, -at::arange(half, at::kDouble) / static_cast<double>(half));
  at::Tensor angles = at::outer(pos, inv_freq).unsqueeze(1);
  return {angles.cos().to(o.dtype), angles.sin().to(o.dtype)};
}

// The weights' forward pass over the rank's shard, then the losses of its
// real tokens (see TaskResult for the convention).
TaskResult Forward(const TransformerWeights& w, const TaskShard& shard,
                   const PackLayout& layout, int rank,
                   std::shared_ptr<const RunContext> context) {
  const TransformerOptions& o = context->options;
  const int64_t rows = layout.shard_tokens();
  const int64_t real = layout.RealTokensInShard(rank);
  // Padding rows are replaced so that whatever the caller left there (huge
  // values, NaN) never reaches an op.
  at::Tensor x = PadRows(shard.inputs.narrow(0, 0, real), rows - real);
  x = o.model.causal ? w.input.index_select(0, x)
                     : at::linear(x, w.input, w.input_bias);
  const int checkpointed =
      static_cast<int>(std::lround(shard.recompute_ratio * o.model.layers));
  for (int l = 0; l < o.model.layers; ++l) {
    const LayerWeights& lw = w.layers[l];
    if (l < checkpointed) {
      x = OrThrow(Checkpoint(
          [lw, context](const at::Tensor& in) {
            return LayerForward(lw, *context, in);
          },
          x, lw.All()));
    } else {
      x = LayerForward(lw, *context, x);
    }
  }
  TaskResult result;
  result.output =
      at::linear(RmsNorm(x, w.final_norm, o.norm_eps), w.head, w.head_bias);
  at::Tensor out = result.output.narrow(0, 0, real);
  at::Tensor target = shard.targets.narrow(0, 0, real);
  if (o.model.causal) {
    result.token_loss =
        -at::log_softmax(out, -1).gather(1, target.unsqueeze(1)).squeeze(1);
  } else {
    result.token_loss = (out - target).pow(2).mean(-1);
  }
  // weight / length of each real token's sample.
  std::vector<double> scale;
  scale.reserve(real);
  for (int s : layout.ShardSampleIds(rank)) {
    scale.push_back(shard.loss_weights[s] /
                    static_cast<double>(layout.SampleLength(s)));
  }
  at::Tensor token_scale = at::tensor(scale, at::kDouble).to(o.dtype);
  result.loss = (result.token_loss * token_scale).sum();
  return result;
}

struct CheckedShard {
  HeadLayout heads;
  PackLayout layout;
};

// This rank's own checks of its shard.
absl::StatusOr<CheckedShard> CheckShard(const TransformerOptions& o,
                                        const TaskShard& shard, int u, int c,
                                        int rank) {
  if (c > 1 && o.model.heads % u != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hybrid sequence parallelism needs the Ulysses degree u to divide the "
        "attention heads: u = ",
        u, ", heads = ", o.model.heads, " (group of p = ", u * c,
        " as a ring of c = ", c, ")"));
  }
  ASSIGN_OR_RETURN(HeadLayout heads,
                   HeadLayout::Create(o.model.heads, o.model.kv_heads, u));
  if (!shard.inputs.defined() || shard.inputs.dim() < 1 ||
      shard.inputs.size(0) == 0) {
    return absl::InvalidArgumentError("shard inputs are undefined or empty");
  }
  ASSIGN_OR_RETURN(
      PackLayout layout,
      PackLayout::Create(shard.cu_seqlens, u * c, shard.inputs.size(0), c));
  RETURN_IF_ERROR(CheckPlanFields(o, layout.num_samples(), shard.loss_weights,
                                  shard.recompute_ratio));
  const int64_t rows = layout.shard_tokens();
  const int64_t real = layout.RealTokensInShard(rank);
  try {
    RETURN_IF_ERROR(CheckTokens(o, shard.inputs, "shard inputs", rows, real));
    RETURN_IF_ERROR(CheckTokens(o, shard.targets, "shard targets", rows, real));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("checking the shard failed: ", e.what()));
  }
  return CheckedShard{heads, std::move(layout)};
}

// A rank that refuses its shard must not leave its peers waiting in the
// first all-to-all, so the group agrees (one small all-reduce) on whether
// every rank accepted and on the shard and pack sizes before any exchange.
int SizeOf(const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  return group ? group->getSize() : 1;
}

int RankOf(const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  return group ? group->getRank() : 0;
}

// With a ring the vote runs over the Ulysses subgroup, then over the ring:
// MIN of MINs is the whole group's MIN.
absl::Status AgreeOnShard(const absl::Status& local, const TaskShard& shard,
                          const SequenceGroups& groups) {
  const int p = SizeOf(groups.ulysses) * SizeOf(groups.ring);
  if (p == 1) return local;
  const int64_t rows = shard.inputs.defined() && shard.inputs.dim() >= 1
                           ? shard.inputs.size(0)
                           : -1;
  const int64_t total = shard.cu_seqlens.empty() ? -1 : shard.cu_seqlens.back();
  // MIN of [ok, rows, -rows, total, -total] gives min and max of each.
  std::vector<at::Tensor> votes = {
      at::tensor({int64_t{local.ok()}, rows, -rows, total, -total}, at::kLong)};
  try {
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::MIN;
    for (const auto* group : {&groups.ulysses, &groups.ring}) {
      if (SizeOf(*group) > 1) (*group)->allreduce(votes, options)->wait();
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "agreeing on the task over the sequence-parallel group of ", p,
        " failed: ", e.what()));
  }
  if (!local.ok()) return local;
  const auto v = votes[0].accessor<int64_t, 1>();
  if (v[0] == 0) {
    return absl::AbortedError(
        absl::StrCat("another rank of the sequence-parallel group of ", p,
                     " refused its shard of this task"));
  }
  if (v[1] != -v[2] || v[3] != -v[4]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ranks of the sequence-parallel group disagree on the task: shard "
        "rows from ",
        v[1], " to ", -v[2], ", packed tokens from ", v[3], " to ", -v[4]));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TaskShard> ShardTask(const PackedTask& task, int group_size,
                                    int rank, int ring_size) {
  ASSIGN_OR_RETURN(
      PackLayout layout,
      PackLayout::Create(task.cu_seqlens, group_size, 0, ring_size));
  if (rank < 0 || rank >= group_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside a group of ", group_size));
  }
  const int64_t total = layout.total_tokens();
  for (const at::Tensor* t : {&task.inputs, &task.targets}) {
    if (!t->defined() || t->dim() < 1 || t->size(0) != total) {
      return absl::InvalidArgumentError(
          absl::StrCat("task inputs and targets must have ", total,
                       " rows (cu_seqlens.back())"));
    }
  }
  const int64_t real = layout.RealTokensInShard(rank);
  const int64_t begin = std::min(layout.ShardBegin(rank), total);
  const int64_t padding = layout.shard_tokens() - real;
  TaskShard shard;
  shard.cu_seqlens = task.cu_seqlens;
  shard.loss_weights = task.loss_weights;
  shard.recompute_ratio = task.recompute_ratio;
  if (ring_size == 1) {
    shard.inputs = PadRows(task.inputs.narrow(0, begin, real), padding);
    shard.targets = PadRows(task.targets.narrow(0, begin, real), padding);
    return shard;
  }
  // Zig-zag: the real tokens (the shard's first) may come from two chunks.
  std::vector<int64_t> positions = layout.ShardGlobalPositions(rank);
  positions.resize(real);
  try {
    at::Tensor index = at::tensor(positions, at::kLong);
    shard.inputs = PadRows(task.inputs.index_select(0, index), padding);
    shard.targets = PadRows(task.targets.index_select(0, index), padding);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cutting the shard failed: ", e.what()));
  }
  return shard;
}

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::Create(
    const TransformerOptions& options) {
  RETURN_IF_ERROR(ValidateModelSpec(options.model));
  const ModelSpec& m = options.model;
  if (m.hidden % m.heads != 0 || (m.hidden / m.heads) % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("hidden (", m.hidden, ") / heads (", m.heads,
                     ") must be an even head dimension for rotary positions"));
  }
  if (m.causal && m.vocab <= 0) {
    return absl::InvalidArgumentError("a decoder needs vocab > 0");
  }
  if (options.dtype != at::kFloat && options.dtype != at::kDouble) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype must be float32 or float64, got ",
                     c10::toString(options.dtype)));
  }
  if (options.feature_dim < 0) {
    return absl::InvalidArgumentError("feature_dim must be >= 0");
  }
  try {
    return std::unique_ptr<Transformer>(
        new Transformer(options, InitWeights(options)));
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("initializing the transformer failed: ", e.what()));
  }
}

Transformer::Transformer(TransformerOptions options,
                         std::unique_ptr<TransformerWeights> weights)
    : options_(std::move(options)), weights_(std::move(weights)) {}

Transformer::~Transformer() = default;

absl::StatusOr<TaskResult> Transformer::Run(
    const TaskShard& shard, const SequenceGroups& groups) const {
  const int u = SizeOf(groups.ulysses), c = SizeOf(groups.ring);
  const int rank = RankOf(groups.ring) * u + RankOf(groups.ulysses);
  absl::StatusOr<CheckedShard> checked =
      CheckShard(options_, shard, u, c, rank);
  RETURN_IF_ERROR(AgreeOnShard(checked.status(), shard, groups));
  try {
    auto context = std::make_shared<RunContext>();
    context->options = options_;
    context->heads = checked->heads;
    context->cu_seqlens = checked->layout.cu_seqlens();
    context->total_tokens = checked->layout.total_tokens();
    std::tie(context->cos, context->sin) =
        RotaryTables(options_, checked->layout, rank);
    context->group = groups.ulysses;
    if (c > 1) {
      context->ring = groups.ring;
      context->ring_mask.causal = options_.model.causal;
      for (int j = 0; j < c; ++j) {
        std::vector<int64_t> positions = checked->layout.RingShardPositions(j);
        std::vector<int64_t> samples(positions.size());
        for (size_t t = 0; t < positions.size(); ++t) {
          samples[t] = checked->layout.SampleAt(positions[t]);
        }
        context->ring_mask.positions.push_back(std::move(positions));
        context->ring_mask.samples.push_back(std::move(samples));
      }
    }
    return Forward(*weights_, shard, checked->layout, rank, std::move(context));
  } catch (const StatusError& e) {
    return e.status();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("transformer forward failed: ",
                                            e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("transformer forward failed: ", e.what()));
  }
}

std::vector<at::Tensor> Transformer::parameters() const {
  return weights_->module.parameters();
}

std::vector<std::pair<std::string, at::Tensor>> Transformer::named_parameters()
    const {
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& item : weights_->module.named_parameters()) {
    named.emplace_back(item.key(), item.value());
  }
  return named;
}

torch::nn::Module& Transformer::module() const { return weights_->module; }

absl::Status Backward(const at::Tensor& loss) {
  if (!loss.defined() || loss.numel() != 1) {
    return absl::InvalidArgumentError("Backward needs a scalar loss");
  }
  try {
    loss.backward();
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("backward pass failed: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("backward pass failed: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace dcp::train
