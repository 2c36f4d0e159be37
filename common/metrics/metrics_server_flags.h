#ifndef DCP_COMMON_METRICS_METRICS_SERVER_FLAGS_H_
#define DCP_COMMON_METRICS_METRICS_SERVER_FLAGS_H_

#include "absl/status/status.h"
#include "common/metrics/metrics_http.h"

namespace dcp {

/// The metrics port's connection limits as flags, defined once for the
/// daemons that serve /metrics (dcp-scheduler, dcp-agent), as their TLS
/// flags are (metrics_tls_flags.h): --metrics_max_connections and
/// --metrics_connection_timeout, defaulting to `MetricsHttpServerOptions`'s
/// defaults. Only the daemons' mains depend on it (BUILD visibility).
///
/// Copies the flags into `options`; INVALID_ARGUMENT naming the flag when
/// --metrics_max_connections is under 1 or --metrics_connection_timeout is
/// not positive (`options` then unchanged).
///
///   MetricsHttpServerOptions options;
///   RETURN_IF_ERROR(ApplyMetricsServerLimitFlags(options));
absl::Status ApplyMetricsServerLimitFlags(MetricsHttpServerOptions& options);

}  // namespace dcp

#endif  // DCP_COMMON_METRICS_METRICS_SERVER_FLAGS_H_
