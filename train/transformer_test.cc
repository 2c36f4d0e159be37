#include "train/transformer.h"

#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp::train {
namespace {

using ::testing::HasSubstr;

ModelSpec TinySpec(bool causal) {
  ModelSpec spec;
  spec.name = causal ? "tiny-decoder" : "tiny-dit";
  spec.layers = 2;
  spec.hidden = 32;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.ffn = 64;
  spec.vocab = causal ? 16 : 0;
  spec.causal = causal;
  return spec;
}

constexpr int64_t kFeatures = 8;

std::unique_ptr<Transformer> MakeModel(bool causal, at::ScalarType dtype,
                                       uint64_t seed = 1) {
  TransformerOptions options;
  options.model = TinySpec(causal);
  options.dtype = dtype;
  options.seed = seed;
  options.feature_dim = kFeatures;
  absl::StatusOr<std::unique_ptr<Transformer>> model =
      Transformer::Create(options);
  EXPECT_TRUE(model.ok()) << model.status();
  return *std::move(model);
}

// Random tokens (decoder) or features with a learnable target (DiT).
PackedTask MakeTask(bool causal, at::ScalarType dtype,
                    std::vector<int64_t> cu_seqlens, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t total = cu_seqlens.back();
  PackedTask task;
  task.cu_seqlens = std::move(cu_seqlens);
  for (size_t s = 0; s + 1 < task.cu_seqlens.size(); ++s) {
    task.loss_weights.push_back(0.5 + static_cast<double>(s));
  }
  if (causal) {
    task.inputs = at::randint(16, {total}, gen, at::kLong);
    task.targets = at::randint(16, {total}, gen, at::kLong);
  } else {
    task.inputs = at::randn({total, kFeatures}, gen, at::dtype(dtype));
    task.targets = at::randn({total, kFeatures}, gen, at::dtype(dtype));
  }
  return task;
}

TaskShard Whole(const PackedTask& task) {
  absl::StatusOr<TaskShard> shard = ShardTask(task, 1, 0);
  EXPECT_TRUE(shard.ok()) << shard.status();
  return *std::move(shard);
}

TaskResult RunOk(const Transformer& model, const TaskShard& shard) {
  absl::StatusOr<TaskResult> result = model.Run(shard);
  EXPECT_TRUE(result.ok()) << result.status();
  return *std::move(result);
}

// Runs forward and backward; returns every parameter's gradient and clears
// them.
std::vector<at::Tensor> Gradients(const Transformer& model,
                                  const TaskShard& shard, at::Tensor* loss) {
  TaskResult result = RunOk(model, shard);
  EXPECT_TRUE(Backward(result.loss).ok());
  if (loss != nullptr) *loss = result.loss.detach();
  std::vector<at::Tensor> grads;
  for (at::Tensor& p : model.parameters()) {
    grads.push_back(p.grad().clone());
    p.mutable_grad().reset();
  }
  return grads;
}

double MaxRelDiff(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a - b).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

TEST(TransformerTest, SameSeedSameWeights) {
  auto a = MakeModel(true, at::kDouble, 5), b = MakeModel(true, at::kDouble, 5);
  auto c = MakeModel(true, at::kDouble, 6);
  auto f = MakeModel(true, at::kFloat, 5);
  // Embedding, 9 per layer, final norm, LM head.
  ASSERT_EQ(a->parameters().size(), 3u + 2u * 9u);
  for (size_t i = 0; i < a->parameters().size(); ++i) {
    EXPECT_TRUE(torch::equal(a->parameters()[i], b->parameters()[i]));
    EXPECT_TRUE(
        torch::equal(a->parameters()[i].to(at::kFloat), f->parameters()[i]));
  }
  EXPECT_FALSE(torch::equal(a->parameters()[0], c->parameters()[0]));
  // The module's own parameters first, then the layers'.
  EXPECT_EQ(a->named_parameters()[0].first, "embed");
  EXPECT_EQ(a->named_parameters()[3].first, "layers.0.attn_norm");
}

// A repeating pattern per sample: token t is followed by (t + 3) mod 16.
TEST(TransformerTest, DecoderLossFallsUnderAdamW) {
  auto model = MakeModel(true, at::kFloat);
  PackedTask task;
  task.cu_seqlens = {0, 24, 40};
  task.loss_weights = {1.0, 1.0};
  std::vector<int64_t> inputs, targets;
  for (int s = 0; s < 2; ++s) {
    for (int64_t i = 0; i < task.cu_seqlens[s + 1] - task.cu_seqlens[s]; ++i) {
      inputs.push_back((3 * i + 5 * s) % 16);
      targets.push_back((3 * (i + 1) + 5 * s) % 16);
    }
  }
  task.inputs = at::tensor(inputs, at::kLong);
  task.targets = at::tensor(targets, at::kLong);
  TaskShard shard = Whole(task);
  torch::optim::AdamW adam(model->parameters(),
                           torch::optim::AdamWOptions(1e-2));
  std::vector<double> losses;
  for (int step = 0; step < 30; ++step) {
    adam.zero_grad();
    TaskResult result = RunOk(*model, shard);
    ASSERT_TRUE(Backward(result.loss).ok());
    adam.step();
    losses.push_back(result.loss.item<double>());
    ASSERT_TRUE(std::isfinite(losses.back())) << "step " << step;
  }
  // Two samples of weight 1: the loss starts near 2 * ln(16).
  EXPECT_GT(losses.front(), 2 * std::log(16.0) * 0.7);
  EXPECT_LT(losses.back(), 0.25 * losses.front());
}

TEST(TransformerTest, DitLossFallsUnderAdamW) {
  auto model = MakeModel(false, at::kFloat);
  PackedTask task = MakeTask(false, at::kFloat, {0, 20, 36}, 11);
  // A learnable per-token target: a fixed linear map of the features.
  at::Tensor map = at::eye(kFeatures).flip(0);
  task.targets = task.inputs.matmul(map);
  TaskShard shard = Whole(task);
  torch::optim::AdamW adam(model->parameters(),
                           torch::optim::AdamWOptions(1e-2));
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    adam.zero_grad();
    TaskResult result = RunOk(*model, shard);
    ASSERT_TRUE(Backward(result.loss).ok());
    adam.step();
    last = result.loss.item<double>();
    ASSERT_TRUE(std::isfinite(last)) << "step " << step;
    if (step == 0) first = last;
  }
  EXPECT_LT(last, 0.5 * first);
}

