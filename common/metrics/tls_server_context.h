#ifndef DCP_COMMON_METRICS_TLS_SERVER_CONTEXT_H_
#define DCP_COMMON_METRICS_TLS_SERVER_CONTEXT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

// OpenSSL's SSL_CTX, declared here so that users of the metrics server do
// not include OpenSSL's headers.
struct ssl_ctx_st;

namespace dcp {

/// TLS of an HTTP endpoint (the metrics port): PEM files, read once when
/// the server starts. All empty: plain HTTP.
struct MetricsTlsOptions {
  /// The server's certificate chain (leaf first). With `key`: TLS on.
  std::string cert;
  /// The private key of `cert` (unencrypted).
  std::string key;
  /// CA certificates. When set, clients must present a certificate one of
  /// them signed (mutual TLS); needs `cert` and `key`.
  std::string ca;

  bool enabled() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

/// Frees an SSL_CTX.
struct SslCtxFree {
  void operator()(ssl_ctx_st* context) const;
};

/// An owned OpenSSL server context.
using TlsServerContext = std::unique_ptr<ssl_ctx_st, SslCtxFree>;

/// A server context for `tls`: TLS 1.2 or later, the certificate and key
/// loaded and checked against each other and, with `tls.ca`, peers
/// verified against it and refused without a certificate.
/// INVALID_ARGUMENT naming the option (and flag) and OpenSSL's reason when
/// a file is missing, unreadable or does not match, or when the options
/// are incomplete; null when TLS is off (`!tls.enabled()`).
absl::StatusOr<TlsServerContext> NewTlsServerContext(
    const MetricsTlsOptions& tls);

/// The reasons in this thread's OpenSSL error queue, "; "-separated (and
/// the queue emptied), or `fallback` when it is empty.
std::string TakeOpensslErrors(const std::string& fallback);

}  // namespace dcp

#endif  // DCP_COMMON_METRICS_TLS_SERVER_CONTEXT_H_
