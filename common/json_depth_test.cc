#include "common/json_depth.h"

#include <string>

#include "gtest/gtest.h"

namespace dcp {
namespace {

std::string Nested(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

TEST(JsonDepthTest, AcceptsUpToTheLimit) {
  EXPECT_TRUE(CheckJsonDepth("").ok());
  EXPECT_TRUE(CheckJsonDepth(R"({"a": [1, {"b": []}]})", 4).ok());
  EXPECT_FALSE(CheckJsonDepth(R"({"a": [1, {"b": []}]})", 3).ok());
  EXPECT_TRUE(CheckJsonDepth(Nested(kMaxJsonDepth)).ok());
  // Siblings do not add up.
  EXPECT_TRUE(CheckJsonDepth(Nested(3) + Nested(3) + Nested(3), 3).ok());
}

TEST(JsonDepthTest, RejectsDeeperNestingNamingWhere) {
  const absl::Status status = CheckJsonDepth(Nested(kMaxJsonDepth + 1));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "nested more than 512 levels deep at byte 512");
  EXPECT_FALSE(CheckJsonDepth(R"({"a": {"b": [1]}})", 2).ok());
}

TEST(JsonDepthTest, IgnoresBracketsInStrings) {
  EXPECT_TRUE(CheckJsonDepth(R"(["[[[[", "{{\"[[["])", 1).ok());
  EXPECT_FALSE(CheckJsonDepth(R"(["\\", [[]]])", 2).ok());
}

}  // namespace
}  // namespace dcp
