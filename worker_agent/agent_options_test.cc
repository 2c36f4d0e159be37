#include "worker_agent/agent_options.h"

#include <memory>

#include "absl/status/status.h"
#include "comm/comm_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

CommEnvironment NoCuda() { return CommEnvironment(); }

CommEnvironment Gpus(int devices) {
  CommEnvironment env;
  env.built_with_cuda = true;
  env.devices = devices;
  return env;
}

AgentOptions Options(CommBackend backend, bool warm_groups = true) {
  AgentOptions options;
  options.scheduler_address = "127.0.0.1:1";
  options.rank = 0;
  options.comm_backend = backend;
  options.warm_groups = warm_groups;
  return options;
}

TEST(AgentCommBackendTest, AutoPicksNcclWhereItRunsAndGlooElsewhere) {
  EXPECT_EQ(*AgentCommBackend(Options(CommBackend::kAuto), NoCuda()),
            CommBackend::kGloo);
  EXPECT_EQ(*AgentCommBackend(Options(CommBackend::kAuto), Gpus(0)),
            CommBackend::kGloo);
  EXPECT_EQ(*AgentCommBackend(Options(CommBackend::kAuto), Gpus(1)),
            CommBackend::kNccl);
}

TEST(AgentCommBackendTest, AutoStaysOnGlooForAnAgentThatWarmsNoGroups) {
  // Execute mode and trainers with their own c10d groups: the agent forms
  // groups on demand only, which NCCL's per-step splits cannot serve.
  EXPECT_EQ(*AgentCommBackend(Options(CommBackend::kAuto, false), Gpus(8)),
            CommBackend::kGloo);
  absl::Status status =
      AgentCommBackend(Options(CommBackend::kNccl, false), Gpus(8)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("needs warm_groups"));
}

TEST(AgentCommBackendTest, NcclWhereItCannotRunFailsClearly) {
  absl::Status no_cuda =
      AgentCommBackend(Options(CommBackend::kNccl), NoCuda()).status();
  EXPECT_EQ(no_cuda.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_cuda.message(), HasSubstr("--config=cuda"));
  absl::Status no_gpu =
      AgentCommBackend(Options(CommBackend::kNccl), Gpus(0)).status();
  EXPECT_EQ(no_gpu.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_gpu.message(), HasSubstr("no CUDA device"));
  AgentOptions third_gpu = Options(CommBackend::kNccl);
  third_gpu.gpu = 2;
  EXPECT_EQ(AgentCommBackend(third_gpu, Gpus(2)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*AgentCommBackend(Options(CommBackend::kGloo), Gpus(2)),
            CommBackend::kGloo);
}

TEST(AgentCommBackendTest, AWorldFactoryTakesTheSplitPathAnywhere) {
  AgentOptions options = Options(CommBackend::kGloo);
  options.make_world = [](const CommKey&, int, const std::string&,
                          RendezvousStoreInterface*)
      -> absl::StatusOr<std::unique_ptr<WorldCommunicator>> {
    return absl::UnimplementedError("unused");
  };
  EXPECT_EQ(*AgentCommBackend(options, NoCuda()), CommBackend::kNccl);
}

TEST(GroupFormTimeoutTest, EpochsAfterRegistrationWaitForTheWorld) {
  AgentOptions options = Options(CommBackend::kGloo);
  options.rendezvous_timeout = absl::Seconds(20);
  EXPECT_EQ(GroupFormTimeout(options, 0, 0), absl::Seconds(20));
  EXPECT_EQ(GroupFormTimeout(options, 0, 1), absl::Seconds(60));
  // A rank that registered in epoch 2 (it grew the world) forms that
  // epoch's groups with the others at a step boundary.
  EXPECT_EQ(GroupFormTimeout(options, 2, 2), absl::Seconds(20));
  EXPECT_EQ(GroupFormTimeout(options, 2, 3), absl::Seconds(60));
  options.world_timeout = absl::Seconds(90);
  EXPECT_EQ(GroupFormTimeout(options, 0, 1), absl::Seconds(90));
  EXPECT_EQ(GroupFormTimeout(options, 0, 0), absl::Seconds(20));
}

TEST(CheckAgentOptionsTest, ANegativeWorldTimeoutIsRefusedByName) {
  AgentOptions options = Options(CommBackend::kGloo);
  EXPECT_TRUE(CheckAgentOptions(options).ok());
  options.world_timeout = absl::Seconds(90);
  EXPECT_TRUE(CheckAgentOptions(options).ok());
  options.world_timeout = absl::Seconds(-1);
  const absl::Status status = CheckAgentOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("world_timeout"));
}

}  // namespace
}  // namespace dcp
