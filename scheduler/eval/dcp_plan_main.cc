// dcp-plan: plans steps of a length trace and writes the plan file and stats.
//
//   dcp-plan --lengths=data/lengths/wikipedia.txt --model=llama3-8b
//     --world_size=32 --window=131072 --tokens_per_step=2097152 --steps=20
//     --seed=0 --out=plans.jsonl --stats_json=stats.json   (one line)

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "scheduler/cli/job_config.h"
#include "scheduler/cli/job_flags.h"
#include "scheduler/eval/evaluation.h"
#include "scheduler/eval/plan_io.h"
#include "scheduler/eval/simulated_profile.h"
#include "scheduler/eval/simulator.h"

ABSL_FLAG(int, steps, 20, "Steps to plan.");
ABSL_FLAG(std::string, out, "", "Plan file to write (JSON Lines).");
ABSL_FLAG(std::string, stats_json, "", "Stats file to write (JSON).");
ABSL_FLAG(bool, baselines, true, "Also run the baselines on the same steps.");
ABSL_FLAG(std::string, write_profile, "",
          "Instead of planning, write the profile table the agents' start-up "
          "profile would measure on the reference cluster to this file.");
ABSL_FLAG(double, profile_noise, 0.0,
          "With --write_profile: log-normal noise (sigma) of every time.");
ABSL_FLAG(uint64_t, profile_seed, 0,
          "With --write_profile: seed of the noise.");

namespace dcp {
namespace {

int64_t NowNs() { return absl::GetCurrentTimeNanos(); }

// --write_profile: the simulated profile of the reference cluster (the
// judge, whatever --cluster_config says), as a profile table, over the grid
// the scheduler would ask for (its window, and the per-GPU token cap of
// --cluster_config's data sheet).
absl::Status WriteProfile(const JobConfig& job, const std::string& wd) {
  if (job.world_size <= 0) {
    return absl::InvalidArgumentError("--world_size must be positive");
  }
  const double noise = absl::GetFlag(FLAGS_profile_noise);
  if (!(noise >= 0) || !std::isfinite(noise)) {
    return absl::InvalidArgumentError(
        "--profile_noise must be finite and >= 0");
  }
  ModelSpec model;
  if (job.model_config.empty()) {
    ASSIGN_OR_RETURN(model, BuiltinModel(job.model));
  } else {
    ASSIGN_OR_RETURN(model, LoadModelConfig(ResolveInput(job.model_config, wd)));
  }
  const ReferenceCluster judge(ClusterSpec::H200(), model, job.world_size);
  ASSIGN_OR_RETURN(const ClusterSpec sheet,
                   LoadClusterFlag(job.cluster_config, wd));
  const CostModel planner = CostModel::FromSpecs(sheet, model, job.world_size);
  SimulatedProfileOptions options;
  options.noise = noise;
  options.seed = absl::GetFlag(FLAGS_profile_seed);
  options.window = job.window;
  const std::vector<TaskObservation> rows =
      SimulateProfile(judge, planner, options);
  const std::string path = ResolvePath(absl::GetFlag(FLAGS_write_profile), wd);
  std::ofstream out(path);
  out << absl::StrFormat(
             "# dcp-plan --write_profile: the reference cluster "
             "(docs/COST_MODEL.md), %s on %d GPUs, noise %g, seed %d\n",
             model.name, job.world_size, noise, options.seed)
      << FormatProfileTable(rows);
  out.close();
  if (!out.good()) {
    return absl::UnavailableError("cannot write the profile to '" + path + "'");
  }
  std::printf(
      "wrote %zu profile rows to %s (the profile takes %.1f s a rank on the "
      "reference cluster)\n",
      rows.size(), path.c_str(),
      SimulatedProfileSeconds(judge, planner, options));
  return absl::OkStatus();
}

absl::Status Run() {
  const std::string wd = BazelWorkingDirectory();
  const JobConfig job = JobConfigFromFlags();
  if (!absl::GetFlag(FLAGS_write_profile).empty()) return WriteProfile(job, wd);
  // The planner's prior; the judge (options.cluster) stays the reference.
  ASSIGN_OR_RETURN(const ClusterSpec prior,
                   LoadClusterFlag(job.cluster_config, wd));
  EvaluationOptions options;
  ASSIGN_OR_RETURN(LoadedJob loaded,
                   LoadJob(job, prior, /*prior_weight=*/1.0, wd));
  options.model = std::move(loaded.model);
  options.cost_model =
      loaded.cost_model.has_value()
          ? *std::move(loaded.cost_model)
          : CostModel::FromSpecs(prior, options.model, job.world_size);
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
      "--stats_json=FILE [--cluster_config=h200|h100-sxm|a100-80g|FILE]\n"
      "  dcp-plan --write_profile=FILE --model=NAME --world_size=N "
      "--profile_noise=0.1 --profile_seed=N");
  absl::ParseCommandLine(argc, argv);
  absl::Status s = dcp::Run();
  if (!s.ok()) {
    std::fprintf(stderr, "dcp-plan: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
