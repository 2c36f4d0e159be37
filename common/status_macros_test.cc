#include "common/status_macros.h"

#include <string>

#include "gtest/gtest.h"

namespace dcp {
namespace {

absl::StatusOr<int> Parse(const std::string& s) {
  if (s.empty()) return absl::InvalidArgumentError("empty");
  return static_cast<int>(s.size());
}

absl::Status Twice(const std::string& s, int* out) {
  ASSIGN_OR_RETURN(int n, Parse(s));
  ASSIGN_OR_RETURN(int m, Parse(s));
  *out = n + m;
  return absl::OkStatus();
}

absl::Status Check(bool ok) {
  RETURN_IF_ERROR(ok ? absl::OkStatus() : absl::NotFoundError("missing"));
  return absl::OkStatus();
}

TEST(StatusMacrosTest, PropagatesErrorsAndValues) {
  int out = 0;
  EXPECT_TRUE(Twice("abc", &out).ok());
  EXPECT_EQ(out, 6);
  absl::Status s = Twice("", &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "empty");
  EXPECT_TRUE(Check(true).ok());
  EXPECT_EQ(Check(false).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dcp
