#include "common/metrics/metrics_testing.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

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
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, input.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, output.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<std::string> args = {*promtool, "check", "metrics"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, promtool->c_str(), &actions, nullptr,
                             argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("cannot start ", *promtool, ": ", std::strerror(rc)));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return absl::InternalError(
          absl::StrCat("waitpid: ", std::strerror(errno)));
    }
  }
  PromtoolResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.output = ReadWholeFile(output);
  return result;
}

absl::StatusOr<TestHttpResponse> HttpRequestForTest(const std::string& host,
                                                    int port,
                                                    const std::string& method,
                                                    const std::string& target,
                                                    absl::Duration timeout) {
  sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", host, "' is not an IPv4 address"));
  }
  Socket sock;
  sock.fd = socket(AF_INET, SOCK_STREAM, 0);
  if (sock.fd < 0) return absl::InternalError("socket() failed");
  const timeval tv = absl::ToTimeval(timeout);
  setsockopt(sock.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(sock.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(sock.fd, reinterpret_cast<const sockaddr*>(&addr),
              sizeof(addr)) != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot connect to ", host, ":", port, ": ", std::strerror(errno)));
  }
  const std::string request =
      absl::StrCat(method, " ", target, " HTTP/1.0\r\nHost: ", host, ":", port,
                   "\r\nConnection: close\r\nAccept: */*\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n =
        send(sock.fd, request.data() + sent, request.size() - sent, 0);
    if (n <= 0) {
      return absl::UnavailableError(
          absl::StrCat("send to ", host, ":", port, " failed"));
    }
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[16384];
  while (true) {
    const ssize_t n = recv(sock.fd, buf, sizeof(buf), 0);
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
