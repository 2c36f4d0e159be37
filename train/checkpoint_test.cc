#include "train/checkpoint.h"

#include <torch/torch.h>

#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp::train {
namespace {

using ::testing::HasSubstr;

struct Net {
  at::Tensor w1 = torch::randn({6, 5}, torch::kDouble).requires_grad_(true);
  at::Tensor w2 = torch::randn({5, 3}, torch::kDouble).requires_grad_(true);
  int calls = 0;

  // Draws from the default generator, as dropout would.
  at::Tensor operator()(const at::Tensor& x) {
    ++calls;
    at::Tensor keep =
        (torch::rand({x.size(0), 5}, torch::kDouble) > 0.3).to(torch::kDouble);
    return torch::tanh(x.matmul(w1)) * keep / 0.7;
  }
};

struct Grads {
  at::Tensor x, w1, w2;
};

// Loss = sum(f(x) @ w2) with f run directly or checkpointed; the generator
// is reseeded before the forward pass and disturbed before the backward one.
Grads RunOnce(Net& net, bool checkpointed, bool preserve_rng) {
  at::Tensor x = torch::linspace(-1, 1, 4 * 6, torch::kDouble)
                     .view({4, 6})
                     .requires_grad_(true);
  torch::manual_seed(7);
  at::Tensor h;
  if (checkpointed) {
    absl::StatusOr<at::Tensor> y = Checkpoint(
        [&net](const at::Tensor& in) { return net(in); }, x, {net.w1},
        CheckpointOptions{.preserve_rng_state = preserve_rng});
    EXPECT_TRUE(y.ok()) << y.status();
    h = *y;
  } else {
    h = net(x);
  }
  at::Tensor loss = h.matmul(net.w2).sum();
  torch::rand({100});  // Moves the generator on, as other layers would.
  loss.backward();
  Grads g{x.grad().clone(), net.w1.grad().clone(), net.w2.grad().clone()};
  net.w1.mutable_grad().reset();
  net.w2.mutable_grad().reset();
  return g;
}

TEST(CheckpointTest, GradientsEqualThoseOfTheDirectCall) {
  Net net;
  Grads direct = RunOnce(net, /*checkpointed=*/false, /*preserve_rng=*/true);
  net.calls = 0;
  Grads recomputed = RunOnce(net, /*checkpointed=*/true, /*preserve_rng=*/true);
  EXPECT_EQ(net.calls, 2);  // Once forward, once recomputed in backward.
  EXPECT_TRUE(torch::equal(direct.x, recomputed.x));
  EXPECT_TRUE(torch::equal(direct.w1, recomputed.w1));
  EXPECT_TRUE(torch::equal(direct.w2, recomputed.w2));
}

TEST(CheckpointTest, WithoutRestoringTheGeneratorTheRecomputationDiffers) {
  Net net;
  Grads direct = RunOnce(net, /*checkpointed=*/false, /*preserve_rng=*/true);
  Grads drifted = RunOnce(net, /*checkpointed=*/true, /*preserve_rng=*/false);
  EXPECT_FALSE(torch::equal(direct.w1, drifted.w1));
}

TEST(CheckpointTest, ParameterGradientsReachAutogradGrad) {
  Net net;
  torch::manual_seed(3);
  at::Tensor x = torch::randn({4, 6}, torch::kDouble);  // Needs no grad.
  auto fn = [&net](const at::Tensor& in) {
    return torch::tanh(in.matmul(net.w1));
  };
  at::Tensor direct = torch::autograd::grad({fn(x).pow(2).sum()}, {net.w1})[0];
  absl::StatusOr<at::Tensor> y = Checkpoint(fn, x, {net.w1});
  ASSERT_TRUE(y.ok()) << y.status();
  at::Tensor through = torch::autograd::grad({y->pow(2).sum()}, {net.w1})[0];
  EXPECT_TRUE(torch::equal(direct, through));
}

TEST(CheckpointTest, AFailingFunctionBecomesAStatus) {
  at::Tensor x = torch::ones({2, 3});
  absl::StatusOr<at::Tensor> y = Checkpoint(
      [](const at::Tensor& in) {
        return in.matmul(torch::ones({4, 4}));
      },
      x, {});
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(y.status().message(), HasSubstr("checkpointed layer failed"));
  EXPECT_EQ(Checkpoint(nullptr, x, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dcp::train
