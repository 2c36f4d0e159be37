// Fuzzes the profile table parser (ParseProfileTable in
// scheduler/planner/cost_model.h) and what a profile is read for: the input
// is a profile table; what parses must hold only sane observations, read
// back the same after FormatProfileTable, and fit the data-sheet cost model
// (CostModel::Fit, as dcp-plan --profile does) to finite coefficients or be
// rejected by the fit with a clean INVALID_ARGUMENT.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_spec.h"
#include "fuzz/fuzz_support.h"
#include "scheduler/planner/cost_model.h"

namespace dcp {
namespace fuzz {
namespace {

void CheckObservations(const std::vector<TaskObservation>& observations) {
  for (size_t i = 0; i < observations.size(); ++i) {
    const TaskObservation& o = observations[i];
    DCP_FUZZ_CHECK(
        o.group_size > 0 && o.lengths.size() == 1 && o.lengths[0] > 0, "row ",
        i, ": group size ", o.group_size, ", ", o.lengths.size(), " lengths");
    DCP_FUZZ_CHECK(o.recompute >= 0 && o.recompute <= 1, "row ", i,
                   ": recompute ", o.recompute);
    DCP_FUZZ_CHECK(std::isfinite(o.seconds) && o.seconds >= kMinTaskSeconds,
                   "row ", i, ": seconds ", o.seconds);
    DCP_FUZZ_CHECK(std::isfinite(o.memory_bytes) && o.memory_bytes >= 0, "row ",
                   i, ": memory_bytes ", o.memory_bytes);
  }
}

void CheckFinite(const CostModel& model, absl::string_view what) {
  const CostModel::Coefficients& c = model.coefficients();
  for (double x : {c.lin, c.gemm_half, c.attn, c.attn_half, c.a2a_byte_intra,
                   c.a2a_fixed_intra, c.a2a_byte_inter, c.a2a_fixed_inter,
                   c.fixed, c.grad_sync}) {
    DCP_FUZZ_CHECK(std::isfinite(x) && x >= 0, what, ": a coefficient is ", x);
  }
  const double seconds = model.TaskSeconds(2, true, {4096, 100}, 0.5);
  DCP_FUZZ_CHECK(std::isfinite(seconds) && seconds > 0, what, ": a task takes ",
                 seconds, " s");
}

}  // namespace
}  // namespace fuzz
}  // namespace dcp

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using dcp::TaskObservation;
  absl::StatusOr<std::vector<TaskObservation>> parsed =
      dcp::ParseProfileTable(dcp::fuzz::AsText(data, size), "profile.csv");
  dcp::fuzz::CheckClean(parsed.status(), {absl::StatusCode::kInvalidArgument},
                        "ParseProfileTable");
  if (!parsed.ok()) return 0;
  dcp::fuzz::CheckObservations(*parsed);

  const std::string written = dcp::FormatProfileTable(*parsed);
  absl::StatusOr<std::vector<TaskObservation>> again =
      dcp::ParseProfileTable(written, "written.csv");
  DCP_FUZZ_CHECK(
      again.ok() && again->size() == parsed->size(),
      "the written table does not read back: ", again.status().ToString());

  static const dcp::CostModel* const prior =
      new dcp::CostModel(dcp::CostModel::FromSpecs(
          dcp::ClusterSpec::H200(), *dcp::BuiltinModel("llama3-8b"), 8));
  for (double prior_weight : {1.0, 1e-4}) {
    absl::StatusOr<dcp::CostModel> fitted = prior->Fit(*parsed, prior_weight);
    dcp::fuzz::CheckClean(fitted.status(), {absl::StatusCode::kInvalidArgument},
                          "Fit");
    if (fitted.ok()) dcp::fuzz::CheckFinite(*fitted, "the fitted model");
  }
  return 0;
}
