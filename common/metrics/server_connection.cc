#include "common/metrics/server_connection.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/metrics/tls_server_context.h"

namespace dcp {
namespace {

/// What one I/O call asked for.
enum class Step { kProgress, kWantRead, kWantWrite, kEnd, kFailed };

/// Classifies a plain socket call's result.
Step PlainStep(int n, bool writing) {
  if (n > 0) return Step::kProgress;
  if (n == 0 && !writing) return Step::kEnd;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
    return writing ? Step::kWantWrite : Step::kWantRead;
  }
  return Step::kFailed;
}

/// Classifies an SSL_* call's result.
Step TlsStep(ssl_st* ssl, int n) {
  if (n > 0) return Step::kProgress;
  switch (SSL_get_error(ssl, n)) {
    case SSL_ERROR_WANT_READ:
      return Step::kWantRead;
    case SSL_ERROR_WANT_WRITE:
      return Step::kWantWrite;
    case SSL_ERROR_ZERO_RETURN:
      return Step::kEnd;
    default:
      return Step::kFailed;
  }
}

constexpr size_t kMaxDrainBytes = 64 << 10;
constexpr absl::Duration kMaxLinger = absl::Seconds(1);

}  // namespace

ServerConnection::ServerConnection(int fd, ssl_ctx_st* tls, absl::Time deadline,
                                   int wake_fd)
    : fd_(fd), tls_(tls != nullptr), deadline_(deadline), wake_fd_(wake_fd) {
  if (tls != nullptr) {
    ssl_ = SSL_new(tls);
    if (ssl_ != nullptr) SSL_set_fd(ssl_, fd_);
  }
}

ServerConnection::~ServerConnection() {
  if (ssl_ != nullptr) SSL_free(ssl_);
  close(fd_);
}

absl::Status ServerConnection::Await(short events, absl::Time until) {
  while (true) {
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError("client too slow");
    }
    pollfd fds[2] = {{fd_, events, 0}, {wake_fd_, POLLIN, 0}};
    const int ms = static_cast<int>(
        std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 60000));
    const int n = poll(fds, 2, ms);
    if (n < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    if (n > 0 && fds[1].revents != 0) {
      return absl::CancelledError("server shutting down");
    }
    // Errors and hang-ups surface in the next call.
    if (n > 0 && fds[0].revents != 0) return absl::OkStatus();
  }
}

absl::StatusOr<int> ServerConnection::Retry(const std::function<int()>& op,
                                            bool writing) {
  while (true) {
    ERR_clear_error();
    errno = 0;
    const int n = op();
    const Step step =
        ssl_ != nullptr ? TlsStep(ssl_, n) : PlainStep(n, writing);
    switch (step) {
      case Step::kProgress:
        return n;
      case Step::kEnd:
        return 0;
      case Step::kWantRead:
      case Step::kWantWrite:
        if (absl::Status s =
                Await(step == Step::kWantRead ? POLLIN : POLLOUT, deadline_);
            !s.ok()) {
          return s;
        }
        break;
      case Step::kFailed:
        return absl::UnavailableError(TakeOpensslErrors(
            errno != 0 ? std::strerror(errno) : "connection lost"));
    }
  }
}

absl::Status ServerConnection::Handshake() {
  if (!tls_) return absl::OkStatus();
  if (ssl_ == nullptr) {
    return absl::InternalError(
        absl::StrCat("SSL_new: ", TakeOpensslErrors("failed")));
  }
  absl::StatusOr<int> done = Retry([this] { return SSL_accept(ssl_); },
                                   /*writing=*/false);
  if (!done.ok() && absl::IsUnavailable(done.status())) {
    return absl::UnauthenticatedError(
        absl::StrCat("TLS handshake: ", done.status().message()));
  }
  if (done.ok() && *done == 0) {
    return absl::UnauthenticatedError("TLS handshake: client closed");
  }
  return done.status();
}

absl::StatusOr<size_t> ServerConnection::Read(char* buffer, size_t size) {
  const int chunk = static_cast<int>(std::min<size_t>(size, 1 << 20));
  absl::StatusOr<int> n = Retry(
      [&] {
        return ssl_ != nullptr ? SSL_read(ssl_, buffer, chunk)
                               : static_cast<int>(recv(fd_, buffer, chunk, 0));
      },
      /*writing=*/false);
  if (!n.ok()) return n.status();
  return static_cast<size_t>(*n);
}

absl::Status ServerConnection::Write(absl::string_view data) {
  while (!data.empty()) {
    const int chunk = static_cast<int>(std::min<size_t>(data.size(), 1 << 20));
    absl::StatusOr<int> n = Retry(
        [&] {
          return ssl_ != nullptr ? SSL_write(ssl_, data.data(), chunk)
                                 : static_cast<int>(send(fd_, data.data(),
                                                         chunk, MSG_NOSIGNAL));
        },
        /*writing=*/true);
    if (!n.ok()) return n.status();
    if (*n == 0) return absl::UnavailableError("client closed");
    data.remove_prefix(static_cast<size_t>(*n));
  }
  return absl::OkStatus();
}

void ServerConnection::Finish() {
  if (ssl_ != nullptr) {
    ERR_clear_error();
    SSL_shutdown(ssl_);  // sends close_notify; the client's is not awaited
  }
  shutdown(fd_, SHUT_WR);
  const absl::Time until = std::min(deadline_, absl::Now() + kMaxLinger);
  char buffer[4096];
  for (size_t drained = 0; drained < kMaxDrainBytes;) {
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    if (n > 0) {
      drained += static_cast<size_t>(n);
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR) ||
               !Await(POLLIN, until).ok()) {
      return;
    }
  }
}

}  // namespace dcp
