#include "common/metrics/metrics_server_flags.h"

#include <memory>
#include <utility>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "common/metrics/metrics.h"
#include "common/metrics/metrics_http.h"
#include "common/metrics/metrics_testing.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(int, metrics_max_connections);
ABSL_DECLARE_FLAG(absl::Duration, metrics_connection_timeout);

namespace dcp {
namespace {

TEST(MetricsServerLimitFlagsTest, DefaultsAreTheServersDefaults) {
  absl::FlagSaver saver;
  const MetricsHttpServerOptions defaults;
  MetricsHttpServerOptions options;
  options.max_connections = defaults.max_connections + 1;
  options.connection_timeout = defaults.connection_timeout + absl::Seconds(1);
  ASSERT_TRUE(ApplyMetricsServerLimitFlags(options).ok());
  EXPECT_EQ(options.max_connections, defaults.max_connections);
  EXPECT_EQ(options.connection_timeout, defaults.connection_timeout);
}

TEST(MetricsServerLimitFlagsTest, CopiesTheFlags) {
  absl::FlagSaver saver;
  const MetricsHttpServerOptions defaults;
  absl::SetFlag(&FLAGS_metrics_max_connections, defaults.max_connections * 2);
  absl::SetFlag(&FLAGS_metrics_connection_timeout,
                defaults.connection_timeout * 3);
  MetricsHttpServerOptions options;
  ASSERT_TRUE(ApplyMetricsServerLimitFlags(options).ok());
  EXPECT_EQ(options.max_connections, defaults.max_connections * 2);
  EXPECT_EQ(options.connection_timeout, defaults.connection_timeout * 3);
}

TEST(MetricsServerLimitFlagsTest, RefusesConnectionCountsUnderOne) {
  for (int bad : {0, -1}) {
    absl::FlagSaver saver;
    absl::SetFlag(&FLAGS_metrics_max_connections, bad);
    MetricsHttpServerOptions options;
    const MetricsHttpServerOptions before = options;
    const absl::Status status = ApplyMetricsServerLimitFlags(options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(
        absl::StrContains(status.message(), "--metrics_max_connections"))
        << status;
    EXPECT_EQ(options.max_connections, before.max_connections);
    EXPECT_EQ(options.connection_timeout, before.connection_timeout);
  }
}

TEST(MetricsServerLimitFlagsTest, RefusesTimeoutsThatAreNotPositive) {
  for (absl::Duration bad : {absl::ZeroDuration(), absl::Seconds(-1)}) {
    absl::FlagSaver saver;
    absl::SetFlag(&FLAGS_metrics_connection_timeout, bad);
    MetricsHttpServerOptions options;
    const MetricsHttpServerOptions before = options;
    const absl::Status status = ApplyMetricsServerLimitFlags(options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(
        absl::StrContains(status.message(), "--metrics_connection_timeout"))
        << status;
    EXPECT_EQ(options.max_connections, before.max_connections);
    EXPECT_EQ(options.connection_timeout, before.connection_timeout);
  }
}

// A server started from the flags, as the daemons start theirs.
std::unique_ptr<MetricsHttpServer> StartFromFlags(MetricsRegistry* registry) {
  MetricsHttpServerOptions options;
  options.registry = registry;
  const absl::Status applied = ApplyMetricsServerLimitFlags(options);
  EXPECT_TRUE(applied.ok()) << applied;
  if (!applied.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(MetricsServerLimitFlagsTest, OneConnectionLeavesNoRoomForASecond) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_metrics_max_connections, 1);
  // No test waits this long: the silent client keeps its connection.
  absl::SetFlag(&FLAGS_metrics_connection_timeout, absl::Hours(1));
  MetricsRegistry registry;
  std::unique_ptr<MetricsHttpServer> server = StartFromFlags(&registry);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<SilentClientForTest>> silent =
      SilentClientForTest::Connect("127.0.0.1", server->port());
  ASSERT_TRUE(silent.ok()) << silent.status();
  // Accepted after the silent one (the kernel queues them in order), the
  // scrape finds the one connection taken and is closed at once; a scrape
  // kept waiting would end DEADLINE_EXCEEDED at the client's 20 s.
  absl::StatusOr<TestHttpResponse> r = HttpRequestForTest(
      "127.0.0.1", server->port(), "GET", "/metrics", absl::Seconds(20));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
}

TEST(MetricsServerLimitFlagsTest, TheTimeoutDropsASilentClient) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_metrics_max_connections, 1);
  absl::SetFlag(&FLAGS_metrics_connection_timeout, absl::Milliseconds(100));
  MetricsRegistry registry;
  std::unique_ptr<MetricsHttpServer> server = StartFromFlags(&registry);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<SilentClientForTest>> silent =
      SilentClientForTest::Connect("127.0.0.1", server->port(), "GET /");
  ASSERT_TRUE(silent.ok()) << silent.status();
  // Closed by the flag's timeout, not the hour of the test above; the 20 s
  // only guard against a hang.
  EXPECT_TRUE((*silent)->AwaitClosedByServer(absl::Seconds(20)).ok());
}

}  // namespace
}  // namespace dcp
