#include "common/metrics/metrics_testing.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/metrics/tls_server_context.h"
#include "common/status_macros.h"
#include "common/subprocess.h"

namespace dcp {
namespace {

/// Closes the socket when it goes out of scope.
struct Socket {
  int fd = -1;
  ~Socket() {
    if (fd >= 0) close(fd);
  }
};

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

/// Connects `sock` to `host:port` (an IPv4 or IPv6 literal) with `timeout`
/// on every later send and receive.
absl::Status ConnectForTest(const std::string& host, int port,
                            absl::Duration timeout, Socket* sock) {
  sockaddr_storage addr = {};
  socklen_t length = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    length = sizeof(*v4);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    length = sizeof(*v6);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("'", host, "' is not an IPv4 or IPv6 address"));
  }
  sock->fd = socket(addr.ss_family, SOCK_STREAM, 0);
  if (sock->fd < 0) return absl::InternalError("socket() failed");
  const timeval tv = absl::ToTimeval(timeout);
  setsockopt(sock->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(sock->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(sock->fd, reinterpret_cast<const sockaddr*>(&addr), length) !=
      0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot connect to ", host, ":", port, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::string RequestText(const std::string& method, const std::string& target,
                        const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return absl::StrCat(method, " ", target, " HTTP/1.0\r\nHost: ", v6 ? "[" : "",
                      host, v6 ? "]" : "", ":", port,
                      "\r\nConnection: close\r\nAccept: */*\r\n\r\n");
}

absl::Status SendAll(int fd, absl::string_view data, const std::string& host,
                     int port) {
  for (size_t sent = 0; sent < data.size();) {
    const ssize_t n =
        send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      return absl::UnavailableError(
          absl::StrCat("send to ", host, ":", port, " failed"));
    }
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

/// Reads until the server closes.
absl::StatusOr<std::string> ReceiveAll(int fd, const std::string& host,
                                       int port, absl::Duration timeout) {
  std::string raw;
  char buf[16384];
  while (true) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return absl::DeadlineExceededError(
            absl::StrCat("no answer from ", host, ":", port, " within ",
                         absl::FormatDuration(timeout)));
      }
      return absl::UnavailableError(absl::StrCat("recv from ", host, ":", port,
                                                 ": ", std::strerror(errno)));
    }
    raw.append(buf, static_cast<size_t>(n));
  }
  if (raw.empty()) {
    return absl::UnavailableError(absl::StrCat(
        host, ":", port, " closed the connection without an answer"));
  }
  return raw;
}

/// An OpenSSL failure, with the reasons in its error queue.
absl::Status TlsError(const std::string& what) {
  return absl::UnavailableError(
      absl::StrCat(what, " failed: ", TakeOpensslErrors("connection closed")));
}

/// A response as read off the socket; `method` HEAD has no body.
absl::StatusOr<TestHttpResponse> ParseResponse(const std::string& raw,
                                               const std::string& method) {
  const size_t header_end = raw.find("\r\n\r\n");
  if (header_end == std::string::npos) {
    return absl::DataLossError(
        absl::StrCat("response without a header end: '", raw, "'"));
  }
  TestHttpResponse response;
  std::vector<absl::string_view> lines =
      absl::StrSplit(absl::string_view(raw).substr(0, header_end), "\r\n");
  // "HTTP/1.1 200 OK"
  std::vector<absl::string_view> status =
      absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  if (status.size() < 2 || !absl::StartsWith(status[0], "HTTP/") ||
      !absl::SimpleAtoi(status[1], &response.status)) {
    return absl::DataLossError(
        absl::StrCat("bad status line '", lines[0], "'"));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) {
      return absl::DataLossError(
          absl::StrCat("bad header line '", lines[i], "'"));
    }
    response.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  response.body = raw.substr(header_end + 4);
  auto length = response.headers.find("content-length");
  size_t expected = 0;
  if (length != response.headers.end() && method != "HEAD" &&
      absl::SimpleAtoi(length->second, &expected) &&
      expected != response.body.size()) {
    return absl::DataLossError(absl::StrCat("Content-Length ", expected,
                                            " but the body has ",
                                            response.body.size(), " bytes"));
  }
  return response;
}

}  // namespace

std::optional<double> FindSample(
    const std::vector<MetricFamilySnapshot>& families, absl::string_view name,
    const std::vector<std::pair<std::string, std::string>>& labels) {
  std::vector<std::pair<std::string, std::string>> want = labels;
  std::sort(want.begin(), want.end());
  for (const MetricFamilySnapshot& family : families) {
    for (const MetricSample& sample : family.samples) {
      if (sample.name != name) continue;
      std::vector<std::pair<std::string, std::string>> have = sample.labels;
      std::sort(have.begin(), have.end());
      if (have == want) return sample.value;
    }
  }
  return std::nullopt;
}

