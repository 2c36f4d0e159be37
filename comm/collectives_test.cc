#include "comm/collectives.h"

#include <ATen/ATen.h>

#include <chrono>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "comm/peer_loss.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/csrc/distributed/c10d/HashStore.hpp"
#include "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"

namespace dcp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using Group = c10::intrusive_ptr<c10d::ProcessGroup>;

/// Bounds what the tests wait for that does complete; only reached on
/// failure.
constexpr std::chrono::milliseconds kPatience = std::chrono::seconds(60);

/// A Gloo group of `size` ranks over one HashStore: every rank's handle,
/// each formed on a thread of its own (a rank's constructor returns once
/// every rank has connected). Its collectives time out after `timeout`
/// (libtorch 1.13's Gloo group has no timeout per collective), which bounds
/// its forming too; a rank that could not join is a test failure and a
/// null handle.
std::vector<Group> FormGroup(int size, std::chrono::milliseconds timeout) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<Group> groups(size);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < size; ++rank) {
    ranks.emplace_back([&, rank] {
      try {
        auto options = c10d::ProcessGroupGloo::Options::create(timeout);
        options->devices.push_back(
            c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
        groups[rank] = c10::make_intrusive<c10d::ProcessGroupGloo>(
            store, rank, size, options);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << rank
                      << " did not join its group: " << ExceptionText(e);
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  return groups;
}

/// Starts a sum of `tensor` (in place) over `group`.
c10::intrusive_ptr<c10d::Work> StartSum(c10d::ProcessGroup& group,
                                        at::Tensor& tensor) {
  std::vector<at::Tensor> tensors = {tensor};
  return group.allreduce(tensors);
}

TEST(RunCollectiveTest, ACollectiveEveryRankJoinsIsOkOnceItCompleted) {
  std::vector<Group> groups = FormGroup(2, kPatience);
  ASSERT_FALSE(HasFailure());
  std::vector<at::Tensor> tensors = {at::full({3}, 1.0), at::full({3}, 2.0)};
  std::vector<absl::Status> results(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      results[rank] = RunCollective("the test's sum", [&] {
        return StartSum(*groups[rank], tensors[rank]);
      });
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(results[rank].ok()) << "rank " << rank << ": " << results[rank];
    // Done when it returned: the sum is in place.
    EXPECT_TRUE(at::equal(tensors[rank], at::full({3}, 3.0)))
        << "rank " << rank << ": " << tensors[rank];
  }
}

// Rank 1 never joins rank 0's all-reduce: rank 0's wait ends at the group's
// timeout (short, yet far above the few milliseconds the group takes to
// form on the loopback).
TEST(RunCollectiveTest, ACollectiveThatTimesOutIsDeadlineExceededNamingIt) {
  std::vector<Group> groups = FormGroup(2, std::chrono::milliseconds(500));
  ASSERT_FALSE(HasFailure());
  at::Tensor tensor = at::ones({3});
  const absl::Status status = RunCollective(
      "the test's sum", [&] { return StartSum(*groups[0], tensor); });
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  EXPECT_THAT(std::string(status.message()),
              StartsWith("the test's sum failed: "));
  EXPECT_TRUE(IsPeerLoss(status)) << status;
}

// Rank 1's handle is gone (its connections closed) before rank 0 starts: the
// all-reduce fails before its timeout, and not as one.
TEST(RunCollectiveTest, ACollectiveWhosePeerIsGoneIsUnavailableNamingIt) {
  std::vector<Group> groups = FormGroup(2, kPatience);
  ASSERT_FALSE(HasFailure());
  groups[1].reset();
  at::Tensor tensor = at::ones({3});
  const absl::Status status = RunCollective(
      "the test's sum", [&] { return StartSum(*groups[0], tensor); });
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_THAT(std::string(status.message()),
              StartsWith("the test's sum failed: "));
  EXPECT_TRUE(IsPeerLoss(status)) << status;
}

// c10d refuses to start a broadcast from a rank the group does not have: what
// it throws while starting is the caller's mistake, not a lost peer, its text
// without c10's backtrace.
TEST(RunCollectiveTest, WhatStartingThrowsIsInvalidArgumentWithoutTheBacktrace) {
  std::vector<Group> groups = FormGroup(1, kPatience);
  ASSERT_FALSE(HasFailure());
  at::Tensor tensor = at::ones({3});
  const absl::Status status = RunCollective("the test's broadcast", [&] {
    std::vector<at::Tensor> tensors = {tensor};
    c10d::BroadcastOptions options;
    options.rootRank = 5;
    return groups[0]->broadcast(tensors, options);
  });
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_FALSE(IsPeerLoss(status)) << status;
  EXPECT_THAT(std::string(status.message()),
              StartsWith("the test's broadcast could not start: "));
  EXPECT_THAT(std::string(status.message()), HasSubstr("invalid root rank"));
  EXPECT_THAT(std::string(status.message()),
              Not(HasSubstr("Exception raised from")));
}

// Two ranks sum host doubles in place; the values a rank passed are its own
// until the sum is done.
TEST(AllReduceSumTest, EveryMemberHoldsTheSumOfItsValues) {
  std::vector<Group> groups = FormGroup(2, kPatience);
  ASSERT_FALSE(HasFailure());
  std::vector<std::vector<double>> values = {{1.0, 0.5}, {2.0, -4.25}};
  const std::vector<double> sum = {values[0][0] + values[1][0],
                                   values[0][1] + values[1][1]};
  std::vector<absl::Status> results(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      results[rank] = AllReduceSum(*groups[rank], absl::MakeSpan(values[rank]));
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(results[rank].ok()) << "rank " << rank << ": " << results[rank];
    EXPECT_EQ(values[rank], sum) << "rank " << rank;
  }
}

// A sum whose peer is gone is a peer loss naming the group's size, and the
// values are left as they were.
TEST(AllReduceSumTest, ASumWhosePeerIsGoneIsAPeerLossAndLeavesTheValues) {
  std::vector<Group> groups = FormGroup(2, kPatience);
  ASSERT_FALSE(HasFailure());
  groups[1].reset();
  std::vector<double> values = {3.0};
  const absl::Status status = AllReduceSum(*groups[0], absl::MakeSpan(values));
  EXPECT_TRUE(IsPeerLoss(status)) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("over a group of 2 ranks"));
  EXPECT_EQ(values, std::vector<double>{3.0});
}

}  // namespace
}  // namespace dcp
