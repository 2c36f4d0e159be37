#ifndef DCP_COMMON_METRICS_METRICS_HTTP_H_
#define DCP_COMMON_METRICS_METRICS_HTTP_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/metrics.h"

struct mg_context;

namespace dcp {

/// Configuration of a `MetricsHttpServer`.
struct MetricsHttpServerOptions {
  /// "HOST:PORT" to listen on. HOST is an IPv4 address ("0.0.0.0" for every
  /// interface) or "localhost"; the Debian civetweb has no IPv6. Port 0
  /// picks a free port (see `MetricsHttpServer::port()`).
  std::string listen_address = "127.0.0.1:0";
  /// What GET /metrics renders. Required; not owned; must outlive the
  /// server.
  MetricsRegistry* registry = nullptr;
  /// Threads answering requests. Scrapes are small and a few a minute, so
  /// a couple are plenty. At least 1.
  int threads = 2;
};

/// Serves a `MetricsRegistry` to Prometheus over HTTP/1.1 (civetweb):
/// `GET /metrics` (and HEAD) answers 200 with the text exposition format
/// 0.0.4 (`Content-Type: text/plain; version=0.0.4; charset=utf-8`), other
/// methods on /metrics 405, every other path 404. Each scrape renders the
/// registry afresh (running its collect hooks and callbacks).
///
/// Threads: civetweb's own, started by `Start`. A daemon that blocks
/// signals for a `SignalWatcher` must do so before `Start` (the threads
/// inherit the mask). civetweb ignores SIGPIPE from `Start` on.
///
/// Thread-safe. The destructor shuts down.
///
///   MetricsHttpServerOptions options;
///   options.listen_address = "0.0.0.0:9464";
///   options.registry = &registry;
///   ASSIGN_OR_RETURN(std::unique_ptr<MetricsHttpServer> metrics,
///                    MetricsHttpServer::Start(options));
///   std::printf("metrics on http://%s/metrics\n", metrics->address().c_str());
class MetricsHttpServer {
 public:
  using Options = MetricsHttpServerOptions;

  /// Binds and starts serving. INVALID_ARGUMENT for a malformed address, a
  /// missing registry or a bad thread count; UNAVAILABLE when the address
  /// cannot be bound (in use, not local), with civetweb's reason.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      Options options);

  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  /// The bound port.
  int port() const { return port_; }
  /// The listen address with the bound port, e.g. "127.0.0.1:40123".
  std::string address() const;

  /// Stops accepting, waits for requests in flight and joins civetweb's
  /// threads; up to about 2 s, as civetweb's listener notices the stop
  /// between polls. Idempotent.
  void Shutdown();

 private:
  MetricsHttpServer(Options options, std::string host);

  const Options options_;
  const std::string host_;
  int port_ = 0;
  absl::Mutex mu_;
  mg_context* context_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace dcp

#endif  // DCP_COMMON_METRICS_METRICS_HTTP_H_
