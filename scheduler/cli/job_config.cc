#include "scheduler/cli/job_config.h"

#include "common/cluster_config.h"
#include "common/status_macros.h"
#include "scheduler/lengths/length_reader.h"

namespace dcp {

absl::StatusOr<ClusterSpec> LoadClusterFlag(const std::string& name_or_path,
                                            const std::string& working_dir) {
  if (name_or_path.empty()) {
    return absl::InvalidArgumentError(
        "--cluster_config must name a built-in cluster or a config file");
  }
  absl::StatusOr<ClusterSpec> builtin = BuiltinCluster(name_or_path);
  if (builtin.ok()) return builtin;
  return ResolveClusterConfig(ResolveInput(name_or_path, working_dir));
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

absl::StatusOr<LoadedJob> LoadJob(const JobConfig& config,
                                  const ClusterSpec& cluster,
                                  double prior_weight,
                                  const std::string& working_dir) {
  if (config.lengths.empty()) {
    return absl::InvalidArgumentError("--lengths is required");
  }
  if (config.world_size <= 0 || config.window <= 0 ||
      config.tokens_per_step <= 0) {
    return absl::InvalidArgumentError(
        "--world_size, --window and --tokens_per_step must be positive");
  }
  if (config.balance_steps < 0) {
    return absl::InvalidArgumentError("--balance_steps must be >= 0");
  }
  LoadedJob job;
  if (config.model_config.empty()) {
    ASSIGN_OR_RETURN(job.model, BuiltinModel(config.model));
  } else {
    ASSIGN_OR_RETURN(job.model, LoadModelConfig(ResolveInput(
                                    config.model_config, working_dir)));
  }
  if (!config.profile.empty()) {
    ASSIGN_OR_RETURN(
        std::vector<TaskObservation> profile,
        LoadProfileTable(ResolveInput(config.profile, working_dir)));
    ASSIGN_OR_RETURN(job.cost_model,
                     CostModel::FromSpecs(cluster, job.model, config.world_size)
                         .Fit(profile, prior_weight));
  }
  ASSIGN_OR_RETURN(job.lengths,
                   LoadLengths(ResolveInput(config.lengths, working_dir),
                               config.format, config.column));
  return job;
}

}  // namespace dcp
