// Fuzzes the model config parser (ParseModelConfig in common/model_spec.h):
// the input is a model config; what parses must be a valid model whose
// data-sheet cost model (CostModel::FromSpecs) has finite coefficients.

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_spec.h"
#include "fuzz/fuzz_support.h"
#include "scheduler/planner/cost_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<dcp::ModelSpec> model =
      dcp::ParseModelConfig(dcp::fuzz::AsText(data, size), "model.json");
  dcp::fuzz::CheckClean(model.status(), {absl::StatusCode::kInvalidArgument},
                        "ParseModelConfig");
  if (!model.ok()) return 0;
  const absl::Status valid = dcp::ValidateModelSpec(*model);
  DCP_FUZZ_CHECK(valid.ok(), "a parsed model is invalid: ", valid.ToString());
  DCP_FUZZ_CHECK(
      std::isfinite(model->TotalParams()) && model->TotalParams() > 0,
      "parameters ", model->TotalParams());
  const dcp::CostModel cost =
      dcp::CostModel::FromSpecs(dcp::ClusterSpec::H200(), *model, 8);
  const dcp::CostModel::Coefficients& c = cost.coefficients();
  for (double x : {c.lin, c.attn, c.a2a_byte_intra, c.fixed, c.grad_sync,
                   c.mem_static, c.mem_token}) {
    DCP_FUZZ_CHECK(std::isfinite(x) && x > 0, "a coefficient is ", x);
  }
  const double seconds = cost.TaskSeconds(2, true, {4096, 100}, 0.5);
  DCP_FUZZ_CHECK(std::isfinite(seconds) && seconds > 0, "a task takes ",
                 seconds, " s");
  return 0;
}
