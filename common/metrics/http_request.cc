#include "common/metrics/http_request.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dcp {
namespace {

absl::string_view ReasonPhrase(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Unknown";
  }
}

/// An RFC 9110 method token of letters only (every registered method).
bool IsMethod(absl::string_view method) {
  if (method.empty() || method.size() > 32) return false;
  for (char c : method) {
    if (!absl::ascii_isupper(c)) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<HttpRequestLine> ParseHttpRequestLine(absl::string_view head) {
  const size_t end = head.find("\r\n");
  const absl::string_view line = head.substr(0, end);
  const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("request line is not 'METHOD TARGET HTTP/1.x': '",
                     absl::CHexEscape(line.substr(0, 80)), "'"));
  }
  if (!IsMethod(parts[0])) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad method '", absl::CHexEscape(parts[0].substr(0, 32)), "'"));
  }
  if (!absl::StartsWith(parts[2], "HTTP/1.")) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported protocol '",
                     absl::CHexEscape(parts[2].substr(0, 16)), "'"));
  }
  if (!absl::StartsWith(parts[1], "/")) {
    return absl::InvalidArgumentError(
        absl::StrCat("target '", absl::CHexEscape(parts[1].substr(0, 80)),
                     "' is not a path"));
  }
  HttpRequestLine request;
  request.method = std::string(parts[0]);
  request.path = std::string(parts[1].substr(0, parts[1].find_first_of("?#")));
  return request;
}

std::string FormatHttpResponse(int code, absl::string_view content_type,
                               absl::string_view body, bool head_only,
                               absl::string_view allow) {
  std::string out = absl::StrCat("HTTP/1.1 ", code, " ", ReasonPhrase(code),
                                 "\r\nContent-Type: ", content_type,
                                 "\r\nContent-Length: ", body.size(),
                                 "\r\nConnection: close\r\n");
  if (!allow.empty()) absl::StrAppend(&out, "Allow: ", allow, "\r\n");
  absl::StrAppend(&out, "\r\n");
  if (!head_only) absl::StrAppend(&out, body);
  return out;
}

}  // namespace dcp
