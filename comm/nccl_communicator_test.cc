#include "comm/nccl_communicator.h"

#include "absl/status/status.h"
#include "comm/nccl_world_communicator.h"
#include "comm/rendezvous_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

TEST(NcclCommunicatorTest, WithoutCudaCreateIsUnimplemented) {
  if (NcclCommunicator::BuiltWithCuda()) {
    GTEST_SKIP() << "built with CUDA: nccl_communicator_gpu_test covers it";
  }
  InMemoryRendezvousStore store;
  absl::StatusOr<CommKey> key = CommKey::Make({0, 1}, 0);
  ASSERT_TRUE(key.ok());
  absl::Status status =
      NcclCommunicator::Create(*key, 0, "p/", &store, {}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(status.message(), HasSubstr("built without CUDA"));
  EXPECT_EQ(*NcclCommunicator::DeviceCount(), 0);
  // The world the agent splits its groups from goes the same way.
  absl::Status world =
      NcclWorldCommunicator::Create(*key, 0, "w/", &store, {}).status();
  EXPECT_EQ(world.code(), absl::StatusCode::kUnimplemented);
}

TEST(NcclCommunicatorTest, AWorldHoldsRanksZeroToNMinusOne) {
  InMemoryRendezvousStore store;
  absl::StatusOr<CommKey> key = CommKey::Make({1, 2}, 0);
  ASSERT_TRUE(key.ok());
  absl::Status status =
      NcclWorldCommunicator::Create(*key, 1, "w/", &store, {}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("ranks 0..n-1"));
}

TEST(NcclCommunicatorTest, WithCudaBadArgumentsFailBeforeTouchingTheDevice) {
  if (!NcclCommunicator::BuiltWithCuda()) {
    GTEST_SKIP() << "built without CUDA";
  }
  InMemoryRendezvousStore store;
  absl::StatusOr<CommKey> key = CommKey::Make({0, 1}, 0);
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(NcclCommunicator::Create(*key, 7, "p/", &store, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      NcclCommunicator::Create(*key, 0, "p/", nullptr, {}).status().code(),
      absl::StatusCode::kInvalidArgument);
  NcclCommunicator::Options options;
  options.timeout = absl::ZeroDuration();
  EXPECT_EQ(
      NcclCommunicator::Create(*key, 0, "p/", &store, options).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dcp
