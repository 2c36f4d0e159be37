#ifndef DCP_SCHEDULER_CLI_COMMON_H_
#define DCP_SCHEDULER_CLI_COMMON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_spec.h"
#include "scheduler/cost_model.h"
#include "scheduler/evaluation.h"

namespace dcp {

/// Pieces the command-line tools (dcp-plan, dcp-bench) share. Flags stay in
/// the `*_main.cc` files; these take plain values.

/// `path` made absolute against `working_dir` when it is relative and
/// `working_dir` is not empty (`bazel run` changes the working directory
/// and passes the user's in BUILD_WORKING_DIRECTORY).
std::string ResolvePath(const std::string& path,
                        const std::string& working_dir);

/// Reads lengths; `format` is a name for ParseLengthFormat or "auto" (by
/// extension); `column` is the CSV/TSV column or JSONL field ("" = default).
absl::StatusOr<std::vector<int32_t>> LoadLengths(const std::string& path,
                                                 const std::string& format,
                                                 const std::string& column);

/// A built-in model by name, or the model described by a JSON file when
/// `config_path` is not empty.
absl::StatusOr<ModelSpec> ResolveModel(const std::string& name,
                                       const std::string& config_path);

/// The planner's cost model fitted to a profile table file (see
/// `ParseProfileTable`), starting from the data sheets of `cluster`.
absl::StatusOr<CostModel> CostModelFromProfile(const std::string& path,
                                               const ClusterSpec& cluster,
                                               const ModelSpec& model,
                                               int world_size,
                                               double prior_weight);

/// The stats JSON of dcp-plan: steps, makespan_s, lower_bound_s,
/// static_packed_s, static_balanced_s, dynamic_cp_s (sums over steps, in
/// seconds on the reference cluster), plan_ms_p50, plan_ms_max and more.
std::string StatsJson(const EvaluationOptions& options,
                      const EvaluationResult& result);

}  // namespace dcp

#endif  // DCP_SCHEDULER_CLI_COMMON_H_
