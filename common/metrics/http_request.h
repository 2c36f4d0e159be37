#ifndef DCP_COMMON_METRICS_HTTP_REQUEST_H_
#define DCP_COMMON_METRICS_HTTP_REQUEST_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

// The little of HTTP/1.1 the metrics endpoint speaks: the request line of a
// request head, and a complete response with a Content-Length. Pure
// functions, no I/O (common/metrics/metrics_http.cc does that).

namespace dcp {

/// The request line of an HTTP/1.x request.
struct HttpRequestLine {
  std::string method;
  /// The target's path: what precedes '?' or '#' ("/metrics?x=1" ->
  /// "/metrics"). Not percent-decoded.
  std::string path;
};

/// Parses the request line of `head` (the bytes up to and including the
/// blank line that ends the headers): "METHOD SP /target SP HTTP/1.x".
/// INVALID_ARGUMENT, naming what is wrong, for anything else (no version,
/// HTTP/2 preface, a target that is not a path). Header lines are not
/// looked at: the endpoint needs none.
absl::StatusOr<HttpRequestLine> ParseHttpRequestLine(absl::string_view head);

/// A whole HTTP/1.1 response: status line, Content-Type, Content-Length of
/// `body`, `Connection: close`, an `Allow` header when `allow` is not empty,
/// then `body` unless `head_only` (a HEAD request: the length still counts
/// the body it would have had).
std::string FormatHttpResponse(int code, absl::string_view content_type,
                               absl::string_view body, bool head_only,
                               absl::string_view allow = "");

}  // namespace dcp

#endif  // DCP_COMMON_METRICS_HTTP_REQUEST_H_