// Block-diagonal attention and restarted positions: a sample's losses do not
// depend on what it is packed with.
TEST(TransformerTest, PackedSamplesLoseWhatTheyLoseAlone) {
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "decoder" : "dit");
    auto model = MakeModel(causal, at::kDouble);
    PackedTask packed = MakeTask(causal, at::kDouble, {0, 7, 18}, 3);
    TaskResult together = RunOk(*model, Whole(packed));
    for (int s = 0; s < 2; ++s) {
      const int64_t begin = packed.cu_seqlens[s];
      const int64_t len = packed.cu_seqlens[s + 1] - begin;
      PackedTask alone;
      alone.cu_seqlens = {0, len};
      alone.loss_weights = {1.0};
      alone.inputs = packed.inputs.narrow(0, begin, len);
      alone.targets = packed.targets.narrow(0, begin, len);
      TaskResult single = RunOk(*model, Whole(alone));
      at::Tensor mine = together.token_loss.narrow(0, begin, len);
      EXPECT_LT(MaxRelDiff(mine, single.token_loss), 1e-12) << "sample " << s;
      EXPECT_LT(
          MaxRelDiff(together.output.narrow(0, begin, len), single.output),
          1e-12);
    }
    // The weighted loss: sum of weight * mean token loss per sample.
    const double expected =
        0.5 * together.token_loss.narrow(0, 0, 7).mean().item<double>() +
        1.5 * together.token_loss.narrow(0, 7, 11).mean().item<double>();
    EXPECT_NEAR(together.loss.item<double>(), expected, 1e-12);
  }
}

