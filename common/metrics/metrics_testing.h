#ifndef DCP_COMMON_METRICS_METRICS_TESTING_H_
#define DCP_COMMON_METRICS_METRICS_TESTING_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/metrics/metrics.h"

// Helpers for tests of metrics: look a sample up, validate an exposition
// with Prometheus' promtool, talk HTTP to /metrics and to Prometheus.

namespace dcp {

/// The value of the sample `name` (e.g. "x_total", "h_bucket") whose labels
/// are exactly `labels` (any order), or nullopt.
std::optional<double> FindSample(
    const std::vector<MetricFamilySnapshot>& families, absl::string_view name,
    const std::vector<std::pair<std::string, std::string>>& labels = {});

/// The absolute path of `program` on $PATH, or nullopt.
std::optional<std::string> FindOnPath(absl::string_view program);

/// What `promtool check metrics` said about an exposition.
struct PromtoolResult {
  int exit_code = -1;
  /// Its stdout and stderr.
  std::string output;
};

/// Runs `promtool check metrics` (found on $PATH) with `exposition` on its
/// stdin; `scratch_dir` holds its input and output files. NOT_FOUND when
/// promtool is not installed (tools/setup.sh installs it).
absl::StatusOr<PromtoolResult> RunPromtoolCheckMetrics(
    const std::string& exposition, const std::string& scratch_dir);

/// An HTTP response as `HttpRequestForTest` read it off the socket.
struct TestHttpResponse {
  int status = 0;
  /// Header names lower-cased; the last value of a repeated header.
  std::map<std::string, std::string> headers;
  std::string body;
};

/// Sends one HTTP/1.0 request (`Connection: close`) to `host:port` over a
/// plain TCP socket and reads the response until the server closes. For
/// tests of HTTP endpoints (dcp's /metrics, Prometheus' query API): no
/// redirects, no chunked bodies; `host` is an IPv4 or IPv6 literal
/// (without brackets). UNAVAILABLE when the connection fails or is closed
/// before any answer, DEADLINE_EXCEEDED after `timeout` without data,
/// DATA_LOSS for a malformed or short response.
absl::StatusOr<TestHttpResponse> HttpRequestForTest(
    const std::string& host, int port, const std::string& method,
    const std::string& target, absl::Duration timeout = absl::Seconds(10));

/// How `HttpsRequestForTest` secures its connection (PEM files).
struct TestTlsClientOptions {
  /// The CA the server's certificate must chain to; the certificate must
  /// also name the host (its IP address).
  std::string ca;
  /// The client certificate and key presented for mutual TLS; none when
  /// empty.
  std::string cert;
  std::string key;
};

/// `HttpRequestForTest` over TLS (OpenSSL). UNAVAILABLE naming OpenSSL's
/// reason when the handshake fails or the server refuses the client (under
/// TLS 1.3 a refused client certificate shows as an alert on the first
/// read).
absl::StatusOr<TestHttpResponse> HttpsRequestForTest(
    const std::string& host, int port, const std::string& method,
    const std::string& target, const TestTlsClientOptions& tls,
    absl::Duration timeout = absl::Seconds(10));

/// Sends `request` as it is (a whole, possibly malformed, request) over
/// plain TCP and parses what comes back, as `HttpRequestForTest` does.
absl::StatusOr<TestHttpResponse> RawHttpRequestForTest(
    const std::string& host, int port, const std::string& request,
    absl::Duration timeout = absl::Seconds(10));

/// A client that connects and then sends nothing (or half a request): what
/// a server must not wait on for long. Closes its socket when destroyed.
class SilentClientForTest {
 public:
  /// Connects to `host:port` (IPv4 or IPv6 literal) and sends `prefix`.
  static absl::StatusOr<std::unique_ptr<SilentClientForTest>> Connect(
      const std::string& host, int port, const std::string& prefix = "");
  ~SilentClientForTest();
  SilentClientForTest(const SilentClientForTest&) = delete;
  SilentClientForTest& operator=(const SilentClientForTest&) = delete;

  /// Waits up to `timeout` for the server to close the connection; OK when
  /// it did (whatever it sent before), DEADLINE_EXCEEDED when it did not.
  absl::Status AwaitClosedByServer(absl::Duration timeout);

 private:
  explicit SilentClientForTest(int fd) : fd_(fd) {}
  const int fd_;
};

/// `value` percent-encoded for a URL query (RFC 3986 unreserved kept).
std::string UrlEncodeForTest(const std::string& value);

}  // namespace dcp

#endif  // DCP_COMMON_METRICS_METRICS_TESTING_H_
