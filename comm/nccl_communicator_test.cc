#include "comm/nccl_communicator.h"

#include "absl/status/status.h"
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
