#ifndef DCP_COMMON_METRICS_METRICS_HTTP_H_
#define DCP_COMMON_METRICS_METRICS_HTTP_H_

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/metrics/metrics.h"
#include "common/metrics/tls_server_context.h"

namespace dcp {

/// Configuration of a `MetricsHttpServer`.
struct MetricsHttpServerOptions {
  /// "HOST:PORT" to listen on. HOST is an IPv4 address ("0.0.0.0" for every
  /// interface), "localhost" (127.0.0.1) or a bracketed IPv6 address
  /// ("[::1]", "[::]" for every interface, IPv4 included where the host
  /// maps it). Port 0 picks a free port (see `MetricsHttpServer::port()`).
  std::string listen_address = "127.0.0.1:0";
  /// What GET /metrics renders. Required; not owned; must outlive the
  /// server.
  MetricsRegistry* registry = nullptr;
  /// TLS, and mutual TLS with `tls.ca`; plain HTTP when empty.
  MetricsTlsOptions tls;
  /// Connections served at once, a thread each. One more is closed as soon
  /// as it is accepted, so a crowd of idle clients costs at most this many
  /// threads. Scrapes are a few a minute: a handful is plenty. At least 1.
  int max_connections = 8;
  /// How long one connection may take from accept to the end of the
  /// response, TLS handshake included: a client that sends nothing, or
  /// trickles, holds its thread no longer. Positive.
  absl::Duration connection_timeout = absl::Seconds(10);
};

/// Serves a `MetricsRegistry` to Prometheus over HTTP/1.1, or HTTPS with
/// `tls` (OpenSSL): `GET /metrics` (and HEAD) answers 200 with the text
/// exposition format 0.0.4 (`Content-Type: text/plain; version=0.0.4;
/// charset=utf-8`), other methods on /metrics 405, every other path 404, a
/// malformed request 400, a request head over 8 KiB 431. One request per
/// connection (`Connection: close`). Each scrape renders the registry
/// afresh (running its collect hooks and callbacks). Under mutual TLS a
/// client without a certificate the CA signed is refused in the handshake
/// and never reaches the registry.
///
/// Threads: one accepting, `max_connections` serving, started by `Start`. A
/// daemon that blocks signals for a `SignalWatcher` must do so before
/// `Start` (the threads inherit the mask). SIGPIPE is ignored from `Start`
/// on (a client that hangs up mid-response must not kill the daemon).
///
/// Thread-safe. The destructor shuts down.
///
///   MetricsHttpServerOptions options;
///   options.listen_address = "0.0.0.0:9464";
///   options.registry = &registry;
///   options.tls = {"/etc/dcp/metrics.crt", "/etc/dcp/metrics.key"};
///   ASSIGN_OR_RETURN(std::unique_ptr<MetricsHttpServer> metrics,
///                    MetricsHttpServer::Start(options));
///   std::printf("metrics on %s\n", metrics->url().c_str());
class MetricsHttpServer {
 public:
  using Options = MetricsHttpServerOptions;

  /// Binds and starts serving. INVALID_ARGUMENT for a malformed address, a
  /// missing registry, bad limits or TLS files that cannot be used (naming
  /// the file and OpenSSL's reason); UNAVAILABLE when the address cannot be
  /// bound (in use, not local), with the system's reason.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      Options options);

  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  /// The bound port.
  int port() const { return port_; }
  /// The listen address with the bound port, e.g. "127.0.0.1:40123" or
  /// "[::1]:40123".
  std::string address() const;
  /// "http://ADDRESS/metrics", or https:// with TLS.
  std::string url() const;

  /// Stops accepting, ends the connections in flight (a scrape being
  /// answered is cut short) and joins the threads. Idempotent.
  void Shutdown();

 private:
  MetricsHttpServer(Options options, std::string host, TlsServerContext tls);

  void AcceptLoop();
  void ServeLoop();
  /// Answers the one request of connection `fd`, then closes it.
  void Serve(int fd);

  const Options options_;
  /// HOST of the listen address, as `address()` shows it.
  const std::string host_;
  const TlsServerContext tls_;
  int port_ = 0;
  int listen_fd_ = -1;
  /// Readable once shutting down: wakes every poll of the server's threads.
  int wake_fd_ = -1;

  /// Held by `Shutdown` from start to end, so that a second caller returns
  /// only when the threads are gone.
  absl::Mutex shutdown_mu_;
  std::thread acceptor_;
  std::vector<std::thread> servers_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  /// Accepted connections no thread has taken yet.
  std::deque<int> accepted_ ABSL_GUARDED_BY(mu_);
  /// Connections accepted and not yet closed (queued or being served).
  int open_connections_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dcp

#endif  // DCP_COMMON_METRICS_METRICS_HTTP_H_
