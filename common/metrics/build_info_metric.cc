#include "common/metrics/build_info_metric.h"

#include "common/status_macros.h"

namespace dcp {

absl::Status AddBuildInfoGauge(MetricsRegistry& registry,
                               const std::string& name,
                               const BuildInfo& build) {
  ASSIGN_OR_RETURN(GaugeFamily * family,
                   registry.AddGaugeFamily(
                       name,
                       "Always 1; labels name the version and the git commit "
                       "built (\"unknown\" outside a git checkout).",
                       {"version", "commit"}));
  ASSIGN_OR_RETURN(Gauge * one,
                   family->WithLabels({build.version, build.commit}));
  one->Set(1);
  return absl::OkStatus();
}

}  // namespace dcp
