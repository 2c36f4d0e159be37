#include "common/metrics/tls_server_context.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "absl/strings/str_cat.h"

namespace dcp {
namespace {

/// A file option's error: names the option, its flag, the file and why.
absl::Status BadFile(absl::string_view what, absl::string_view flag,
                     const std::string& path) {
  return absl::InvalidArgumentError(
      absl::StrCat("metrics TLS ", what, " (", flag, ") '", path,
                   "': ", TakeOpensslErrors("cannot be loaded")));
}

absl::Status CheckComplete(const MetricsTlsOptions& tls) {
  if (tls.cert.empty() != tls.key.empty()) {
    return absl::InvalidArgumentError(
        "metrics TLS needs both a certificate and its key "
        "(--metrics_tls_cert and --metrics_tls_key)");
  }
  if (!tls.ca.empty() && tls.cert.empty()) {
    return absl::InvalidArgumentError(
        "metrics TLS client verification (--metrics_tls_ca) needs the "
        "server's certificate and key (--metrics_tls_cert, "
        "--metrics_tls_key)");
  }
  return absl::OkStatus();
}

/// Makes peers present a certificate `ca_file` signed.
absl::Status RequireClientCertificates(SSL_CTX* context,
                                       const std::string& ca_file) {
  if (SSL_CTX_load_verify_locations(context, ca_file.c_str(), nullptr) != 1) {
    return BadFile("CA", "--metrics_tls_ca", ca_file);
  }
  // The CA names sent in the CertificateRequest, so that a client with
  // several certificates picks the right one.
  STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(ca_file.c_str());
  if (names == nullptr) return BadFile("CA", "--metrics_tls_ca", ca_file);
  SSL_CTX_set_client_CA_list(context, names);
  SSL_CTX_set_verify(context, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                     nullptr);
  return absl::OkStatus();
}

}  // namespace

void SslCtxFree::operator()(ssl_ctx_st* context) const {
  SSL_CTX_free(context);
}

std::string TakeOpensslErrors(const std::string& fallback) {
  std::string out;
  while (const unsigned long code = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(code, text, sizeof(text));
    absl::StrAppend(&out, out.empty() ? "" : "; ", text);
  }
  return out.empty() ? fallback : out;
}

absl::StatusOr<TlsServerContext> NewTlsServerContext(
    const MetricsTlsOptions& tls) {
  if (!tls.enabled()) return TlsServerContext();
  if (absl::Status s = CheckComplete(tls); !s.ok()) return s;
  ERR_clear_error();
  TlsServerContext context(SSL_CTX_new(TLS_server_method()));
  if (context == nullptr) {
    return absl::InternalError(
        absl::StrCat("SSL_CTX_new: ", TakeOpensslErrors("failed")));
  }
  SSL_CTX_set_min_proto_version(context.get(), TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(context.get(), tls.cert.c_str()) !=
      1) {
    return BadFile("certificate", "--metrics_tls_cert", tls.cert);
  }
  // Also checks that the key is the certificate's.
  if (SSL_CTX_use_PrivateKey_file(context.get(), tls.key.c_str(),
                                  SSL_FILETYPE_PEM) != 1) {
    return BadFile("key", "--metrics_tls_key", tls.key);
  }
  if (!tls.ca.empty()) {
    if (absl::Status s = RequireClientCertificates(context.get(), tls.ca);
        !s.ok()) {
      return s;
    }
  }
  return context;
}

}  // namespace dcp
