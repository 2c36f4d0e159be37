#include "common/metrics/metrics_server_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

ABSL_FLAG(int, metrics_max_connections,
          dcp::MetricsHttpServerOptions().max_connections,
          "Connections the metrics port serves at once, a thread each; one "
          "more is closed as soon as it is accepted. At least 1.");
ABSL_FLAG(absl::Duration, metrics_connection_timeout,
          dcp::MetricsHttpServerOptions().connection_timeout,
          "How long one metrics connection may take from accept to the end "
          "of the response (TLS handshake included) before it is dropped, "
          "e.g. 10s. Positive.");

namespace dcp {

absl::Status ApplyMetricsServerLimitFlags(MetricsHttpServerOptions& options) {
  const int max_connections = absl::GetFlag(FLAGS_metrics_max_connections);
  if (max_connections < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_max_connections must be at least 1, not ", max_connections));
  }
  const absl::Duration timeout =
      absl::GetFlag(FLAGS_metrics_connection_timeout);
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_connection_timeout must be positive, not ",
                     absl::FormatDuration(timeout)));
  }
  options.max_connections = max_connections;
  options.connection_timeout = timeout;
  return absl::OkStatus();
}

}  // namespace dcp
