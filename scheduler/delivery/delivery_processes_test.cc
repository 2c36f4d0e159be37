#include "scheduler/delivery/delivery_processes.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/subprocess.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp::plan_delivery {
namespace {

using ::testing::HasSubstr;

std::string TmpPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir == nullptr ? "/tmp" : dir, "/", name);
}

TEST(SampleValueTest, ReadsTheUnlabelledSampleOfExactlyThatName) {
  const std::string exposition =
      "# HELP x_total Things.\n"
      "# TYPE x_total counter\n"
      "x_total_extra 7\n"
      "x_total 3.5\n"
      "y{code=\"OK\"} 2\n"
      "h_count 12 1700000000000\n";
  EXPECT_EQ(SampleValue(exposition, "x_total"), 3.5);
  EXPECT_EQ(SampleValue(exposition, "x_total_extra"), 7.0);
  // A timestamp after the value is not part of it.
  EXPECT_EQ(SampleValue(exposition, "h_count"), 12.0);
  // Labelled samples, prefixes and absent names have no unlabelled value.
  EXPECT_EQ(SampleValue(exposition, "y"), std::nullopt);
  EXPECT_EQ(SampleValue(exposition, "x"), std::nullopt);
  EXPECT_EQ(SampleValue(exposition, "z_total"), std::nullopt);
}

TEST(AwaitPortFileTest, ReturnsThePortTheChildWrote) {
  const std::string path = TmpPath("written.port");
  unlink(path.c_str());
  absl::StatusOr<subprocess::Child> child =
      subprocess::Start("writer", {"/bin/sh", "-c", "echo 4242 > " + path});
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<int> port =
      AwaitPortFile(path, *child, absl::Now() + absl::Seconds(30), "the child");
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(*port, 4242);
  subprocess::Terminate(*child, absl::Seconds(5));
  EXPECT_TRUE(child->done);
}

TEST(AwaitPortFileTest, AChildThatExitsWithoutAPortIsAnError) {
  const std::string path = TmpPath("never.port");
  unlink(path.c_str());
  absl::StatusOr<subprocess::Child> child =
      subprocess::Start("quitter", {"/bin/true"});
  ASSERT_TRUE(child.ok()) << child.status();
  absl::StatusOr<int> port =
      AwaitPortFile(path, *child, absl::Now() + absl::Seconds(30), "the child");
  EXPECT_EQ(port.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(port.status().message(), HasSubstr("the child exited"));
  // Reaped, with how it ended.
  EXPECT_TRUE(child->done);
  EXPECT_EQ(child->exit_code, 0);
}

TEST(SchedulerProcessTest, AMissingBinaryIsNamed) {
  absl::StatusOr<std::unique_ptr<SchedulerProcess>> scheduler =
      SchedulerProcess::Start("/nonexistent/dcp-scheduler", {});
  EXPECT_EQ(scheduler.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(scheduler.status().message(),
              HasSubstr("cannot run '/nonexistent/dcp-scheduler'"));
}

TEST(FetchMetricsTest, AClosedPortIsUnavailable) {
  // A port that was free a moment ago: bound, then closed.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  close(fd);
  absl::StatusOr<std::string> text = FetchMetrics(port, absl::Seconds(5));
  EXPECT_EQ(text.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(text.status().message(), HasSubstr(absl::StrCat(port)));
}

}  // namespace
}  // namespace dcp::plan_delivery
