#ifndef DCP_SCHEDULER_CLI_JOB_CONFIG_H_
#define DCP_SCHEDULER_CLI_JOB_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/data_files.h"  // BazelWorkingDirectory, ResolvePath, ResolveInput
#include "common/model_spec.h"
#include "scheduler/planner/cost_model.h"

namespace dcp {

/// What the command-line tools that plan a job (dcp-plan, dcp-scheduler)
/// are told about it: the length trace, the model and the shape of its
/// global batches. `job_flags.h` fills it from the shared flags; the rest of
/// a tool's options stay with the tool.
struct JobConfig {
  /// Length metadata file (required); relative paths are resolved against
  /// the working directory passed to `LoadJob`.
  std::string lengths;
  /// A `ParseLengthFormat` name, or "auto" (by extension).
  std::string format = "auto";
  /// CSV/TSV column or JSONL field ("" = the format's default).
  std::string column;
  /// Built-in model name; `model_config`, when set, is a JSON file that
  /// overrides it.
  std::string model = "llama3-8b";
  std::string model_config;
  int world_size = 32;
  /// Context window; longer samples are truncated to it.
  int64_t window = 131072;
  int64_t tokens_per_step = 2097152;
  uint64_t seed = 0;
  /// Steps the step builder looks ahead to even out steps (0 = off).
  int balance_steps = 0;
  /// Profile table (CSV) the planner's cost model is fitted to ("" = the
  /// data sheets alone).
  std::string profile;
  /// The hardware the planner's prior comes from: a built-in cluster name
  /// (`BuiltinClusterNames`) or a cluster config JSON file.
  std::string cluster_config = "h200";
};

/// What `LoadJob` read.
struct LoadedJob {
  ModelSpec model;
  std::vector<int32_t> lengths;
  /// Fitted to `JobConfig::profile`; empty when no profile was given.
  std::optional<CostModel> cost_model;
};

/// Checks `config` and reads its model, trace and profile. Relative paths are
/// taken against `working_dir` when it is not empty (`bazel run` changes the
/// working directory and passes the user's in BUILD_WORKING_DIRECTORY). The
/// profile is fitted starting from the data sheets of `cluster` with
/// `prior_weight`. INVALID_ARGUMENT naming the flag when a value is out of
/// range; the reader's error when a file cannot be read.
absl::StatusOr<LoadedJob> LoadJob(const JobConfig& config,
                                  const ClusterSpec& cluster,
                                  double prior_weight,
                                  const std::string& working_dir);

/// The cluster of a --cluster_config value: a built-in name, else a config
/// file (relative to `working_dir` like every path). The parser's error
/// naming the field, or NOT_FOUND naming the built-ins.
absl::StatusOr<ClusterSpec> LoadClusterFlag(const std::string& name_or_path,
                                            const std::string& working_dir);

/// Reads lengths; `format` is a name for ParseLengthFormat or "auto" (by
/// extension); `column` is the CSV/TSV column or JSONL field ("" = default).
absl::StatusOr<std::vector<int32_t>> LoadLengths(const std::string& path,
                                                 const std::string& format,
                                                 const std::string& column);

}  // namespace dcp

#endif  // DCP_SCHEDULER_CLI_JOB_CONFIG_H_
