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
#include "scheduler/cli/job_config.h"
#include "scheduler/cli/job_flags.h"
#include "scheduler/eval/evaluation.h"
#include "scheduler/eval/plan_io.h"

ABSL_FLAG(int, steps, 20, "Steps to plan.");
ABSL_FLAG(std::string, out, "", "Plan file to write (JSON Lines).");
ABSL_FLAG(std::string, stats_json, "", "Stats file to write (JSON).");
ABSL_FLAG(bool, baselines, true, "Also run the baselines on the same steps.");

namespace dcp {
namespace {

int64_t NowNs() { return absl::GetCurrentTimeNanos(); }

absl::Status Run() {
  const std::string wd = BazelWorkingDirectory();
  const JobConfig job = JobConfigFromFlags();
  EvaluationOptions options;
  ASSIGN_OR_RETURN(LoadedJob loaded, LoadJob(job, options.cluster,
                                             /*prior_weight=*/1.0, wd));
  options.model = std::move(loaded.model);
  options.cost_model = std::move(loaded.cost_model);
  options.world_size = job.world_size;
  options.window = job.window;
  options.tokens_per_step = job.tokens_per_step;
  options.steps = absl::GetFlag(FLAGS_steps);
  options.seed = job.seed;
  options.balance_steps = job.balance_steps;
  options.run_baselines = absl::GetFlag(FLAGS_baselines);
  options.now_ns = NowNs;
  const std::vector<int32_t>& lengths = loaded.lengths;
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
