#include "kernels/ulysses_attention.h"

#include <cmath>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "comm/fake_communicator.h"
#include "comm/gloo_communicator.h"
#include "comm/rendezvous_store.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

std::vector<float> Random(size_t n, std::mt19937* rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& value : x) value = normal(*rng);
  return x;
}

AttentionOptions Options(int heads, int head_dim, bool causal) {
  AttentionOptions options;
  options.num_heads = heads;
  options.head_dim = head_dim;
  options.causal = causal;
  return options;
}

// --- The reference itself, against values worked out by hand. ---

TEST(ReferenceAttentionTest, FirstTokenOfACausalSequenceCopiesItsValue) {
  // Two sequences of 2 tokens, 1 head of dim 2.
  const std::vector<float> q = {1, 0, 0, 1, 1, 1, 2, 0};
  const std::vector<float> k = {1, 0, 0, 1, 0, 1, 1, 0};
  const std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int64_t> cu = {0, 2, 4};
  std::vector<float> out(8);
  ASSERT_TRUE(
      ReferenceAttention(q, k, v, cu, Options(1, 2, true), absl::MakeSpan(out))
          .ok());
  // Token 0 and token 2 start their sequences: they see only themselves.
  EXPECT_FLOAT_EQ(out[0], 1);
  EXPECT_FLOAT_EQ(out[1], 2);
  EXPECT_FLOAT_EQ(out[4], 5);
  EXPECT_FLOAT_EQ(out[5], 6);
  // Token 1: scores q1.k0 = 0, q1.k1 = 1, scaled by 1/sqrt(2).
  const double w0 = 1.0, w1 = std::exp(1.0 / std::sqrt(2.0));
  EXPECT_NEAR(out[2], (w0 * 1 + w1 * 3) / (w0 + w1), 1e-6);
  EXPECT_NEAR(out[3], (w0 * 2 + w1 * 4) / (w0 + w1), 1e-6);
  // Token 3 (q = [2, 0]): scores 0 (k2 = [0, 1]) and 2 (k3 = [1, 0]); it
  // never sees the first sequence.
  const double u0 = 1.0, u1 = std::exp(2.0 / std::sqrt(2.0));
  EXPECT_NEAR(out[6], (u0 * 5 + u1 * 7) / (u0 + u1), 1e-6);
  EXPECT_NEAR(out[7], (u0 * 6 + u1 * 8) / (u0 + u1), 1e-6);
}

TEST(ReferenceAttentionTest, EqualScoresAverageTheSequenceValues) {
  // Zero queries: every key scores the same, so each output is the mean of
  // the values the token may see.
  const std::vector<float> q(5, 0.0f), k = {1, 2, 3, 4, 5};
  const std::vector<float> v = {2, 4, 6, 10, 20};
  const std::vector<int64_t> cu = {0, 3, 5};
  std::vector<float> out(5);
  ASSERT_TRUE(
      ReferenceAttention(q, k, v, cu, Options(1, 1, false), absl::MakeSpan(out))
          .ok());
  EXPECT_FLOAT_EQ(out[0], 4);
  EXPECT_FLOAT_EQ(out[2], 4);
  EXPECT_FLOAT_EQ(out[3], 15);
  EXPECT_FLOAT_EQ(out[4], 15);
  ASSERT_TRUE(
      ReferenceAttention(q, k, v, cu, Options(1, 1, true), absl::MakeSpan(out))
          .ok());
  EXPECT_FLOAT_EQ(out[0], 2);
  EXPECT_FLOAT_EQ(out[1], 3);
  EXPECT_FLOAT_EQ(out[2], 4);
  EXPECT_FLOAT_EQ(out[3], 10);
  EXPECT_FLOAT_EQ(out[4], 15);
}

