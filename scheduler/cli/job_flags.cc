#include "scheduler/cli/job_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, lengths, "", "Length metadata file (required).");
ABSL_FLAG(
    std::string, format, "auto",
    "text, csv, tsv, jsonl, npy, idx, video_csv, or auto (by extension).");
ABSL_FLAG(std::string, column, "", "CSV/TSV column or JSONL field of lengths.");
ABSL_FLAG(std::string, model, "llama3-8b", "Built-in model name.");
ABSL_FLAG(std::string, model_config, "",
          "JSON model description; overrides --model.");
ABSL_FLAG(int, world_size, 32, "Number of ranks (GPUs) in the job.");
ABSL_FLAG(int64_t, window, 131072,
          "Context window; longer samples are truncated.");
ABSL_FLAG(int64_t, tokens_per_step, 2097152, "Token budget of a global batch.");
ABSL_FLAG(uint64_t, seed, 0, "Seed of the sample shuffle.");
ABSL_FLAG(int, balance_steps, 0,
          "Steps the step builder looks ahead to even out steps (0 = off).");
ABSL_FLAG(std::string, profile, "",
          "Profile table (CSV) the planner's cost model is fitted to.");
ABSL_FLAG(std::string, cluster_config, "h200",
          "The hardware of the planner's data-sheet prior: h200, h100-sxm, "
          "a100-80g or a cluster config JSON file.");

namespace dcp {

JobConfig JobConfigFromFlags() {
  JobConfig config;
  config.lengths = absl::GetFlag(FLAGS_lengths);
  config.format = absl::GetFlag(FLAGS_format);
  config.column = absl::GetFlag(FLAGS_column);
  config.model = absl::GetFlag(FLAGS_model);
  config.model_config = absl::GetFlag(FLAGS_model_config);
  config.world_size = absl::GetFlag(FLAGS_world_size);
  config.window = absl::GetFlag(FLAGS_window);
  config.tokens_per_step = absl::GetFlag(FLAGS_tokens_per_step);
  config.seed = absl::GetFlag(FLAGS_seed);
  config.balance_steps = absl::GetFlag(FLAGS_balance_steps);
  config.profile = absl::GetFlag(FLAGS_profile);
  config.cluster_config = absl::GetFlag(FLAGS_cluster_config);
  return config;
}

}  // namespace dcp
