#ifndef DCP_COMMON_METRICS_BUILD_INFO_METRIC_H_
#define DCP_COMMON_METRICS_BUILD_INFO_METRIC_H_

#include <string>

#include "absl/status/status.h"
#include "common/build_info.h"
#include "common/metrics/metrics.h"

namespace dcp {

/// Registers the gauge `name` (e.g. "dcp_scheduler_build_info"): always 1,
/// labelled with `build`'s version and commit, the Prometheus convention
/// for what a process was built from. ALREADY_EXISTS when `registry` has
/// the family.
absl::Status AddBuildInfoGauge(MetricsRegistry& registry,
                               const std::string& name,
                               const BuildInfo& build);

}  // namespace dcp

#endif  // DCP_COMMON_METRICS_BUILD_INFO_METRIC_H_