TEST(ReferenceAttentionTest, RejectsBadShapesAndBoundaries) {
  std::vector<float> x(8), out(8);
  const AttentionOptions options = Options(2, 2, true);
  EXPECT_EQ(ReferenceAttention(x, x, x, std::vector<int64_t>{0, 3}, options,
                               absl::MakeSpan(out))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReferenceAttention(x, x, x, std::vector<int64_t>{0, 2, 1, 2},
                               options, absl::MakeSpan(out))
                .code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> short_out(6);
  EXPECT_EQ(ReferenceAttention(x, x, x, std::vector<int64_t>{0, 2}, options,
                               absl::MakeSpan(short_out))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReferenceAttention(x, x, x, std::vector<int64_t>{0, 2},
                               Options(0, 2, true), absl::MakeSpan(out))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// --- The distributed layer against the reference. ---

struct Case {
  int p;
  int heads;
  bool causal;
  std::vector<int64_t> cu_seqlens;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "p=" << c.p << " heads=" << c.heads << (c.causal ? " causal" : " full")
      << " cu_seqlens=[" << absl::StrJoin(c.cu_seqlens, ",") << "]";
}

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  return absl::StrCat(info.index, "_p", info.param.p, "_h", info.param.heads,
                      info.param.causal ? "_causal" : "_full", "_seqs",
                      info.param.cu_seqlens.size() - 1);
}

// Runs the layer on p threads, each with its own communicator, and compares
// every rank's output with the reference's rows for its tokens.
void CheckAgainstReference(
    const Case& c, const std::vector<std::unique_ptr<Communicator>>& comms) {
  constexpr int kHeadDim = 8;
  const int64_t total = c.cu_seqlens.back();
  ASSERT_EQ(total % c.p, 0);
  const int64_t t = total / c.p;
  const size_t stride = static_cast<size_t>(c.heads) * kHeadDim;
  std::mt19937 rng(1234 + c.p);
  const std::vector<float> q = Random(total * stride, &rng);
  const std::vector<float> k = Random(total * stride, &rng);
  const std::vector<float> v = Random(total * stride, &rng);
  const AttentionOptions options = Options(c.heads, kHeadDim, c.causal);

  std::vector<float> expected(total * stride);
  ASSERT_TRUE(ReferenceAttention(q, k, v, c.cu_seqlens, options,
                                 absl::MakeSpan(expected))
                  .ok());

  std::vector<std::vector<float>> out(c.p, std::vector<float>(t * stride));
  std::vector<absl::Status> status(c.p);
  std::vector<std::thread> threads;
  for (int r = 0; r < c.p; ++r) {
    threads.emplace_back([&, r] {
      const size_t offset = r * t * stride;
      auto local = [&](const std::vector<float>& x) {
        return absl::MakeConstSpan(x).subspan(offset, t * stride);
      };
      status[r] =
          UlyssesAttention(*comms[r], local(q), local(k), local(v),
                           c.cu_seqlens, options, absl::MakeSpan(out[r]));
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int r = 0; r < c.p; ++r) {
    ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    for (size_t i = 0; i < out[r].size(); ++i) {
      ASSERT_NEAR(out[r][i], expected[r * t * stride + i], 1e-5)
          << "rank " << r << " token " << i / stride << " head "
          << (i % stride) / kHeadDim;
    }
  }
}

std::vector<std::unique_ptr<Communicator>> GlooGroup(
    int p, InMemoryRendezvousStore* store) {
  std::vector<int> ranks;
  for (int r = 0; r < p; ++r) ranks.push_back(r);
  absl::StatusOr<CommKey> key = CommKey::Make(ranks, 0);
  EXPECT_TRUE(key.ok());
  std::vector<std::unique_ptr<Communicator>> comms(p);
  std::vector<std::thread> threads;
  GlooCommunicator::Options options;
  options.timeout = absl::Seconds(20);
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          GlooCommunicator::Create(*key, r, "ulysses/", store, options);
      ASSERT_TRUE(comm.ok()) << comm.status();
      comms[r] = *std::move(comm);
    });
  }
  for (std::thread& thread : threads) thread.join();
  return comms;
}

class UlyssesAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(UlyssesAttentionTest, GlooGroupMatchesReference) {
  InMemoryRendezvousStore store;
  std::vector<std::unique_ptr<Communicator>> comms =
      GlooGroup(GetParam().p, &store);
  for (const auto& comm : comms) ASSERT_NE(comm, nullptr);
  CheckAgainstReference(GetParam(), comms);
}

TEST_P(UlyssesAttentionTest, FakeGroupMatchesReference) {
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& member : FakeCommunicator::Group(GetParam().p)) {
    comms.push_back(std::move(member));
  }
  CheckAgainstReference(GetParam(), comms);
}

// 24 tokens; sequence boundaries deliberately off the rank shards, so
// sequences span ranks.
INSTANTIATE_TEST_SUITE_P(
    PackedSequences, UlyssesAttentionTest,
    ::testing::Values(Case{1, 4, true, {0, 7, 19, 24}},
                      Case{2, 4, true, {0, 7, 19, 24}},
                      Case{4, 4, true, {0, 7, 19, 24}},
                      Case{4, 8, false, {0, 7, 19, 24}},
                      Case{2, 6, false, {0, 13, 24}},
                      Case{4, 4, true, {0, 5, 5, 24}},  // An empty sequence.
                      Case{4, 4, false, {0, 24}}),
    Name);

TEST(UlyssesAttentionErrorsTest, RejectsHeadsNotDivisibleByGroupSize) {
  auto comms = FakeCommunicator::Group(4);
  std::vector<float> x(2 * 6 * 4), out(x.size());
  absl::Status status =
      UlyssesAttention(*comms[0], x, x, x, std::vector<int64_t>{0, 8},
                       Options(6, 4, true), absl::MakeSpan(out));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("num_heads (6)"));
  EXPECT_THAT(status.message(), HasSubstr("group size (4)"));
}

TEST(UlyssesAttentionErrorsTest, RejectsBoundariesThatDoNotCoverTheBatch) {
  auto comms = FakeCommunicator::Group(2);
  std::vector<float> x(3 * 2 * 4), out(x.size());  // 3 local tokens each.
  absl::Status status =
      UlyssesAttention(*comms[0], x, x, x, std::vector<int64_t>{0, 3},
                       Options(2, 4, true), absl::MakeSpan(out));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("2 ranks x 3 local tokens"));
}

TEST(UlyssesAttentionErrorsTest, CommunicatorFailureIsReturned) {
  auto comms = FakeCommunicator::Group(2);
  comms[1]->Abort();
  std::vector<float> x(2 * 2 * 4), out(x.size());
  absl::Status status =
      UlyssesAttention(*comms[0], x, x, x, std::vector<int64_t>{0, 4},
                       Options(2, 4, true), absl::MakeSpan(out));
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
}

}  // namespace
}  // namespace dcp
