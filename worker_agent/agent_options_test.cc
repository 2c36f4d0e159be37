#include "worker_agent/agent_options.h"

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

AgentOptions Options() {
  AgentOptions options;
  options.scheduler_address = "127.0.0.1:1";
  options.rank = 0;
  return options;
}

TEST(GroupFormTimeoutTest, EpochsAfterRegistrationWaitForTheWorld) {
  AgentOptions options = Options();
  options.rendezvous_timeout = absl::Seconds(20);
  EXPECT_EQ(GroupFormTimeout(options, 0, 0), absl::Seconds(20));
  EXPECT_EQ(GroupFormTimeout(options, 0, 1), 3 * absl::Seconds(20));
  // A rank that registered in epoch 2 (it grew the world) forms that
  // epoch's groups with the others at a step boundary.
  EXPECT_EQ(GroupFormTimeout(options, 2, 2), absl::Seconds(20));
  EXPECT_EQ(GroupFormTimeout(options, 2, 3), 3 * absl::Seconds(20));
  options.world_timeout = absl::Seconds(90);
  EXPECT_EQ(GroupFormTimeout(options, 0, 1), absl::Seconds(90));
  EXPECT_EQ(GroupFormTimeout(options, 0, 0), absl::Seconds(20));
}

TEST(CheckAgentOptionsTest, ANegativeWorldTimeoutIsRefusedByName) {
  AgentOptions options = Options();
  EXPECT_TRUE(CheckAgentOptions(options).ok());
  options.world_timeout = absl::Seconds(90);
  EXPECT_TRUE(CheckAgentOptions(options).ok());
  options.world_timeout = absl::Seconds(-1);
  const absl::Status status = CheckAgentOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("world_timeout"));
}

TEST(CheckAgentOptionsTest, ARankOutsideTheWorldIsRefusedByName) {
  AgentOptions options = Options();
  options.world_size = 4;
  options.rank = 3;
  EXPECT_TRUE(CheckAgentOptions(options).ok());
  options.rank = 4;
  const absl::Status status = CheckAgentOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("outside the world of 4"));
}

}  // namespace
}  // namespace dcp
