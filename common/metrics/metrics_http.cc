#include "common/metrics/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/metrics/http_request.h"
#include "common/metrics/server_connection.h"

namespace dcp {
namespace {

constexpr absl::string_view kMetricsPath = "/metrics";
constexpr absl::string_view kText = "text/plain; charset=utf-8";
/// Prometheus sends a few hundred bytes; 8 KiB is what common servers allow.
constexpr size_t kMaxRequestHead = 8 << 10;
/// A pause after accept fails for want of descriptors, so that the loop
/// does not spin while the process is out of them.
constexpr absl::Duration kAcceptBackoff = absl::Milliseconds(100);

/// A parsed listen address: the socket address and HOST as given.
struct ListenAddress {
  std::string host;
  sockaddr_storage addr = {};
  socklen_t length = 0;
};

/// `host` as an IPv4 ("1.2.3.4", "localhost") or bracketed IPv6 address,
/// into `out`; false when it is neither.
bool ParseHost(absl::string_view host, int port, ListenAddress* out) {
  if (absl::ConsumePrefix(&host, "[")) {
    if (!absl::ConsumeSuffix(&host, "]")) return false;
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&out->addr);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    out->length = sizeof(sockaddr_in6);
    return inet_pton(AF_INET6, std::string(host).c_str(), &v6->sin6_addr) == 1;
  }
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out->addr);
  v4->sin_family = AF_INET;
  v4->sin_port = htons(static_cast<uint16_t>(port));
  out->length = sizeof(sockaddr_in);
  const std::string text =
      host == "localhost" ? "127.0.0.1" : std::string(host);
  return inet_pton(AF_INET, text.c_str(), &v4->sin_addr) == 1;
}

/// Splits "HOST:PORT"; INVALID_ARGUMENT naming what is wrong.
absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || address.back() == ']') {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics listen address '", address, "' is not HOST:PORT"));
  }
  const absl::string_view host = address.substr(0, colon);
  const absl::string_view port_text = address.substr(colon + 1);
  int port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics listen address '", address, "': port '",
                     port_text, "' is not a number in [0, 65535]"));
  }
  ListenAddress out;
  if (!ParseHost(host, port, &out)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics listen address '", address, "': host '", host,
        "' is not an IPv4 address (e.g. 0.0.0.0, 127.0.0.1), localhost or a "
        "bracketed IPv6 address (e.g. [::1], [::])"));
  }
  out.host = std::string(host);
  return out;
}

/// The port `fd` is bound to.
int BoundPort(int fd) {
  sockaddr_storage addr = {};
  socklen_t length = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    return 0;
  }
  return ntohs(addr.ss_family == AF_INET6
                   ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                   : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

/// A socket listening on `address` (`text` as the user gave it, for
/// errors); UNAVAILABLE with the system's reason.
absl::StatusOr<int> ListenOn(const ListenAddress& address,
                             const std::string& text) {
  const int fd = socket(address.addr.ss_family,
                        SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on '", text,
                     "': socket: ", std::strerror(errno)));
  }
  const int one = 1;
  // A restarted daemon rebinds while its old connections sit in TIME_WAIT
  // (a port another socket listens on still fails).
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address.addr),
           address.length) != 0 ||
      listen(fd, 64) != 0) {
    const int error = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on '", text, "': ", std::strerror(error),
        " (address in use or not local?)"));
  }
  return fd;
}

/// The response to a request head (the bytes up to its blank line).
std::string Answer(absl::string_view head, MetricsRegistry* registry) {
  absl::StatusOr<HttpRequestLine> request = ParseHttpRequestLine(head);
  if (!request.ok()) {
    return FormatHttpResponse(
        400, kText, absl::StrCat(request.status().message(), "\n"), false);
  }
  const bool head_only = request->method == "HEAD";
  if (request->path != kMetricsPath) {
    return FormatHttpResponse(
        404, kText, "Not found: metrics are at /metrics\n", head_only);
  }
  if (request->method != "GET" && !head_only) {
    return FormatHttpResponse(405, kText, "Method not allowed\n", false,
                              "GET, HEAD");
  }
  return FormatHttpResponse(200, kMetricsTextContentType,
                            registry->RenderText(), head_only);
}

