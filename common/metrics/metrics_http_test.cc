#include "common/metrics/metrics_http.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/metrics/metrics.h"
#include "common/metrics/metrics_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class MetricsHttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    counter_ = *registry_.AddCounter("dcp_test_events_total", "Events.");
    counter_->Increment(41);
    MetricsHttpServerOptions options;
    options.registry = &registry_;
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
        MetricsHttpServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  absl::StatusOr<TestHttpResponse> Request(const std::string& method,
                                           const std::string& path) {
    return HttpRequestForTest("127.0.0.1", server_->port(), method, path);
  }

  MetricsRegistry registry_;
  Counter* counter_ = nullptr;
  std::unique_ptr<MetricsHttpServer> server_;
};

TEST_F(MetricsHttpServerTest, ServesTheRegistryOnGetMetrics) {
  EXPECT_GT(server_->port(), 0);
  EXPECT_EQ(server_->address(), absl::StrCat("127.0.0.1:", server_->port()));
  absl::StatusOr<TestHttpResponse> r = Request("GET", "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->headers["content-type"],
            "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(r->body, registry_.RenderText());
  EXPECT_THAT(r->body, HasSubstr("\ndcp_test_events_total 41\n"));

  // Every scrape renders afresh.
  counter_->Increment();
  r = Request("GET", "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->body, HasSubstr("\ndcp_test_events_total 42\n"));
}

TEST_F(MetricsHttpServerTest, IgnoresTheQueryString) {
  absl::StatusOr<TestHttpResponse> r = Request("GET", "/metrics?x=1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_THAT(r->body, HasSubstr("dcp_test_events_total 41"));
}

TEST_F(MetricsHttpServerTest, HeadHasTheHeadersOnly) {
  absl::StatusOr<TestHttpResponse> r = Request("HEAD", "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "");
  EXPECT_EQ(r->headers["content-length"],
            absl::StrCat(registry_.RenderText().size()));
}

TEST_F(MetricsHttpServerTest, OtherPathsAre404) {
  for (const char* path : {"/", "/metric", "/metrics/", "/metrics/x",
                           "/favicon.ico", "/etc/passwd"}) {
    absl::StatusOr<TestHttpResponse> r = Request("GET", path);
    ASSERT_TRUE(r.ok()) << path << ": " << r.status();
    EXPECT_EQ(r->status, 404) << path;
    EXPECT_THAT(r->body, Not(HasSubstr("dcp_test_events_total"))) << path;
  }
}

TEST_F(MetricsHttpServerTest, OtherMethodsAre405) {
  absl::StatusOr<TestHttpResponse> r = Request("POST", "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->headers["allow"], "GET, HEAD");
}

TEST_F(MetricsHttpServerTest, ServesConcurrentScrapes) {
  std::vector<std::thread> threads;
  std::vector<int> codes(8, 0);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<TestHttpResponse> r = Request("GET", "/metrics");
      codes[i] = r.ok() ? r->status : -1;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(codes, ::testing::Each(200));
}

TEST_F(MetricsHttpServerTest, ShutdownClosesThePort) {
  const int port = server_->port();
  server_->Shutdown();
  server_->Shutdown();  // idempotent
  absl::StatusOr<TestHttpResponse> r =
      HttpRequestForTest("127.0.0.1", port, "GET", "/metrics");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
}

TEST_F(MetricsHttpServerTest, ATakenPortIsUnavailable) {
  MetricsHttpServerOptions options;
  options.registry = &registry_;
  options.listen_address = absl::StrCat("127.0.0.1:", server_->port());
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> second =
      MetricsHttpServer::Start(options);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable)
      << second.status();
  EXPECT_THAT(second.status().message(), HasSubstr(options.listen_address));
}

TEST(MetricsHttpServerOptionsTest, RefusesBadOptions) {
  MetricsRegistry registry;
  for (const char* address :
       {"", "9464", "127.0.0.1", "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:-1",
        "127.0.0.1:65536", "[::1]:0", "example.com:80", "300.0.0.1:0"}) {
    MetricsHttpServerOptions options;
    options.registry = &registry;
    options.listen_address = address;
    EXPECT_EQ(MetricsHttpServer::Start(options).status().code(),
              absl::StatusCode::kInvalidArgument)
        << address;
  }
  MetricsHttpServerOptions no_registry;
  EXPECT_EQ(MetricsHttpServer::Start(no_registry).status().code(),
            absl::StatusCode::kInvalidArgument);
  MetricsHttpServerOptions no_threads;
  no_threads.registry = &registry;
  no_threads.threads = 0;
  EXPECT_EQ(MetricsHttpServer::Start(no_threads).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MetricsHttpServerOptionsTest, LocalhostIsAccepted) {
  MetricsRegistry registry;
  MetricsHttpServerOptions options;
  options.registry = &registry;
  options.listen_address = "localhost:0";
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<TestHttpResponse> r =
      HttpRequestForTest("127.0.0.1", (*server)->port(), "GET", "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
}

}  // namespace
}  // namespace dcp
