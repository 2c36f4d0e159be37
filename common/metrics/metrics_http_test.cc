#include "common/metrics/metrics_http.h"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/metrics/metrics.h"
#include "common/metrics/metrics_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_pki.h"

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

TEST_F(MetricsHttpServerTest, AMalformedRequestIs400) {
  absl::StatusOr<TestHttpResponse> r = RawHttpRequestForTest(
      "127.0.0.1", server_->port(), "GET /metrics\r\n\r\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 400);
  EXPECT_THAT(r->body, Not(HasSubstr("dcp_test_events_total")));
}

TEST_F(MetricsHttpServerTest, AnOversizedRequestHeadIs431) {
  const std::string request = absl::StrCat(
      "GET /metrics HTTP/1.1\r\nX-Padding: ", std::string(9 << 10, 'a'),
      "\r\n\r\n");
  absl::StatusOr<TestHttpResponse> r =
      RawHttpRequestForTest("127.0.0.1", server_->port(), request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 431);
}

/// A server on 127.0.0.1:0 with room for `max_connections` and, unless a
/// test says otherwise, a timeout no test waits for: a connection it holds
/// stays held until the test ends it.
std::unique_ptr<MetricsHttpServer> StartLimited(
    MetricsRegistry* registry, int max_connections,
    absl::Duration timeout = absl::Hours(1)) {
  MetricsHttpServerOptions options;
  options.registry = registry;
  options.max_connections = max_connections;
  options.connection_timeout = timeout;
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(MetricsHttpServerLimitsTest, SilentClientsDoNotBlockAScrape) {
  MetricsRegistry registry;
  std::unique_ptr<MetricsHttpServer> server = StartLimited(&registry, 3);
  ASSERT_NE(server, nullptr);
  // One sends nothing, one half a request head; both hold a thread.
  absl::StatusOr<std::unique_ptr<SilentClientForTest>> silent =
      SilentClientForTest::Connect("127.0.0.1", server->port());
  absl::StatusOr<std::unique_ptr<SilentClientForTest>> half =
      SilentClientForTest::Connect("127.0.0.1", server->port(), "GET /met");
  ASSERT_TRUE(silent.ok()) << silent.status();
  ASSERT_TRUE(half.ok()) << half.status();
  absl::StatusOr<TestHttpResponse> r =
      HttpRequestForTest("127.0.0.1", server->port(), "GET", "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
}

TEST(MetricsHttpServerLimitsTest, ConnectionsOverTheLimitAreClosedAtOnce) {
  MetricsRegistry registry;
  std::unique_ptr<MetricsHttpServer> server = StartLimited(&registry, 2);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<SilentClientForTest>> silent;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<SilentClientForTest>> c =
        SilentClientForTest::Connect("127.0.0.1", server->port());
    ASSERT_TRUE(c.ok()) << c.status();
    silent.push_back(*std::move(c));
  }
  // The kernel queues connections in order, so the third is accepted after
  // both silent ones hold every thread: it is closed, not kept waiting (a
  // wait would end in DEADLINE_EXCEEDED after the client's 20 s, the
  // server's timeout being an hour).
  absl::StatusOr<TestHttpResponse> r = HttpRequestForTest(
      "127.0.0.1", server->port(), "GET", "/metrics", absl::Seconds(20));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
}

TEST(MetricsHttpServerLimitsTest, ASilentClientIsDroppedAtTheTimeout) {
  MetricsRegistry registry;
  std::unique_ptr<MetricsHttpServer> server =
      StartLimited(&registry, 1, absl::Milliseconds(100));
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<SilentClientForTest>> silent =
      SilentClientForTest::Connect("127.0.0.1", server->port(), "GET /");
  ASSERT_TRUE(silent.ok()) << silent.status();
  EXPECT_TRUE((*silent)->AwaitClosedByServer(absl::Seconds(20)).ok());
}

TEST(MetricsHttpServerLimitsTest, ShutdownEndsConnectionsInFlight) {
  MetricsRegistry registry;
  std::unique_ptr<MetricsHttpServer> server = StartLimited(&registry, 1);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<SilentClientForTest>> silent =
      SilentClientForTest::Connect("127.0.0.1", server->port());
  ASSERT_TRUE(silent.ok()) << silent.status();
  server->Shutdown();
  EXPECT_TRUE((*silent)->AwaitClosedByServer(absl::Seconds(20)).ok());
}

TEST(MetricsHttpServerOptionsTest, ServesIpv6) {
  MetricsRegistry registry;
  MetricsHttpServerOptions options;
  options.registry = &registry;
  options.listen_address = "[::1]:0";
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
      MetricsHttpServer::Start(options);
  if (absl::IsUnavailable(server.status())) {
    GTEST_SKIP() << "no IPv6 loopback here: " << server.status();
  }
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->address(), absl::StrCat("[::1]:", (*server)->port()));
  EXPECT_EQ((*server)->url(),
            absl::StrCat("http://[::1]:", (*server)->port(), "/metrics"));
  absl::StatusOr<TestHttpResponse> r =
      HttpRequestForTest("::1", (*server)->port(), "GET", "/metrics");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
}

TEST(MetricsHttpServerOptionsTest, RefusesBadOptions) {
  MetricsRegistry registry;
  for (const char* address :
       {"", "9464", "127.0.0.1", "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:-1",
        "127.0.0.1:65536", "example.com:80", "300.0.0.1:0", "[::1]", "::1:0",
        "[::1:0", "[example]:0", "[127.0.0.1]:0"}) {
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
  MetricsHttpServerOptions no_connections;
  no_connections.registry = &registry;
  no_connections.max_connections = 0;
  EXPECT_EQ(MetricsHttpServer::Start(no_connections).status().code(),
            absl::StatusCode::kInvalidArgument);
  MetricsHttpServerOptions no_time;
  no_time.registry = &registry;
  no_time.connection_timeout = absl::ZeroDuration();
  EXPECT_EQ(MetricsHttpServer::Start(no_time).status().code(),
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

// ------------------------------------------------------------------ TLS

/// The PKI of tests/test_pki.h, made once for the TLS tests: CA "a" signed
/// the server's certificate (IP 127.0.0.1) and a client's, CA "b" another
/// client's.
class MetricsHttpsServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    pki_ = new testing_process::TestPki;
    const char* tmp = std::getenv("TEST_TMPDIR");
    made_ = testing_process::MakeTestPki(
        absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/metrics-pki"), pki_);
  }
  static void TearDownTestSuite() { delete pki_; }

  void SetUp() override {
    ASSERT_TRUE(made_) << "the test PKI could not be made (see above)";
    // Counts renders: a refused client must never reach the registry.
    ASSERT_TRUE(
        registry_
            .AddCallback(MetricType::kCounter, "dcp_test_renders_total",
                         "Renders.",
                         [this] { return static_cast<double>(++renders_); })
            .ok());
  }

  /// Starts the server with TLS and, when `mutual`, client certificates of
  /// CA "a" required.
  void StartServer(bool mutual) {
    MetricsHttpServerOptions options;
    options.registry = &registry_;
    options.tls.cert = pki_->server_cert;
    options.tls.key = pki_->server_key;
    if (mutual) options.tls.ca = pki_->ca;
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
        MetricsHttpServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  absl::StatusOr<TestHttpResponse> Scrape(const std::string& cert,
                                          const std::string& key) {
    return HttpsRequestForTest("127.0.0.1", server_->port(), "GET", "/metrics",
                               {pki_->ca, cert, key});
  }

  static testing_process::TestPki* pki_;
  static bool made_;
  MetricsRegistry registry_;
  std::atomic<int> renders_{0};
  std::unique_ptr<MetricsHttpServer> server_;
};

testing_process::TestPki* MetricsHttpsServerTest::pki_ = nullptr;
bool MetricsHttpsServerTest::made_ = false;

TEST_F(MetricsHttpsServerTest, ServesOverTls) {
  StartServer(/*mutual=*/false);
  ASSERT_NE(server_, nullptr);
  EXPECT_EQ(server_->url(),
            absl::StrCat("https://127.0.0.1:", server_->port(), "/metrics"));
  absl::StatusOr<TestHttpResponse> r = Scrape("", "");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->headers["content-type"],
            "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_THAT(r->body, HasSubstr("\ndcp_test_renders_total 1\n"));
  // The same routing as plain HTTP.
  r = HttpsRequestForTest("127.0.0.1", server_->port(), "GET", "/x",
                          {pki_->ca, "", ""});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 404);
}

TEST_F(MetricsHttpsServerTest, PlainHttpOnTheTlsPortIsRefused) {
  StartServer(/*mutual=*/false);
  ASSERT_NE(server_, nullptr);
  absl::StatusOr<TestHttpResponse> r =
      HttpRequestForTest("127.0.0.1", server_->port(), "GET", "/metrics");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_EQ(renders_, 0);
}

TEST_F(MetricsHttpsServerTest, MutualTlsRefusesClientsWithoutACertOfTheCa) {
  StartServer(/*mutual=*/true);
  ASSERT_NE(server_, nullptr);
  absl::StatusOr<TestHttpResponse> none = Scrape("", "");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable)
      << none.status();
  absl::StatusOr<TestHttpResponse> other =
      Scrape(pki_->other_client_cert, pki_->other_client_key);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kUnavailable)
      << other.status();
  EXPECT_EQ(renders_, 0);

  absl::StatusOr<TestHttpResponse> valid =
      Scrape(pki_->client_cert, pki_->client_key);
  ASSERT_TRUE(valid.ok()) << valid.status();
  EXPECT_EQ(valid->status, 200);
  EXPECT_THAT(valid->body, HasSubstr("\ndcp_test_renders_total 1\n"));
}

TEST_F(MetricsHttpsServerTest, ASilentClientDoesNotBlockATlsScrape) {
  StartServer(/*mutual=*/true);
  ASSERT_NE(server_, nullptr);
  // Connected, and no ClientHello: its thread waits in the handshake.
  absl::StatusOr<std::unique_ptr<SilentClientForTest>> silent =
      SilentClientForTest::Connect("127.0.0.1", server_->port());
  ASSERT_TRUE(silent.ok()) << silent.status();
  absl::StatusOr<TestHttpResponse> r =
      Scrape(pki_->client_cert, pki_->client_key);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
}

TEST_F(MetricsHttpsServerTest, RefusesTlsFilesItCannotUse) {
  struct Case {
    MetricsTlsOptions tls;
    const char* names;  // what the error must name
  };
  const std::string missing = absl::StrCat(pki_->ca, ".missing");
  for (const Case& c : std::vector<Case>{
           {{pki_->server_cert, "", ""}, "--metrics_tls_key"},
           {{"", pki_->server_key, ""}, "--metrics_tls_cert"},
           {{"", "", pki_->ca}, "--metrics_tls_ca"},
           {{missing, pki_->server_key, ""}, "--metrics_tls_cert"},
           {{pki_->server_cert, missing, ""}, "--metrics_tls_key"},
           {{pki_->server_cert, pki_->server_key, missing}, "--metrics_tls_ca"},
           // Not the certificate's key.
           {{pki_->server_cert, pki_->other_client_key, ""},
            "--metrics_tls_key"},
       }) {
    MetricsHttpServerOptions options;
    options.registry = &registry_;
    options.tls = c.tls;
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
        MetricsHttpServer::Start(options);
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument)
        << c.names << ": " << server.status();
    EXPECT_THAT(std::string(server.status().message()), HasSubstr(c.names));
  }
}

}  // namespace
}  // namespace dcp
