#include "common/metrics/http_request.h"

#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

TEST(ParseHttpRequestLineTest, TakesMethodAndPath) {
  for (const auto& [head, method, path] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "/metrics"},
           {"HEAD /metrics?a=b HTTP/1.0\r\n\r\n", "HEAD", "/metrics"},
           {"POST /x#frag HTTP/1.1\r\n\r\n", "POST", "/x"},
           {"GET / HTTP/1.1\r\n\r\n", "GET", "/"},
       }) {
    absl::StatusOr<HttpRequestLine> line = ParseHttpRequestLine(head);
    ASSERT_TRUE(line.ok()) << head << ": " << line.status();
    EXPECT_EQ(line->method, method) << head;
    EXPECT_EQ(line->path, path) << head;
  }
}

TEST(ParseHttpRequestLineTest, RefusesWhatIsNotAnHttp1RequestLine) {
  for (const std::string& head : std::vector<std::string>{
           "\r\n\r\n",
           "GET /metrics\r\n\r\n",
           "GET  /metrics HTTP/1.1\r\n\r\n",
           "get /metrics HTTP/1.1\r\n\r\n",
           "GET metrics HTTP/1.1\r\n\r\n",
           "GET http://host/metrics HTTP/1.1\r\n\r\n",
           "PRI * HTTP/2.0\r\n\r\n",
           std::string("\x16\x03\x01\x02\x00\x01", 6) + "\r\n\r\n",
       }) {
    absl::StatusOr<HttpRequestLine> line = ParseHttpRequestLine(head);
    EXPECT_EQ(line.status().code(), absl::StatusCode::kInvalidArgument)
        << absl::CHexEscape(head);
  }
}

TEST(FormatHttpResponseTest, CountsTheBodyAndClosesTheConnection) {
  EXPECT_EQ(FormatHttpResponse(200, "text/plain", "hello\n", false),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
            "Content-Length: 6\r\nConnection: close\r\n\r\nhello\n");
  // HEAD: the length of the body it would have had, and no body.
  EXPECT_EQ(FormatHttpResponse(404, "text/plain", "gone\n", true),
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n"
            "Content-Length: 5\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(FormatHttpResponse(405, "text/plain", "", false, "GET, HEAD"),
              HasSubstr("\r\nAllow: GET, HEAD\r\n\r\n"));
  EXPECT_THAT(FormatHttpResponse(431, "text/plain", "", false),
              HasSubstr("431 Request Header Fields Too Large\r\n"));
}

}  // namespace
}  // namespace dcp
