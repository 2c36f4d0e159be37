#include "comm/comm_backend.h"

#include "absl/status/status.h"
#include "comm/nccl_communicator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

CommEnvironment Env(bool cuda, int devices, std::string error = "") {
  CommEnvironment env;
  env.built_with_cuda = cuda;
  env.devices = devices;
  env.device_error = std::move(error);
  return env;
}

TEST(CommBackendTest, ParsesTheThreeNamesAndRefusesOthers) {
  for (CommBackend b :
       {CommBackend::kAuto, CommBackend::kGloo, CommBackend::kNccl}) {
    absl::StatusOr<CommBackend> parsed = ParseCommBackend(CommBackendName(b));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, b);
  }
  absl::Status bad = ParseCommBackend("mpi").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), AllOf(HasSubstr("auto, gloo or nccl"),
                                   HasSubstr("'mpi'")));
  EXPECT_FALSE(ParseCommBackend("NCCL").ok());
}

TEST(CommBackendTest, AutoIsNcclOnlyWithCudaAndADevice) {
  EXPECT_EQ(*ResolveCommBackend(CommBackend::kAuto, Env(false, 0), 0),
            CommBackend::kGloo);
  EXPECT_EQ(*ResolveCommBackend(CommBackend::kAuto, Env(true, 0), 0),
            CommBackend::kGloo);
  EXPECT_EQ(*ResolveCommBackend(CommBackend::kAuto, Env(true, 2), 1),
            CommBackend::kNccl);
}

TEST(CommBackendTest, GlooIsGlooEverywhere) {
  EXPECT_EQ(*ResolveCommBackend(CommBackend::kGloo, Env(false, 0), 0),
            CommBackend::kGloo);
  EXPECT_EQ(*ResolveCommBackend(CommBackend::kGloo, Env(true, 8), 9),
            CommBackend::kGloo);
}

TEST(CommBackendTest, NcclWithoutCudaSaysHowToBuildIt) {
  absl::Status status =
      ResolveCommBackend(CommBackend::kNccl, Env(false, 0), 0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("built without CUDA"),
                    HasSubstr("--config=cuda"), HasSubstr("gloo")));
}

TEST(CommBackendTest, NcclWithoutADeviceSaysWhy) {
  absl::Status status =
      ResolveCommBackend(CommBackend::kNccl,
                         Env(true, 0, "cudaErrorInsufficientDriver"), 0)
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("no CUDA device"),
                    HasSubstr("cudaErrorInsufficientDriver")));
}

TEST(CommBackendTest, AGpuIndexOutsideTheDevicesIsRefused) {
  for (CommBackend b : {CommBackend::kAuto, CommBackend::kNccl}) {
    absl::Status status = ResolveCommBackend(b, Env(true, 2), 2).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(),
                AllOf(HasSubstr("GPU 2"), HasSubstr("2 CUDA devices")));
  }
  EXPECT_FALSE(ResolveCommBackend(CommBackend::kNccl, Env(true, 1), -1).ok());
}

TEST(CommBackendTest, DetectsThisBuild) {
  const CommEnvironment env = DetectCommEnvironment();
  EXPECT_EQ(env.built_with_cuda, NcclCommunicator::BuiltWithCuda());
  if (!env.built_with_cuda) {
    EXPECT_EQ(env.devices, 0);
    // What a user of `--comm_backend=nccl` gets from this binary.
    absl::Status status =
        ResolveCommBackend(CommBackend::kNccl, env, 0).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(*ResolveCommBackend(CommBackend::kAuto, env, 0),
              CommBackend::kGloo);
  }
  EXPECT_GE(env.devices, 0);
}

}  // namespace
}  // namespace dcp
