#include "train/ulysses.h"

#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/csrc/distributed/c10d/HashStore.hpp"
#include "torch/csrc/distributed/c10d/PrefixStore.hpp"
#include "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"
#include "train/transformer.h"

namespace dcp::train {
namespace {

using ::testing::HasSubstr;
using Group = c10::intrusive_ptr<c10d::ProcessGroup>;

// Forms a Gloo group of `size` ranks, one thread each, over one HashStore,
// and runs body(rank, group) on every rank; returns when all have.
void RunGroup(int size, const std::function<void(int, const Group&)>& body) {
  static std::atomic<int> groups{0};
  const std::string prefix = absl::StrCat("ulysses_test/", groups++);
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < size; ++rank) {
    ranks.emplace_back([&, rank] {
      auto options =
          c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(60));
      options->devices.push_back(
          c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      Group group = c10::make_intrusive<c10d::ProcessGroupGloo>(
          c10::make_intrusive<c10d::PrefixStore>(prefix, store), rank, size,
          options);
      body(rank, group);
    });
  }
  for (std::thread& t : ranks) t.join();
}

double MaxRelDiff(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a - b).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

TEST(UlyssesExchangeTest, MovesShardsAndGradientsWhereTheyBelong) {
  constexpr int kRanks = 2;
  const at::Tensor full = at::arange(6 * 4 * 3, at::kDouble).view({6, 4, 3});
  const at::Tensor weight = at::sin(full);  // d loss / d out.
  std::vector<at::Tensor> received(kRanks), grads(kRanks);
  std::vector<double> roundtrip(kRanks, -1);
  RunGroup(kRanks, [&](int rank, const Group& group) {
    at::Tensor x = full.narrow(0, 3 * rank, 3).clone().requires_grad_(true);
    absl::StatusOr<at::Tensor> heads = SequenceToHeads(x, group);
    ASSERT_TRUE(heads.ok()) << heads.status();
    absl::StatusOr<at::Tensor> back = HeadsToSequence(*heads, group);
    ASSERT_TRUE(back.ok()) << back.status();
    roundtrip[rank] = (*back - x).abs().max().item<double>();
    (*heads * weight.narrow(1, 2 * rank, 2)).sum().backward();
    received[rank] = heads->detach();
    grads[rank] = x.grad();
  });
  for (int rank = 0; rank < kRanks; ++rank) {
    EXPECT_TRUE(torch::equal(received[rank], full.narrow(1, 2 * rank, 2)));
    EXPECT_EQ(roundtrip[rank], 0.0);
    // Each token's gradient comes from the rank holding each of its heads.
    EXPECT_TRUE(torch::equal(grads[rank], weight.narrow(0, 3 * rank, 3)));
  }
}

TEST(UlyssesExchangeTest, RefusesShapesThatDoNotDivide) {
  RunGroup(2, [&](int, const Group& group) {
    EXPECT_EQ(SequenceToHeads(at::zeros({2, 3, 4}), group).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(HeadsToSequence(at::zeros({3, 2, 4}), group).status().code(),
              absl::StatusCode::kInvalidArgument);
  });
}

struct Case {
  std::string name;
  bool causal = true;
  int heads = 4;
  int kv_heads = 2;
  int group_size = 2;
  double recompute = 0.0;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

ModelSpec Spec(const Case& c) {
  ModelSpec spec;
  spec.name = c.name;
  spec.layers = 2;
  spec.hidden = 8 * c.heads;  // head dimension 8
  spec.heads = c.heads;
  spec.kv_heads = c.kv_heads;
  spec.ffn = 64;
  spec.vocab = c.causal ? 16 : 0;
  spec.causal = c.causal;
  return spec;
}

// 31 tokens: every group size above 1 pads.
PackedTask MakeTask(const Case& c, at::ScalarType dtype) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(17);
  PackedTask task;
  task.cu_seqlens = {0, 9, 20, 31};
  task.loss_weights = {0.5, 2.0, 1.25};
  task.recompute_ratio = c.recompute;
  if (c.causal) {
    task.inputs = at::randint(16, {31}, gen, at::kLong);
    task.targets = at::randint(16, {31}, gen, at::kLong);
  } else {
    task.inputs = at::randn({31, 8}, gen, at::dtype(dtype));
    task.targets = at::randn({31, 8}, gen, at::dtype(dtype));
  }
  return task;
}

std::unique_ptr<Transformer> MakeModel(const Case& c, at::ScalarType dtype) {
  TransformerOptions options;
  options.model = Spec(c);
  options.dtype = dtype;
  options.seed = 42;
  options.feature_dim = 8;
  absl::StatusOr<std::unique_ptr<Transformer>> model =
      Transformer::Create(options);
  EXPECT_TRUE(model.ok()) << model.status();
  return *std::move(model);
}

struct RankRun {
  absl::Status status;
  at::Tensor output, loss;
  std::vector<at::Tensor> grads;
};

RankRun RunRank(const Case& c, at::ScalarType dtype, int rank,
                const Group& group) {
  RankRun run;
  std::unique_ptr<Transformer> model = MakeModel(c, dtype);
  const int size = group ? group->getSize() : 1;
  absl::StatusOr<TaskShard> shard = ShardTask(MakeTask(c, dtype), size, rank);
  if (!shard.ok()) {
    run.status = shard.status();
    return run;
  }
  absl::StatusOr<TaskResult> result = model->Run(*shard, group);
  if (!result.ok()) {
    run.status = result.status();
    return run;
  }
  run.status = Backward(result->loss);
  run.output = result->output.detach();
  run.loss = result->loss.detach();
  for (const at::Tensor& p : model->parameters()) run.grads.push_back(p.grad());
  return run;
}

class UlyssesEquivalenceTest
    : public ::testing::TestWithParam<std::tuple<Case, at::ScalarType>> {};

// The group's outputs, loss and summed gradients equal one rank's over the
// whole pack (relative difference: max |a - b| / max |b| per tensor).
TEST_P(UlyssesEquivalenceTest, GroupMatchesOneRankOverTheWholePack) {
  const auto& [c, dtype] = GetParam();
  const double tolerance = dtype == at::kDouble ? 1e-9 : 1e-5;
  RankRun reference = RunRank(c, dtype, 0, Group());
  ASSERT_TRUE(reference.status.ok()) << reference.status;
  std::vector<RankRun> runs(c.group_size);
  RunGroup(c.group_size, [&](int rank, const Group& group) {
    runs[rank] = RunRank(c, dtype, rank, group);
  });
  std::vector<at::Tensor> outputs;
  at::Tensor loss = at::zeros({}, reference.loss.options());
  std::vector<at::Tensor> grads;
  for (const RankRun& run : runs) {
    ASSERT_TRUE(run.status.ok()) << run.status;
    outputs.push_back(run.output);
    loss = loss + run.loss;
    for (size_t i = 0; i < run.grads.size(); ++i) {
      if (grads.size() <= i) {
        grads.push_back(run.grads[i].clone());
      } else {
        grads[i] += run.grads[i];
      }
    }
  }
  const double out_diff =
      MaxRelDiff(at::cat(outputs).narrow(0, 0, 31), reference.output);
  const double loss_diff = MaxRelDiff(loss, reference.loss);
  EXPECT_LE(out_diff, tolerance);
  EXPECT_LE(loss_diff, tolerance);
  ASSERT_EQ(grads.size(), reference.grads.size());
  double worst = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    const double diff = MaxRelDiff(grads[i], reference.grads[i]);
    EXPECT_LE(diff, tolerance) << "parameter " << i;
    worst = std::max(worst, diff);
  }
  std::cout << c.name << " " << c10::toString(dtype) << ": output " << out_diff
            << ", loss " << loss_diff << ", worst gradient " << worst << "\n";
}

std::vector<Case> Cases() {
  return {
      {"decoder_p1", true, 4, 2, 1},
      {"decoder_p2", true, 4, 2, 2},
      {"decoder_p2_recompute", true, 4, 2, 2, 0.5},
      {"decoder_p4_gqa_replicated", true, 4, 2, 4},
      {"decoder_p4_recompute_all", true, 4, 1, 4, 1.0},
      {"decoder_p3_h6_kv3", true, 6, 3, 3},
      {"decoder_p3_h6_kv2_replicated", true, 6, 2, 3},
      {"dit_p2", false, 4, 2, 2},
      {"dit_p3_recompute", false, 6, 6, 3, 0.5},
      {"dit_p4_gqa_replicated", false, 4, 2, 4},
  };
}

INSTANTIATE_TEST_SUITE_P(
    Groups, UlyssesEquivalenceTest,
    ::testing::Combine(::testing::ValuesIn(Cases()),
                       ::testing::Values(at::kDouble, at::kFloat)),
    [](const auto& info) {
      return std::get<0>(info.param).name +
             (std::get<1>(info.param) == at::kDouble ? "_f64" : "_f32");
    });

TEST(UlyssesPlanTest, AGroupThatDoesNotDivideHeadsIsRefusedOnEveryRank) {
  Case c{"decoder_p3_h4", true, 4, 2, 3};
  std::vector<RankRun> runs(3);
  RunGroup(3, [&](int rank, const Group& group) {
    runs[rank] = RunRank(c, at::kDouble, rank, group);
  });
  for (const RankRun& run : runs) {
    EXPECT_EQ(run.status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(run.status.message(), HasSubstr("p = 3"));
    EXPECT_THAT(run.status.message(), HasSubstr("heads = 4"));
  }
}

// Rank 1's shard holds a token outside the vocabulary: it refuses, and its
// peers learn so before the first all-to-all instead of waiting in it.
TEST(UlyssesPlanTest, OneRanksRefusalFailsTheWholeGroup) {
  Case c{"decoder_p2_bad_token", true, 4, 2, 2};
  std::vector<absl::Status> statuses(2);
  RunGroup(2, [&](int rank, const Group& group) {
    std::unique_ptr<Transformer> model = MakeModel(c, at::kDouble);
    absl::StatusOr<TaskShard> shard =
        ShardTask(MakeTask(c, at::kDouble), 2, rank);
    ASSERT_TRUE(shard.ok()) << shard.status();
    if (rank == 1) shard->inputs[0] = 99;
    statuses[rank] = model->Run(*shard, group).status();
  });
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kAborted);
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(statuses[1].message(), HasSubstr("vocabulary"));
}

}  // namespace
}  // namespace dcp::train