// Changing sample 0's token 4 changes the decoder's outputs at positions
// 4.. of sample 0 only, and the DiT's at every position of sample 0.
TEST(TransformerTest, AttentionIsCausalForTheDecoderAndFullForTheDit) {
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "decoder" : "dit");
    auto model = MakeModel(causal, at::kDouble);
    PackedTask task = MakeTask(causal, at::kDouble, {0, 8, 14}, 9);
    TaskResult before = RunOk(*model, Whole(task));
    task.inputs = task.inputs.clone();
    if (causal) {
      task.inputs[4] = (task.inputs[4].item<int64_t>() + 1) % 16;
    } else {
      task.inputs[4] += 1.0;
    }
    TaskResult after = RunOk(*model, Whole(task));
    at::Tensor changed = (after.output - before.output).abs().amax(1) > 1e-9;
    std::vector<bool> expected(14, false);
    for (int t = causal ? 4 : 0; t < 8; ++t) expected[t] = true;
    for (int t = 0; t < 14; ++t) {
      EXPECT_EQ(changed[t].item<bool>(), expected[t]) << "token " << t;
    }
  }
}

TEST(TransformerTest, PaddingChangesNeitherLossNorGradients) {
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "decoder" : "dit");
    auto model = MakeModel(causal, at::kDouble);
    PackedTask task = MakeTask(causal, at::kDouble, {0, 9, 21}, 4);
    TaskShard plain = Whole(task);
    // Five padding rows full of values that would show: large features or
    // arbitrary in-vocabulary tokens.
    TaskShard padded = plain;
    if (causal) {
      padded.inputs = at::cat({plain.inputs, at::full({5}, 7, at::kLong)});
      padded.targets = at::cat({plain.targets, at::full({5}, 3, at::kLong)});
    } else {
      at::Tensor junk = at::full({5, kFeatures}, 1e6, at::kDouble);
      padded.inputs = at::cat({plain.inputs, junk});
      padded.targets = at::cat({plain.targets, -junk});
    }
    at::Tensor loss_plain, loss_padded;
    std::vector<at::Tensor> g_plain = Gradients(*model, plain, &loss_plain);
    std::vector<at::Tensor> g_padded = Gradients(*model, padded, &loss_padded);
    EXPECT_LT(MaxRelDiff(loss_padded, loss_plain), 1e-12);
    EXPECT_EQ(RunOk(*model, padded).token_loss.size(0), 21);
    for (size_t i = 0; i < g_plain.size(); ++i) {
      EXPECT_LT(MaxRelDiff(g_padded[i], g_plain[i]), 1e-12)
          << model->named_parameters()[i].first;
    }
  }
}

TEST(TransformerTest, RecomputeRatiosGiveTheSameGradients) {
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "decoder" : "dit");
    auto model = MakeModel(causal, at::kDouble);
    TaskShard shard = Whole(MakeTask(causal, at::kDouble, {0, 10, 23}, 8));
    std::vector<at::Tensor> reference = Gradients(*model, shard, nullptr);
    for (double ratio : {0.5, 1.0}) {
      shard.recompute_ratio = ratio;
      std::vector<at::Tensor> grads = Gradients(*model, shard, nullptr);
      double worst = 0;
      bool bitwise = true;
      for (size_t i = 0; i < grads.size(); ++i) {
        worst = std::max(worst, MaxRelDiff(grads[i], reference[i]));
        bitwise = bitwise && torch::equal(grads[i], reference[i]);
      }
      EXPECT_LE(worst, 1e-12) << "ratio " << ratio;
      std::cout << (causal ? "decoder" : "dit") << " recompute " << ratio
                << ": max relative gradient difference " << worst
                << (bitwise ? " (bitwise equal)" : "") << "\n";
    }
  }
}

TEST(TransformerTest, RefusesMalformedShards) {
  auto model = MakeModel(true, at::kDouble);
  TaskShard shard = Whole(MakeTask(true, at::kDouble, {0, 6, 10}, 2));
  TaskShard bad = shard;
  bad.inputs = bad.inputs.clone();
  bad.inputs[2] = 16;
  absl::StatusOr<TaskResult> result = model->Run(bad);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("vocabulary"));
  bad = shard;
  bad.loss_weights = {1.0};
  EXPECT_EQ(model->Run(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = shard;
  bad.recompute_ratio = 1.5;
  EXPECT_EQ(model->Run(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = shard;
  bad.targets = bad.targets.to(at::kDouble);
  EXPECT_EQ(model->Run(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  TransformerOptions odd;
  odd.model = TinySpec(true);
  odd.model.heads = 8;    // head dimension 4 is fine; 32 / 16 = 2 too.
  odd.model.hidden = 24;  // 24 / 8 = 3: odd.
  odd.model.kv_heads = 8;
  EXPECT_EQ(Transformer::Create(odd).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dcp::train
