#include "train/ring_attention.h"

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/barrier.h"
#include "comm/comm_key.h"
#include "comm/process_groups.h"
#include "comm/rendezvous_store.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/csrc/distributed/c10d/HashStore.hpp"
#include "torch/csrc/distributed/c10d/PrefixStore.hpp"
#include "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"
#include "train/sequence_layout.h"
#include "train/transformer.h"

namespace dcp::train {
namespace {

using ::testing::HasSubstr;
using Group = c10::intrusive_ptr<c10d::ProcessGroup>;

// Runs body(rank) on `size` threads; returns when all have.
void RunThreads(int size, const std::function<void(int)>& body) {
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < size; ++rank) ranks.emplace_back(body, rank);
  for (std::thread& t : ranks) t.join();
}

// A Gloo group of `size` ranks (threads) over one HashStore.
void RunGroup(int size, const std::function<void(int, const Group&)>& body) {
  static std::atomic<int> groups{0};
  const std::string prefix = absl::StrCat("ring_attention_test/", groups++);
  auto store = c10::make_intrusive<c10d::HashStore>();
  RunThreads(size, [&](int rank) {
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

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// ---- The attention function against dense masked attention.

struct AttentionCase {
  int ring = 2;
  bool causal = true;
};

void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << "ring of " << c.ring << (c.causal ? ", causal" : ", full");
}

// q, k, v of the whole padded pack, attention of every query over every
// key it may read (same sample, causal), rows without keys zero.
at::Tensor DenseAttention(const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& v, const at::Tensor& allowed) {
  const int64_t group = q.size(1) / k.size(1);
  at::Tensor qh = q.transpose(0, 1);
  at::Tensor kh = k.transpose(0, 1).repeat_interleave(group, 0);
  at::Tensor vh = v.transpose(0, 1).repeat_interleave(group, 0);
  at::Tensor scores = at::matmul(qh, kh.transpose(1, 2)) /
                      std::sqrt(static_cast<double>(q.size(2)));
  // Rows without keys get a finite softmax, then zero probabilities.
  at::Tensor open = allowed.logical_or(
      allowed.any(1, /*keepdim=*/true).logical_not().expand_as(allowed));
  at::Tensor probs =
      at::softmax(scores.masked_fill(open.logical_not(),
                                     -std::numeric_limits<double>::infinity()),
                  -1) *
      allowed.to(at::kDouble);
  return at::matmul(probs, vh).transpose(0, 1);
}

class RingAttentionFunctionTest
    : public ::testing::TestWithParam<AttentionCase> {};

// Each ring rank's output and its q, k, v gradients equal the dense
// attention's rows for its ring shard.
TEST_P(RingAttentionFunctionTest, MatchesDenseMaskedAttention) {
  const AttentionCase& tc = GetParam();
  const int c = tc.ring;
  // 13 tokens in 3 samples: with the zig-zag pad some rows are padding.
  absl::StatusOr<PackLayout> layout =
      PackLayout::Create({0, 5, 6, 13}, c, 0, c);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const int64_t total = layout->padded_tokens();
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(5);
  auto opts = at::dtype(at::kDouble);
  at::Tensor q = at::randn({total, 4, 6}, gen, opts).requires_grad_(true);
  at::Tensor k = at::randn({total, 2, 6}, gen, opts).requires_grad_(true);
  at::Tensor v = at::randn({total, 2, 6}, gen, opts).requires_grad_(true);
  at::Tensor weight = at::randn({total, 4, 6}, gen, opts);

  RingMask mask;
  mask.causal = tc.causal;
  std::vector<int64_t> all_positions(total), all_samples(total);
  for (int j = 0; j < c; ++j) {
    mask.positions.push_back(layout->RingShardPositions(j));
    std::vector<int64_t> samples;
    for (int64_t pos : mask.positions.back()) {
      samples.push_back(layout->SampleAt(pos));
    }
    mask.samples.push_back(samples);
  }
  for (int64_t t = 0; t < total; ++t) {
    all_positions[t] = t;
    all_samples[t] = layout->SampleAt(t);
  }
  at::Tensor pos = at::tensor(all_positions, at::kLong);
  at::Tensor smp = at::tensor(all_samples, at::kLong);
  at::Tensor allowed =
      smp.unsqueeze(1).eq(smp.unsqueeze(0)) & smp.ge(0).unsqueeze(1);
  if (tc.causal) allowed = allowed & pos.unsqueeze(0).le(pos.unsqueeze(1));
  at::Tensor reference = DenseAttention(q, k, v, allowed);
  (reference * weight).sum().backward();

  std::vector<double> worst(c, -1);
  RunGroup(c, [&](int j, const Group& ring) {
    at::Tensor index = at::tensor(mask.positions[j], at::kLong);
    at::Tensor qj = q.detach().index_select(0, index).requires_grad_(true);
    at::Tensor kj = k.detach().index_select(0, index).requires_grad_(true);
    at::Tensor vj = v.detach().index_select(0, index).requires_grad_(true);
    absl::StatusOr<at::Tensor> out = RingAttention(qj, kj, vj, mask, ring);
    ASSERT_TRUE(out.ok()) << out.status();
    (*out * weight.index_select(0, index)).sum().backward();
    worst[j] =
        std::max({MaxAbsDiff(*out, reference.detach().index_select(0, index)),
                  MaxAbsDiff(qj.grad(), q.grad().index_select(0, index)),
                  MaxAbsDiff(kj.grad(), k.grad().index_select(0, index)),
                  MaxAbsDiff(vj.grad(), v.grad().index_select(0, index))});
  });
  for (int j = 0; j < c; ++j) {
    EXPECT_GE(worst[j], 0) << "ring rank " << j << " did not finish";
    EXPECT_LE(worst[j], 1e-12) << "ring rank " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Rings, RingAttentionFunctionTest,
    ::testing::Values(AttentionCase{1, true}, AttentionCase{2, true},
                      AttentionCase{3, true}, AttentionCase{4, true},
                      AttentionCase{2, false}, AttentionCase{3, false}),
    [](const auto& info) {
      return absl::StrCat("c", info.param.ring,
                          info.param.causal ? "_causal" : "_full");
    });

TEST(RingAttentionFunctionTest, RefusesAMaskThatDoesNotFitTheShapes) {
  RingMask mask;
  mask.positions = {{0, 1, 2}};
  mask.samples = {{0, 0, 0}};
  absl::StatusOr<at::Tensor> out = RingAttention(
      at::zeros({4, 2, 2}, at::kDouble), at::zeros({4, 1, 2}, at::kDouble),
      at::zeros({4, 1, 2}, at::kDouble), mask, Group());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("(4)"));
  out = RingAttention(at::zeros({3, 3, 2}, at::kDouble),
                      at::zeros({3, 2, 2}, at::kDouble),
                      at::zeros({3, 2, 2}, at::kDouble), mask, Group());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
}

// ---- The transformer on hybrid groups against one process.

struct HybridCase {
  int u = 1;
  int c = 2;
  bool causal = true;
  int heads = 4;
  int kv_heads = 2;
};

std::string Name(const HybridCase& h) {
  return absl::StrCat(h.causal ? "decoder" : "dit", "_u", h.u, "_c", h.c);
}

void PrintTo(const HybridCase& h, std::ostream* os) { *os << Name(h); }

std::unique_ptr<Transformer> MakeModel(const HybridCase& h) {
  TransformerOptions options;
  options.model.name = Name(h);
  options.model.layers = 2;
  options.model.hidden = 8 * h.heads;
  options.model.heads = h.heads;
  options.model.kv_heads = h.kv_heads;
  options.model.ffn = 48;
  options.model.vocab = h.causal ? 16 : 0;
  options.model.causal = h.causal;
  options.dtype = at::kDouble;
  options.seed = 7;
  options.feature_dim = 8;
  absl::StatusOr<std::unique_ptr<Transformer>> model =
      Transformer::Create(options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

// 37 tokens in four samples of different lengths: not a multiple of
// 2 c u for any case here. Half the layers recomputed.
PackedTask MakeTask(const HybridCase& h) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(23);
  PackedTask task;
  task.cu_seqlens = {0, 7, 20, 23, 37};
  task.loss_weights = {0.5, 2.0, 1.25, 0.75};
  task.recompute_ratio = 0.5;
  if (h.causal) {
    task.inputs = at::randint(16, {37}, gen, at::kLong);
    task.targets = at::randint(16, {37}, gen, at::kLong);
  } else {
    task.inputs = at::randn({37, 8}, gen, at::dtype(at::kDouble));
    task.targets = at::randn({37, 8}, gen, at::dtype(at::kDouble));
  }
  return task;
}

struct MemberRun {
  absl::Status status = absl::UnknownError("not run");
  at::Tensor output, loss;
  std::vector<at::Tensor> grads;
};

// Every member of a task group of p = u * c ranks (threads) forms its
// Ulysses subgroup and ring through ProcessGroups, runs its shard and
// back-propagates; body-less members fail the test.
std::vector<MemberRun> RunHybrid(const HybridCase& h) {
  static std::atomic<int> tasks{0};
  const std::string prefix = absl::StrCat("task/", tasks++);
  const int p = h.u * h.c;
  InMemoryRendezvousStore store;
  absl::Barrier* done = new absl::Barrier(p);
  std::vector<MemberRun> runs(p);
  RunThreads(p, [&](int rank) {
    MemberRun& run = runs[rank];
    ProcessGroups::Options options;
    options.rank = rank;
    options.timeout = absl::Seconds(60);
    absl::StatusOr<std::unique_ptr<ProcessGroups>> groups =
        ProcessGroups::Create(&store, options);
    std::vector<int> members(p);
    for (int m = 0; m < p; ++m) members[m] = m;
    absl::StatusOr<ProcessGroups::HybridGroups> hybrid =
        groups.ok()
            ? (*groups)->Hybrid(*CommKey::Make(members, 0), h.u, prefix)
            : absl::StatusOr<ProcessGroups::HybridGroups>(groups.status());
    run.status = hybrid.status();
    if (run.status.ok()) {
      auto own = [](c10d::ProcessGroup* g) {
        return g ? Group::unsafe_reclaim_from_nonowning(g) : Group();
      };
      SequenceGroups sequence{own(hybrid->ulysses), own(hybrid->ring)};
      std::unique_ptr<Transformer> model = MakeModel(h);
      absl::StatusOr<TaskShard> shard = ShardTask(MakeTask(h), p, rank, h.c);
      absl::StatusOr<TaskResult> result =
          shard.ok() ? model->Run(*shard, sequence)
                     : absl::StatusOr<TaskResult>(shard.status());
      run.status = result.status();
      if (result.ok()) {
        run.status = Backward(result->loss);
        run.output = result->output.detach();
        run.loss = result->loss.detach();
        for (const at::Tensor& t : model->parameters()) {
          run.grads.push_back(t.grad().defined() ? t.grad().clone()
                                                 : at::zeros_like(t));
        }
      }
    }
    // No member closes its connections while a peer may still read.
    if (done->Block()) delete done;
  });
  return runs;
}

class HybridEquivalenceTest : public ::testing::TestWithParam<HybridCase> {};

// Loss, outputs and every parameter's gradient summed over the group equal
// one process's over the whole pack.
TEST_P(HybridEquivalenceTest, GroupMatchesOneProcess) {
  const HybridCase& h = GetParam();
  const int p = h.u * h.c;
  std::unique_ptr<Transformer> single = MakeModel(h);
  ASSERT_NE(single, nullptr);
  const PackedTask task = MakeTask(h);
  absl::StatusOr<TaskShard> whole = ShardTask(task, 1, 0);
  ASSERT_TRUE(whole.ok()) << whole.status();
  absl::StatusOr<TaskResult> reference = single->Run(*whole);
  ASSERT_TRUE(reference.ok()) << reference.status();
  ASSERT_TRUE(Backward(reference->loss).ok());
  const std::vector<at::Tensor> reference_grads = single->parameters();

  std::vector<MemberRun> runs = RunHybrid(h);
  absl::StatusOr<PackLayout> layout =
      PackLayout::Create(task.cu_seqlens, p, 0, h.c);
  ASSERT_TRUE(layout.ok()) << layout.status();
  at::Tensor loss = at::zeros({}, at::kDouble);
  std::vector<at::Tensor> grads;
  double output_diff = 0;
  for (int m = 0; m < p; ++m) {
    ASSERT_TRUE(runs[m].status.ok())
        << "member " << m << ": " << runs[m].status;
    loss = loss + runs[m].loss;
    for (size_t i = 0; i < runs[m].grads.size(); ++i) {
      if (grads.size() <= i) {
        grads.push_back(runs[m].grads[i].clone());
      } else {
        grads[i] += runs[m].grads[i];
      }
    }
    // The member's real rows are the pack's rows at its global positions.
    std::vector<int64_t> positions = layout->ShardGlobalPositions(m);
    positions.resize(layout->RealTokensInShard(m));
    if (positions.empty()) continue;
    at::Tensor index = at::tensor(positions, at::kLong);
    output_diff =
        std::max(output_diff,
                 MaxAbsDiff(runs[m].output.narrow(0, 0, index.size(0)),
                            reference->output.detach().index_select(0, index)));
  }
  const double loss_diff =
      std::abs(loss.item<double>() - reference->loss.item<double>());
  ASSERT_EQ(grads.size(), reference_grads.size());
  double grad_diff = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    const double diff = MaxAbsDiff(grads[i], reference_grads[i].grad());
    EXPECT_LE(diff, 1e-9) << "parameter " << i;
    grad_diff = std::max(grad_diff, diff);
  }
  EXPECT_LE(loss_diff, 1e-9);
  EXPECT_LE(output_diff, 1e-9);
  std::cout << Name(h) << " (f64, recompute 0.5, T = 37): loss " << loss_diff
            << ", output " << output_diff << ", worst gradient " << grad_diff
            << "\n";
}

INSTANTIATE_TEST_SUITE_P(Groups, HybridEquivalenceTest,
                         ::testing::Values(HybridCase{1, 2}, HybridCase{1, 4},
                                           HybridCase{2, 2}, HybridCase{4, 1},
                                           HybridCase{2, 2, /*causal=*/false},
                                           // kv heads replicated in a ring.
                                           HybridCase{4, 2}),
                         [](const auto& info) { return Name(info.param); });

// ---- Bad input.

TEST(HybridInputTest, AUlyssesDegreeThatDoesNotDivideTheGroupIsRefused) {
  InMemoryRendezvousStore store;
  ProcessGroups::Options options;
  options.rank = 0;
  absl::StatusOr<std::unique_ptr<ProcessGroups>> groups =
      ProcessGroups::Create(&store, options);
  ASSERT_TRUE(groups.ok()) << groups.status();
  absl::StatusOr<ProcessGroups::HybridGroups> hybrid =
      (*groups)->Hybrid(*CommKey::Make({0, 1, 2, 3, 4, 5}, 0), 4, "task/bad");
  EXPECT_EQ(hybrid.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(hybrid.status().message(), HasSubstr("u = 4"));
  EXPECT_THAT(hybrid.status().message(), HasSubstr("p = 6"));
  absl::StatusOr<TaskShard> shard =
      ShardTask(MakeTask(HybridCase{}), 6, 0, /*ring_size=*/4);
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(shard.status().message(), HasSubstr("c = 4"));
  EXPECT_THAT(shard.status().message(), HasSubstr("p = 6"));
}

// u = 3 over 4 heads (p = 6 as a ring of 2): every member refuses, naming
// u and the heads, and none waits on another.
TEST(HybridInputTest, AUlyssesDegreeThatDoesNotDivideTheHeadsFailsEveryMember) {
  const HybridCase h{3, 2, true, 4, 2};
  std::vector<MemberRun> runs = RunHybrid(h);
  for (const MemberRun& run : runs) {
    EXPECT_EQ(run.status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(run.status.message(), HasSubstr("u = 3"));
    EXPECT_THAT(run.status.message(), HasSubstr("heads = 4"));
  }
}

}  // namespace
}  // namespace dcp::train
