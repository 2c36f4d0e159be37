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

// After a shrink the world is the epoch's members, not ranks 0..n-1; a rank
// left out of it is refused on every build.
TEST(NcclCommunicatorTest, AWorldIsTheEpochsMembers) {
  InMemoryRendezvousStore store;
  absl::StatusOr<CommKey> key = CommKey::Make({0, 2, 3}, 1);
  ASSERT_TRUE(key.ok());
  absl::Status outside =
      NcclWorldCommunicator::Create(*key, 1, "w/", &store, {}).status();
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(outside.message(), HasSubstr("rank 1 is not a member"));
  if (NcclCommunicator::BuiltWithCuda()) return;
  EXPECT_EQ(NcclWorldCommunicator::Create(*key, 2, "w/", &store, {})
                .status()
                .code(),
            absl::StatusCode::kUnimplemented);
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
