// dcp-plan: plans steps of a length trace and writes the plan file and stats.
//
//   dcp-plan --lengths=data/lengths/wikipedia.txt --model=llama3-8b
//     --world_size=32 --window=131072 --tokens_per_step=2097152 --steps=20
//     --seed=0 --out=plans.jsonl --stats_json=stats.json   (one line)

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "scheduler/cli_common.h"
#include "scheduler/evaluation.h"
#include "scheduler/plan_io.h"

ABSL_FLAG(std::string, lengths, "", "Length metadata file (required).");
ABSL_FLAG(
    std::string, format, "auto",
    "text, csv, tsv, jsonl, npy, idx, video_csv, or auto (by extension).");
ABSL_FLAG(std::string, column, "", "CSV/TSV column or JSONL field of lengths.");
ABSL_FLAG(std::string, model, "llama3-8b", "Built-in model name.");
ABSL_FLAG(std::string, model_config, "",
          "JSON model description; overrides --model.");
ABSL_FLAG(int, world_size, 32, "Number of GPUs.");
ABSL_FLAG(int64_t, window, 131072,
          "Context window; longer samples are truncated.");
ABSL_FLAG(int64_t, tokens_per_step, 2097152, "Token budget of a global batch.");
ABSL_FLAG(int, steps, 20, "Steps to plan.");
ABSL_FLAG(uint64_t, seed, 0, "Seed of the sample shuffle.");
ABSL_FLAG(int, balance_steps, 0,
          "Steps of look-ahead for moving samples between steps (0 = off).");
ABSL_FLAG(std::string, profile, "",
          "Profile table (CSV) the planner's cost model is fitted to.");
ABSL_FLAG(std::string, out, "", "Plan file to write (JSON Lines).");
ABSL_FLAG(std::string, stats_json, "", "Stats file to write (JSON).");
ABSL_FLAG(bool, baselines, true, "Also run the baselines on the same steps.");

namespace dcp {
namespace {

int64_t NowNs() { return absl::GetCurrentTimeNanos(); }

absl::Status Run() {
  const char* wd_env = std::getenv("BUILD_WORKING_DIRECTORY");
  const std::string wd = wd_env == nullptr ? "" : wd_env;
  if (absl::GetFlag(FLAGS_lengths).empty()) {
    return absl::InvalidArgumentError("--lengths is required");
  }
  EvaluationOptions options;
  ASSIGN_OR_RETURN(
      options.model,
      ResolveModel(absl::GetFlag(FLAGS_model),
                   ResolvePath(absl::GetFlag(FLAGS_model_config), wd)));
  options.world_size = absl::GetFlag(FLAGS_world_size);
  options.window = absl::GetFlag(FLAGS_window);
  options.tokens_per_step = absl::GetFlag(FLAGS_tokens_per_step);
  options.steps = absl::GetFlag(FLAGS_steps);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.balance_steps = absl::GetFlag(FLAGS_balance_steps);
  options.run_baselines = absl::GetFlag(FLAGS_baselines);
  options.now_ns = NowNs;
  if (options.balance_steps < 0) {
    return absl::InvalidArgumentError("--balance_steps must be >= 0");
  }
  if (options.world_size <= 0 || options.window <= 0 ||
      options.tokens_per_step <= 0) {
    return absl::InvalidArgumentError(
        "--world_size, --window and --tokens_per_step must be positive");
  }
  if (!absl::GetFlag(FLAGS_profile).empty()) {
    ASSIGN_OR_RETURN(
        options.cost_model,
        CostModelFromProfile(ResolvePath(absl::GetFlag(FLAGS_profile), wd),
                             options.cluster, options.model, options.world_size,
                             /*prior_weight=*/1.0));
  }
  ASSIGN_OR_RETURN(
      std::vector<int32_t> lengths,
      LoadLengths(ResolvePath(absl::GetFlag(FLAGS_lengths), wd),
                  absl::GetFlag(FLAGS_format), absl::GetFlag(FLAGS_column)));
  LengthView view(lengths, options.window);
  ASSIGN_OR_RETURN(EvaluationResult result, Evaluate(view, options));

  if (!absl::GetFlag(FLAGS_out).empty()) {
    ASSIGN_OR_RETURN(PlanFileWriter writer, PlanFileWriter::Open(ResolvePath(
                                                absl::GetFlag(FLAGS_out), wd)));
    for (const StepPlan& plan : result.plans)
      RETURN_IF_ERROR(writer.Write(plan));
    RETURN_IF_ERROR(writer.Close());
  }
  const std::string stats = StatsJson(options, result);
  if (!absl::GetFlag(FLAGS_stats_json).empty()) {
    const std::string path = ResolvePath(absl::GetFlag(FLAGS_stats_json), wd);
    std::ofstream out(path);
    out << stats << "\n";
    if (!out.good()) {
      return absl::UnavailableError("cannot write stats to '" + path + "'");
    }
  }
  std::printf("%s\n", stats.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace dcp

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Plans global batches of a length trace with dcp and the baselines.\n"
      "  dcp-plan --lengths=FILE --model=NAME --world_size=N --window=TOKENS\n"
      "    --tokens_per_step=T --steps=S --seed=N --out=PLANS.jsonl "
      "--stats_json=FILE");
  absl::ParseCommandLine(argc, argv);
  absl::Status s = dcp::Run();
  if (!s.ok()) {
    std::fprintf(stderr, "dcp-plan: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
