#ifndef DCP_COMMON_METRICS_SERVER_CONNECTION_H_
#define DCP_COMMON_METRICS_SERVER_CONNECTION_H_

#include <cstddef>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

struct ssl_ctx_st;
struct ssl_st;

namespace dcp {

/// One accepted connection of an HTTP server, plain or TLS: the same calls
/// either way, each bounded by one deadline for the whole connection (so a
/// silent or slow client holds it for that long at most) and cut short when
/// the server's wake-up descriptor becomes readable (shutdown).
///
/// The socket must be non-blocking. Not thread-safe: one thread serves a
/// connection. Owns the socket (and the TLS session); the destructor
/// closes them.
class ServerConnection {
 public:
  /// `tls`: the server's context, or null for plain HTTP. `wake_fd`: an
  /// eventfd or pipe that turns readable to abort every wait.
  ServerConnection(int fd, ssl_ctx_st* tls, absl::Time deadline, int wake_fd);
  ~ServerConnection();
  ServerConnection(const ServerConnection&) = delete;
  ServerConnection& operator=(const ServerConnection&) = delete;

  /// The TLS handshake (nothing for plain HTTP). UNAUTHENTICATED with
  /// OpenSSL's reason when the client is refused (no certificate, an
  /// untrusted one, plain HTTP on a TLS port).
  absl::Status Handshake();
  /// Reads what is there, up to `size` bytes; 0 once the client closed.
  absl::StatusOr<size_t> Read(char* buffer, size_t size);
  /// Writes all of `data`.
  absl::Status Write(absl::string_view data);
  /// Ends the connection politely: TLS close_notify, end of our stream, and
  /// what the client still sends read and dropped (up to 64 KiB, a second
  /// or the deadline), so that closing does not reset the connection under
  /// the response it has not read yet.
  void Finish();

 private:
  /// Runs `op` (one recv/send or SSL_* call, returning its result) until it
  /// moves data or fails, waiting on the socket for whatever it asks.
  /// `writing`: `op` sends (a plain socket's EAGAIN then waits to write).
  /// The result is `op`'s positive return, or 0 at end of stream.
  absl::StatusOr<int> Retry(const std::function<int()>& op, bool writing);
  /// Waits until the socket has `events` (POLLIN/POLLOUT) before `until`.
  absl::Status Await(short events, absl::Time until);

  const int fd_;
  const bool tls_;
  /// The TLS session when `tls_` (null if OpenSSL could not make one).
  ssl_st* ssl_ = nullptr;
  const absl::Time deadline_;
  const int wake_fd_;
};

}  // namespace dcp

#endif  // DCP_COMMON_METRICS_SERVER_CONNECTION_H_
