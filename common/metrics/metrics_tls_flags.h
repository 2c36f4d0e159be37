#ifndef DCP_COMMON_METRICS_METRICS_TLS_FLAGS_H_
#define DCP_COMMON_METRICS_METRICS_TLS_FLAGS_H_

#include "common/metrics/tls_server_context.h"

namespace dcp {

/// The metrics port's TLS flags, defined once for the daemons that serve
/// /metrics (dcp-scheduler, dcp-agent): --metrics_tls_cert,
/// --metrics_tls_key, --metrics_tls_ca. Only their mains depend on it
/// (BUILD visibility); the server takes a `MetricsTlsOptions`.
MetricsTlsOptions MetricsTlsOptionsFromFlags();

}  // namespace dcp

#endif  // DCP_COMMON_METRICS_METRICS_TLS_FLAGS_H_
