#include "common/metrics/metrics_tls_flags.h"

#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, metrics_tls_cert, "",
          "PEM certificate chain of the metrics port: with "
          "--metrics_tls_key, /metrics is served over HTTPS only.");
ABSL_FLAG(std::string, metrics_tls_key, "",
          "PEM private key of --metrics_tls_cert (unencrypted; keep it "
          "readable by this user only).");
ABSL_FLAG(std::string, metrics_tls_ca, "",
          "PEM CA certificates: scrapers must present a client certificate "
          "one of them signed (mutual TLS). Needs --metrics_tls_cert.");

namespace dcp {

MetricsTlsOptions MetricsTlsOptionsFromFlags() {
  MetricsTlsOptions tls;
  tls.cert = absl::GetFlag(FLAGS_metrics_tls_cert);
  tls.key = absl::GetFlag(FLAGS_metrics_tls_key);
  tls.ca = absl::GetFlag(FLAGS_metrics_tls_ca);
  return tls;
}

}  // namespace dcp