std::optional<std::string> FindOnPath(absl::string_view program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return std::nullopt;
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = absl::StrCat(dir, "/", program);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

absl::StatusOr<PromtoolResult> RunPromtoolCheckMetrics(
    const std::string& exposition, const std::string& scratch_dir) {
  const std::optional<std::string> promtool = FindOnPath("promtool");
  if (!promtool.has_value()) {
    return absl::NotFoundError(
        "promtool is not on PATH; tools/setup.sh installs it (Debian package "
        "prometheus)");
  }
  const std::string input = absl::StrCat(scratch_dir, "/promtool-input.txt");
  const std::string output = absl::StrCat(scratch_dir, "/promtool-output.txt");
  {
    std::ofstream out(input, std::ios::binary);
    out << exposition;
    if (!out.good()) {
      return absl::InternalError(absl::StrCat("cannot write ", input));
    }
  }
  // The log is appended to: what an earlier check wrote goes first.
  std::remove(output.c_str());
  subprocess::StartOptions options;
  options.stdin_path = input;
  options.log_path = output;
  absl::StatusOr<subprocess::Child> child =
      subprocess::Run("promtool", {*promtool, "check", "metrics"}, options);
  // Not NOT_FOUND: that says promtool is not installed.
  if (!child.ok()) return absl::InternalError(child.status().message());
  PromtoolResult result;
  result.exit_code = child->exit_code;
  result.output = ReadWholeFile(output);
  return result;
}

absl::StatusOr<TestHttpResponse> HttpRequestForTest(const std::string& host,
                                                    int port,
                                                    const std::string& method,
                                                    const std::string& target,
                                                    absl::Duration timeout) {
  Socket sock;
  RETURN_IF_ERROR(ConnectForTest(host, port, timeout, &sock));
  RETURN_IF_ERROR(
      SendAll(sock.fd, RequestText(method, target, host, port), host, port));
  ASSIGN_OR_RETURN(std::string raw, ReceiveAll(sock.fd, host, port, timeout));
  return ParseResponse(raw, method);
}

absl::StatusOr<TestHttpResponse> RawHttpRequestForTest(
    const std::string& host, int port, const std::string& request,
    absl::Duration timeout) {
  Socket sock;
  RETURN_IF_ERROR(ConnectForTest(host, port, timeout, &sock));
  RETURN_IF_ERROR(SendAll(sock.fd, request, host, port));
  ASSIGN_OR_RETURN(std::string raw, ReceiveAll(sock.fd, host, port, timeout));
  return ParseResponse(raw, "GET");
}

absl::StatusOr<TestHttpResponse> HttpsRequestForTest(
    const std::string& host, int port, const std::string& method,
    const std::string& target, const TestTlsClientOptions& tls,
    absl::Duration timeout) {
  Socket sock;
  RETURN_IF_ERROR(ConnectForTest(host, port, timeout, &sock));
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context(
      SSL_CTX_new(TLS_client_method()), &SSL_CTX_free);
  if (context == nullptr) return TlsError("SSL_CTX_new");
  SSL_CTX_set_verify(context.get(), SSL_VERIFY_PEER, nullptr);
  if (SSL_CTX_load_verify_locations(context.get(), tls.ca.c_str(), nullptr) !=
      1) {
    return TlsError(absl::StrCat("CA ", tls.ca));
  }
  if (!tls.cert.empty() &&
      (SSL_CTX_use_certificate_chain_file(context.get(), tls.cert.c_str()) !=
           1 ||
       SSL_CTX_use_PrivateKey_file(context.get(), tls.key.c_str(),
                                   SSL_FILETYPE_PEM) != 1)) {
    return TlsError(absl::StrCat("client certificate ", tls.cert));
  }
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(context.get()),
                                                &SSL_free);
  if (ssl == nullptr) return TlsError("SSL_new");
  SSL_set_fd(ssl.get(), sock.fd);
  X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl.get()), host.c_str());
  if (SSL_connect(ssl.get()) != 1) return TlsError("TLS handshake");
  const std::string request = RequestText(method, target, host, port);
  if (SSL_write(ssl.get(), request.data(), static_cast<int>(request.size())) !=
      static_cast<int>(request.size())) {
    return TlsError("TLS write");
  }
  std::string raw;
  char buf[16384];
  int n = 0;
  while ((n = SSL_read(ssl.get(), buf, sizeof(buf))) > 0) {
    raw.append(buf, static_cast<size_t>(n));
  }
  if (SSL_get_error(ssl.get(), n) != SSL_ERROR_ZERO_RETURN) {
    return TlsError("TLS read");
  }
  return ParseResponse(raw, method);
}

absl::StatusOr<std::unique_ptr<SilentClientForTest>>
SilentClientForTest::Connect(const std::string& host, int port,
                             const std::string& prefix) {
  Socket sock;
  RETURN_IF_ERROR(ConnectForTest(host, port, absl::Seconds(10), &sock));
  RETURN_IF_ERROR(SendAll(sock.fd, prefix, host, port));
  std::unique_ptr<SilentClientForTest> client(new SilentClientForTest(sock.fd));
  sock.fd = -1;
  return client;
}

SilentClientForTest::~SilentClientForTest() { close(fd_); }

absl::Status SilentClientForTest::AwaitClosedByServer(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  char buf[4096];
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    pollfd fd = {fd_, POLLIN, 0};
    if (left <= absl::ZeroDuration() ||
        poll(&fd, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) ==
            0) {
      return absl::DeadlineExceededError(
          absl::StrCat("the server kept the connection open for ",
                       absl::FormatDuration(timeout)));
    }
    const ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      return absl::OkStatus();
    }
  }
}

std::string UrlEncodeForTest(const std::string& value) {
  std::string out;
  for (const unsigned char c : value) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' ||
        c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

}  // namespace dcp
