// Fuzzes the cluster config parser (ParseClusterConfig in
// common/cluster_config.h): what parses must be a valid cluster that reads
// back the same from its own JSON and gives a data-sheet cost model
// (CostModel::FromSpecs) with finite coefficients.

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/cluster_config.h"
#include "common/model_spec.h"
#include "fuzz/fuzz_support.h"
#include "scheduler/planner/cost_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<dcp::ClusterSpec> cluster =
      dcp::ParseClusterConfig(dcp::fuzz::AsText(data, size), "cluster.json");
  dcp::fuzz::CheckClean(cluster.status(), {absl::StatusCode::kInvalidArgument},
                        "ParseClusterConfig");
  if (!cluster.ok()) return 0;
  const absl::Status valid = dcp::ValidateClusterSpec(*cluster);
  DCP_FUZZ_CHECK(valid.ok(), "a parsed cluster is invalid: ", valid.ToString());
  absl::StatusOr<dcp::ClusterSpec> back = dcp::ParseClusterConfig(
      dcp::ClusterConfigJson(*cluster), "back.json");
  DCP_FUZZ_CHECK(back.ok() && back->peak_flops == cluster->peak_flops &&
                     back->gpus_per_node == cluster->gpus_per_node,
                 "a parsed cluster does not read back from its JSON");
  const dcp::CostModel cost = dcp::CostModel::FromSpecs(
      *cluster, *dcp::BuiltinModel("llama3-8b"), 8);
  const dcp::CostModel::Coefficients& c = cost.coefficients();
  for (double x : {c.lin, c.attn, c.a2a_byte_intra, c.grad_sync}) {
    DCP_FUZZ_CHECK(std::isfinite(x) && x >= 0, "a coefficient is ", x);
  }
  return 0;
}