/// Reads the request head into `head`: OK once it holds the blank line
/// that ends the headers, RESOURCE_EXHAUSTED past `kMaxRequestHead`, other
/// errors when the client goes away, stalls or the server stops.
absl::Status ReadRequestHead(ServerConnection& connection, std::string* head) {
  char buffer[2048];
  while (true) {
    absl::StatusOr<size_t> n = connection.Read(buffer, sizeof(buffer));
    if (!n.ok()) return n.status();
    if (*n == 0) return absl::UnavailableError("client closed mid-request");
    const size_t searched = head->size() < 3 ? 0 : head->size() - 3;
    head->append(buffer, *n);
    const size_t end = head->find("\r\n\r\n", searched);
    const size_t size = end != std::string::npos ? end + 4 : head->size();
    if (size > kMaxRequestHead) {
      return absl::ResourceExhaustedError("request head too large");
    }
    if (end != std::string::npos) {
      head->resize(size);
      return absl::OkStatus();
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    Options options) {
  if (options.registry == nullptr) {
    return absl::InvalidArgumentError("metrics HTTP server needs a registry");
  }
  if (options.max_connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics HTTP server max_connections must be >= 1, not ",
                     options.max_connections));
  }
  if (options.connection_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics HTTP server connection_timeout must be positive, not ",
        absl::FormatDuration(options.connection_timeout)));
  }
  absl::StatusOr<ListenAddress> address =
      ParseListenAddress(options.listen_address);
  if (!address.ok()) return address.status();
  absl::StatusOr<TlsServerContext> tls = NewTlsServerContext(options.tls);
  if (!tls.ok()) return tls.status();

  absl::StatusOr<int> listen_fd = ListenOn(*address, options.listen_address);
  if (!listen_fd.ok()) return listen_fd.status();
  const int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    close(*listen_fd);
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }

  signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer(
      std::move(options), address->host, *std::move(tls)));
  server->listen_fd_ = *listen_fd;
  server->wake_fd_ = wake_fd;
  server->port_ = BoundPort(*listen_fd);
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  for (int i = 0; i < server->options_.max_connections; ++i) {
    server->servers_.emplace_back([s = server.get()] { s->ServeLoop(); });
  }
  return server;
}

MetricsHttpServer::MetricsHttpServer(Options options, std::string host,
                                     TlsServerContext tls)
    : options_(std::move(options)),
      host_(std::move(host)),
      tls_(std::move(tls)) {}

MetricsHttpServer::~MetricsHttpServer() { Shutdown(); }

std::string MetricsHttpServer::address() const {
  return absl::StrCat(host_, ":", port_);
}

std::string MetricsHttpServer::url() const {
  return absl::StrCat(tls_ != nullptr ? "https://" : "http://", address(),
                      kMetricsPath);
}

void MetricsHttpServer::AcceptLoop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    const int fd =
        accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        pollfd wake = {wake_fd_, POLLIN, 0};
        poll(&wake, 1, absl::ToInt64Milliseconds(kAcceptBackoff));
      }
      continue;
    }
    absl::MutexLock lock(&mu_);
    if (open_connections_ >= options_.max_connections) {
      close(fd);  // every thread busy: refuse now rather than queue
      continue;
    }
    ++open_connections_;
    accepted_.push_back(fd);
  }
}

void MetricsHttpServer::ServeLoop() {
  while (true) {
    int fd = -1;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](MetricsHttpServer* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
            return s->stopping_ || !s->accepted_.empty();
          },
          this));
      if (stopping_) return;
      fd = accepted_.front();
      accepted_.pop_front();
    }
    Serve(fd);
    absl::MutexLock lock(&mu_);
    --open_connections_;
  }
}

void MetricsHttpServer::Serve(int fd) {
  ServerConnection connection(
      fd, tls_.get(), absl::Now() + options_.connection_timeout, wake_fd_);
  // A client refused in the handshake, gone or too slow gets nothing more:
  // Prometheus reports its own side of a failed scrape.
  if (!connection.Handshake().ok()) return;
  std::string head;
  const absl::Status read = ReadRequestHead(connection, &head);
  std::string response;
  if (read.ok()) {
    response = Answer(head, options_.registry);
  } else if (absl::IsResourceExhausted(read)) {
    response = FormatHttpResponse(431, kText, "Request head too large\n",
                                  /*head_only=*/false);
  } else {
    return;
  }
  if (connection.Write(response).ok()) connection.Finish();
}

void MetricsHttpServer::Shutdown() {
  absl::MutexLock shutdown_lock(&shutdown_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  // Cannot fail: an eventfd's counter is far from overflowing at 1.
  const uint64_t one = 1;
  const ssize_t woken = write(wake_fd_, &one, sizeof(one));
  (void)woken;
  acceptor_.join();
  for (std::thread& t : servers_) t.join();
  close(listen_fd_);
  close(wake_fd_);
  absl::MutexLock lock(&mu_);
  for (const int fd : accepted_) close(fd);
  accepted_.clear();
}

}  // namespace dcp
