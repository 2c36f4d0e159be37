#include "train/trainer_inputs.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <exception>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "comm/collectives.h"
#include "common/status_macros.h"
#include "train/trainer_internal.h"

namespace dcp::train::trainer_inputs {
namespace {


// A task's samples as they are packed, before they become tensors: token
// ids (a causal model) or features, `dim` values a token.
struct PackBuffers {
  PackBuffers(bool causal, int64_t total, int64_t dim) : causal(causal) {
    if (causal) {
      tokens_in.assign(total, 0);
      tokens_out.assign(total, 0);
    } else {
      features_in.assign(total * dim, 0.0f);
      features_out.assign(total * dim, 0.0f);
    }
  }

  const bool causal;
  std::vector<int64_t> tokens_in, tokens_out;
  std::vector<float> features_in, features_out;
};

// Copies sample `sample` of `length` tokens from `corpus` into `buffers`
// at token `offset`.
absl::Status CopySample(const SyntheticCorpus& corpus, int64_t sample,
                        int64_t length, int64_t offset, int64_t dim,
                        PackBuffers& buffers) {
  if (buffers.causal) {
    ASSIGN_OR_RETURN(TokenSample s, corpus.Tokens(sample, length));
    std::copy(s.inputs.begin(), s.inputs.end(),
              buffers.tokens_in.begin() + offset);
    std::copy(s.targets.begin(), s.targets.end(),
              buffers.tokens_out.begin() + offset);
  } else {
    ASSIGN_OR_RETURN(FeatureSample s, corpus.Features(sample, length));
    std::copy(s.features.begin(), s.features.end(),
              buffers.features_in.begin() + offset * dim);
    std::copy(s.targets.begin(), s.targets.end(),
              buffers.features_out.begin() + offset * dim);
  }
  return absl::OkStatus();
}

// Makes `packed`'s inputs and targets of `buffers` (`total` tokens).
absl::Status PackTensors(const PackBuffers& buffers, int64_t total, int64_t dim,
                         at::ScalarType dtype, PackedTask& packed) {
  try {
    if (buffers.causal) {
      packed.inputs = at::tensor(buffers.tokens_in, at::kLong);
      packed.targets = at::tensor(buffers.tokens_out, at::kLong);
    } else {
      packed.inputs = at::tensor(buffers.features_in, at::kFloat)
                          .view({total, dim})
                          .to(dtype);
      packed.targets = at::tensor(buffers.features_out, at::kFloat)
                           .view({total, dim})
                           .to(dtype);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("packing the task failed: ", ExceptionText(e)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<double>> LossWeights(const RankPlan& plan,
                                                const RankTask& task) {
  if (!task.loss_weights.empty()) {
    if (task.loss_weights.size() != task.samples.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the task has ", task.samples.size(), " samples but ",
                       task.loss_weights.size(), " loss weights"));
    }
    return task.loss_weights;
  }
  if (plan.step_tokens <= 0) {
    return absl::InvalidArgumentError(
        "the plan carries no loss weights and no step token count "
        "(total_tokens) to derive them from");
  }
  std::vector<double> weights;
  weights.reserve(task.lengths.size());
  for (int64_t length : task.lengths) {
    weights.push_back(static_cast<double>(length) /
                      static_cast<double>(plan.step_tokens));
  }
  return weights;
}

absl::StatusOr<PackedTask> Materialise(const RankPlan& plan,
                                       const RankTask& task,
                                       const SyntheticCorpus& corpus,
                                       const TransformerOptions& model) {
  const size_t n = task.samples.size();
  if (n == 0 || task.lengths.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the task has ", n, " samples and ", task.lengths.size(), " lengths"));
  }
  PackedTask packed;
  packed.recompute_ratio = task.recompute;
  ASSIGN_OR_RETURN(packed.loss_weights, LossWeights(plan, task));
  const bool causal = model.model.causal;
  const int64_t dim = causal ? 1 : corpus.options().feature_dim;
  const int64_t total = task.total_tokens;
  const int64_t begin = task.shard.begin;
  const int64_t end = begin + task.shard.real_tokens;
  PackBuffers buffers(causal, total, dim);
  packed.cu_seqlens = {0};
  for (size_t i = 0; i < n; ++i) {
    const int64_t offset = packed.cu_seqlens.back();
    const int64_t length = task.lengths[i];
    if (length <= 0 || offset + length > total) {
      return absl::InvalidArgumentError(
          absl::StrCat("sample ", task.samples[i], " has length ", length,
                       " in a pack of ", total, " tokens"));
    }
    packed.cu_seqlens.push_back(offset + length);
    if (offset >= end || offset + length <= begin) continue;
    RETURN_IF_ERROR(
        CopySample(corpus, task.samples[i], length, offset, dim, buffers));
  }
  if (packed.cu_seqlens.back() != total) {
    return absl::InvalidArgumentError(
        absl::StrCat("the samples' lengths add up to ",
                     packed.cu_seqlens.back(), ", the task to ", total));
  }
  RETURN_IF_ERROR(PackTensors(buffers, total, dim, model.dtype, packed));
  return packed;
}

}  // namespace dcp::train::trainer_inputs
