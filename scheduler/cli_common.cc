#include "scheduler/cli_common.h"

#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "scheduler/length_reader.h"

namespace dcp {

std::string ResolvePath(const std::string& path,
                        const std::string& working_dir) {
  if (path.empty() || path[0] == '/' || working_dir.empty()) return path;
  return working_dir + "/" + path;
}

absl::StatusOr<std::vector<int32_t>> LoadLengths(const std::string& path,
                                                 const std::string& format,
                                                 const std::string& column) {
  LengthSourceOptions options;
  options.path = path;
  if (format == "auto" || format.empty()) {
    options.format = GuessLengthFormat(path);
  } else {
    ASSIGN_OR_RETURN(options.format, ParseLengthFormat(format));
  }
  options.column = column;
  return ReadAllLengths(options);
}

absl::StatusOr<ModelSpec> ResolveModel(const std::string& name,
                                       const std::string& config_path) {
  if (!config_path.empty()) return LoadModelConfig(config_path);
  return BuiltinModel(name);
}

absl::StatusOr<CostModel> CostModelFromProfile(const std::string& path,
                                               const ClusterSpec& cluster,
                                               const ModelSpec& model,
                                               int world_size,
                                               double prior_weight) {
  ASSIGN_OR_RETURN(std::vector<TaskObservation> profile,
                   LoadProfileTable(path));
  return CostModel::FromSpecs(cluster, model, world_size)
      .Fit(profile, prior_weight);
}

std::string StatsJson(const EvaluationOptions& options,
                      const EvaluationResult& result) {
  nlohmann::json j;
  j["model"] = options.model.name;
  j["world_size"] = options.world_size;
  j["window"] = options.window;
  j["tokens_per_step"] = options.tokens_per_step;
  j["seed"] = options.seed;
  j["steps"] = result.steps;
  j["samples"] = result.samples;
  j["tokens"] = result.tokens;
  j["makespan_s"] = result.dcp.makespan_s;
  j["lower_bound_s"] = result.lower_bound_s;
  j["ratio_to_lower_bound"] = result.dcp.makespan_s / result.lower_bound_s;
  j["tokens_per_s_per_gpu"] =
      result.tokens / result.dcp.makespan_s / options.world_size;
  for (const PlannerFigures& b : result.baselines) {
    j[b.name + "_s"] = b.makespan_s;
    j["speedup_over_" + b.name] = b.makespan_s / result.dcp.makespan_s;
  }
  if (!result.baselines.empty()) {
    j["static_packed_config"] = {
        {"group_size", result.static_packed_config.group_size},
        {"recompute", result.static_packed_config.recompute}};
    j["static_balanced_config"] = {
        {"group_size", result.static_balanced_config.group_size},
        {"recompute", result.static_balanced_config.recompute}};
    j["dynamic_cp_config"] = {
        {"recompute", result.dynamic_cp_config.recompute},
        {"tokens_per_rank_cap", result.dynamic_cp_config.tokens_per_rank_cap}};
  }
  j["plan_ms_p50"] = Percentile(result.plan_ms, 50);
  j["plan_ms_max"] = Percentile(result.plan_ms, 100);
  j["prediction_error"] = result.prediction_error;
  return j.dump(2);
}

}  // namespace dcp
