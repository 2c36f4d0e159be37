#include "common/file_util.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace dcp {
namespace {

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(WriteFileAtomicallyTest, WritesAndReplaces) {
  const std::string path = TempDir() + "/port";
  ASSERT_TRUE(WriteFileAtomically(path, "50051\n").ok());
  EXPECT_EQ(Read(path), "50051\n");
  ASSERT_TRUE(WriteFileAtomically(path, "7\n").ok());
  EXPECT_EQ(Read(path), "7\n");
  // The temporary file is gone.
  EXPECT_FALSE(std::ifstream(path + ".tmp").good());
}

TEST(WriteFileAtomicallyTest, MissingDirectoryIsNamed) {
  const std::string path = TempDir() + "/no/such/dir/port";
  const absl::Status status = WriteFileAtomically(path, "1\n");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(status.message().find("no/such/dir/port.tmp"), std::string::npos)
      << status;
}

}  // namespace
}  // namespace dcp
