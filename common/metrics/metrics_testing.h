#ifndef DCP_COMMON_METRICS_METRICS_TESTING_H_
#define DCP_COMMON_METRICS_METRICS_TESTING_H_

#include <map>
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
/// redirects, no chunked bodies, IPv4 literal hosts only. UNAVAILABLE when
/// the connection fails, DEADLINE_EXCEEDED after `timeout` without data,
/// DATA_LOSS for a malformed or short response.
absl::StatusOr<TestHttpResponse> HttpRequestForTest(
    const std::string& host, int port, const std::string& method,
    const std::string& target, absl::Duration timeout = absl::Seconds(10));

/// `value` percent-encoded for a URL query (RFC 3986 unreserved kept).
std::string UrlEncodeForTest(const std::string& value);

}  // namespace dcp

#endif  // DCP_COMMON_METRICS_METRICS_TESTING_H_
