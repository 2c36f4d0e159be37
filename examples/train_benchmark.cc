// dcp-train-bench: dcp's plans against the tuned static plan, trained for
// real on this machine. Every global batch the step builder forms is planned
// twice over the same ranks and samples, by the dcp planner and by the best
// fixed sequence-parallel configuration (the "static_balanced" baseline of
// dcp-bench, restricted to plain Ulysses); --world_size rank processes (this
// binary re-run, real Gloo over 127.0.0.1, groups formed through the
// rendezvous store of a SchedulerServer this process serves on
// 127.0.0.1:0) train both from the same weights, and the throughput of each
// is printed per rank on the wall clock and on each rank's CPU clock. Then
// one rank alone runs one long sequence at recompute 0, 0.5 and 1 and prints
// the peak resident memory of each; the run fails (exit 1) unless recompute
// lowers it.
//
//   bazel run -c opt //examples:dcp-train-bench
//   bazel run -c opt //examples:dcp-train-bench --
//   --lengths=data/lengths/code.txt
//
// The costs both planners plan with are the analytic model of
// docs/COST_MODEL.md with this CPU's constants, calibrated at start-up, and
// Gloo's as the rank processes measure them before the plans are made (the
// Gloo probe; examples/train_benchmark_cpu_costs.h). --memory_cap_tokens
// caps each rank's memory, in the model's units, at what it needs to hold
// that many tokens without recompute: sequences longer than that need a
// group or recompute, in both plans. The run prints the measured dcp/static
// speed-up beside the one the cost model predicts for the same plans.
//
//   bazel run -c opt //examples:dcp-train-bench --
//       --world_size=2 --memory_cap_tokens=384
//
// Exit 0: done; 1: recompute did not lower the peak memory; 2: bad flags or
// a failure (the message says).

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "ATen/Parallel.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/model_spec.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "examples/rendezvous_ranks.h"
#include "examples/train_benchmark_cpu_costs.h"
#include "examples/train_benchmark_job.h"
#include "examples/train_benchmark_plans.h"
#include "examples/train_benchmark_rank.h"
#include "examples/train_benchmark_report.h"
#include "scheduler/cli/job_config.h"
#include "scheduler/planner/plan.h"
#include "train/torch_threads.h"

ABSL_FLAG(std::string, lengths, "data/lengths/wikipedia.txt",
          "Length trace the global batches are drawn from.");
ABSL_FLAG(std::string, format, "auto", "Format of --lengths (auto: by name).");
ABSL_FLAG(std::string, model_config,
          "examples/testdata/train_benchmark_model.json",
          "JSON model description (common/model_spec.h) of the model trained.");
ABSL_FLAG(int, world_size, 4, "Rank processes.");
ABSL_FLAG(int64_t, window, 1024, "Context window; longer samples are cut.");
ABSL_FLAG(int64_t, tokens_per_step, 4096, "Token budget of a global batch.");
ABSL_FLAG(int, steps, 6, "Measured steps of each plan kind.");
ABSL_FLAG(int, warmup_steps, 1,
          "Steps of each kind run first and left out of the figures.");
ABSL_FLAG(uint64_t, seed, 0, "Seed of the sample shuffle.");
ABSL_FLAG(int64_t, memory_length, 0,
          "Tokens of the memory check's sequence (0: the window).");
ABSL_FLAG(int64_t, memory_cap_tokens, 0,
          "Cap each rank's memory at what the cost model says it needs to "
          "hold this many tokens at recompute 0 (0: the machine's memory "
          "over the ranks).");
ABSL_FLAG(int, timeout_s, 900, "Give up on the child processes after this.");
ABSL_FLAG(bool, keep_dir, false, "Keep the run's folder (plans, logs).");

namespace dcp::train_benchmark {
namespace {

constexpr char kSession[] = "bench";

/// The benchmark, as the flags give it.
struct BenchmarkOptions {
  JobConfig job;
  int steps = 0;
  int warmup_steps = 0;
  int64_t memory_length = 0;
  int64_t memory_cap_tokens = 0;
  absl::Duration timeout;
  bool keep_dir = false;
};

BenchmarkOptions OptionsFromFlags() {
  BenchmarkOptions o;
  const std::string wd = BazelWorkingDirectory();
  o.job.lengths = ResolveInput(absl::GetFlag(FLAGS_lengths), wd);
  o.job.format = absl::GetFlag(FLAGS_format);
  o.job.model_config = ResolveInput(absl::GetFlag(FLAGS_model_config), wd);
  o.job.world_size = absl::GetFlag(FLAGS_world_size);
  o.job.window = absl::GetFlag(FLAGS_window);
  o.job.tokens_per_step = absl::GetFlag(FLAGS_tokens_per_step);
  o.job.seed = absl::GetFlag(FLAGS_seed);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  o.memory_length = absl::GetFlag(FLAGS_memory_length);
  if (o.memory_length == 0) o.memory_length = o.job.window;
  o.memory_cap_tokens = absl::GetFlag(FLAGS_memory_cap_tokens);
  o.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  o.keep_dir = absl::GetFlag(FLAGS_keep_dir);
  return o;
}

absl::Status Validate(const BenchmarkOptions& o) {
  if (o.steps < 1 || o.warmup_steps < 0) {
    return absl::InvalidArgumentError(
        "--steps must be positive and --warmup_steps non-negative");
  }
  if (o.job.world_size < 2 || o.memory_length < 1) {
    return absl::InvalidArgumentError(
        "--world_size must be at least 2 (the Gloo probe needs peers) and "
        "--memory_length positive");
  }
  if (o.memory_cap_tokens < 0) {
    return absl::InvalidArgumentError("--memory_cap_tokens must be >= 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MakeRunDir() {
  const char* tmp = getenv("TMPDIR");
  std::string path = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp",
                                  "/dcp-train-bench.XXXXXX");
  if (mkdtemp(path.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create ", path));
  }
  return path;
}

// The cost model both plans are made with and judged on.
struct FittedCosts {
  /// From the spec alone (CostModel::FromSpecs), and fitted to the probe.
  CostModel prior;
  CostModel fitted;
  std::vector<TaskObservation> observations;
};

// The pull of the spec against the probe's tasks in the fit (the
// scheduler's refits use 1). The spec is a weak prior here: its compute is
// one rank's alone and its Gloo costs micro-benchmarks, and it knows none
// of the Ulysses layout's copies on a CPU, while the probe times every
// group shape the plans use under the ranks' own load. At 1 the fit stayed
// 20-25% off the probe's tasks and dcp's plans 12-24% off their predicted
// speed.
constexpr double kSpecPriorWeight = 0.1;

// `CostModel::FromSpecs(cluster)` fitted (`CostModel::Fit`, prior weight
// `kSpecPriorWeight`) to the probe's tasks. Not to the calibration's: one
// rank alone has the machine to itself, which the ranks never have while
// they train (on a 2-core VM the two cores may be one core's hyperthreads).
absl::StatusOr<FittedCosts> FitToProbe(
    const Job& job, const ClusterSpec& cluster,
    std::vector<TaskObservation> observations) {
  const CostModel prior =
      CostModel::FromSpecs(cluster, job.model, job.world_size);
  ASSIGN_OR_RETURN(CostModel fitted, prior.Fit(observations, kSpecPriorWeight));
  return FittedCosts{prior, std::move(fitted), std::move(observations)};
}

// The fitted model's mean error on the observations of each group shape
// (one rank, plain Ulysses, Ulysses inside a ring, the plain ring), and the
// median of predicted / measured over them (above 1: the shape predicted
// slow, which steers the planner off it; below 1: predicted fast).
void PrintFitByShape(const FittedCosts& costs) {
  std::map<std::pair<int, int>, std::vector<TaskObservation>> by_shape;
  for (const TaskObservation& o : costs.observations) {
    by_shape[{o.group_size, o.UlyssesDegree()}].push_back(o);
  }
  std::vector<std::string> parts;
  for (const auto& [shape, observations] : by_shape) {
    std::vector<double> ratios;
    for (const TaskObservation& o : observations) {
      ratios.push_back(costs.fitted.TaskSeconds(o.group_size, o.intra_node,
                                                o.lengths, o.recompute,
                                                o.ulysses) /
                       o.seconds);
    }
    std::sort(ratios.begin(), ratios.end());
    const size_t n = ratios.size();
    const double median = n % 2 == 1 ? ratios[n / 2]
                                     : (ratios[n / 2 - 1] + ratios[n / 2]) / 2;
    parts.push_back(absl::StrFormat(
        "p=%d u=%d: %.1f%%, x%.2f (%d tasks)", shape.first, shape.second,
        100 * costs.fitted.MeanRelativeError(observations), median,
        observations.size()));
  }
  absl::PrintF(
      "    after the fit, by shape: mean error, median predicted/measured: "
      "%s\n",
      absl::StrJoin(parts, "; "));
  absl::PrintF(
      "    a ring's passes, in the form the fit kept (the spec's, or the "
      "other where it predicts the probe better): %s\n",
      costs.fitted.coefficients().ring_overlaps_attention
          ? "beside attention (a task waits for the longer)"
          : "after attention (a task waits for both)");
}

// ---- Report --------------------------------------------------------------

// "N tasks (ranks per task: a on 1, b on 2, ...; recompute: c at 0, ...)"
// for one kind's plans.
std::string PlanSummary(const std::vector<v1::StepPlan>& plans, int warmup) {
  std::map<int, int> by_size;
  std::map<double, int> by_recompute;
  int tasks = 0;
  for (size_t s = warmup; s < plans.size(); ++s) {
    for (const v1::Task& t : plans[s].tasks()) {
      ++by_size[t.ranks_size()];
      ++by_recompute[t.recompute()];
      ++tasks;
    }
  }
  std::vector<std::string> sizes, ratios;
  for (const auto& [p, n] : by_size)
    sizes.push_back(absl::StrCat(n, " on ", p));
  for (const auto& [r, n] : by_recompute) {
    ratios.push_back(absl::StrCat(n, " at ", r));
  }
  return absl::StrCat(tasks,
                      " tasks (ranks per task: ", absl::StrJoin(sizes, ", "),
                      "; recompute: ", absl::StrJoin(ratios, ", "), ")");
}

void PrintSetup(const BenchmarkOptions& o, const Job& job,
                const CpuCalibration& cal, const GlooCosts& gloo,
                const ClusterSpec& cluster, const FittedCosts& costs,
                const PlanSet& plans) {
  const ModelSpec& m = job.model;
  absl::PrintF(
      "dcp-train-bench: dcp plans vs the tuned static plan, trained "
      "on %d rank processes of this machine\n",
      job.world_size);
  absl::PrintF(
      "  machine: %d CPU cores, load average %.1f before the ranks start "
      "(other processes share the cores too); each rank a RankTrainer, "
      "torch at 1 thread, float32, Gloo over 127.0.0.1 (groups met through "
      "a SchedulerServer's rendezvous store)\n",
      Cores(), LoadAverage());
  absl::PrintF(
      "  model: %s (%d layers, hidden %d, %d heads, %d kv heads, ffn "
      "%d, vocab %d), %s\n",
      m.name, m.layers, m.hidden, m.heads, m.kv_heads, m.ffn, m.vocab,
      o.job.model_config);
  absl::PrintF(
      "  batches: %s, window %d, %d tokens a step, seed %d: %d "
      "warm-up + %d measured steps, the same samples in both plans\n",
      o.job.lengths, o.job.window, o.job.tokens_per_step, o.job.seed,
      o.warmup_steps, o.steps);
  absl::PrintF(
      "  costs both plans are made with: docs/COST_MODEL.md's model "
      "with CPU constants fitted at start-up to %d one-rank tasks "
      "(CPU time, fit error %.1f%%): %.3g s/token + %.3g s/token^2 a "
      "sequence + %.3g s/task\n",
      cal.timings.size(), 100 * cal.mean_relative_error, cal.linear_s,
      cal.attention_s, cal.task_s);
  absl::PrintF(
      "  Gloo as the %d rank processes measured it (median of their "
      "runs): all-to-all %.3g MB/s sent a rank + %.3g ms, all-reduce of "
      "the gradient (%d floats) %.3g ms\n",
      job.world_size, gloo.a2a_bytes_per_s / 1e6, 1e3 * gloo.a2a_latency_s,
      static_cast<int64_t>(job.model.TotalParams()), 1e3 * gloo.all_reduce_s);
  absl::PrintF(
      "  the planner's cost model: that spec (CostModel::FromSpecs), "
      "fitted (CostModel::Fit) to the probe's %d tasks on the %d ranks "
      "(one rank each, all at once; groups of each size dividing the "
      "world, all at once, at each Ulysses degree with the ring; recompute "
      "0 and 1): mean error on them %.1f%% before "
      "the fit, %.1f%% after\n",
      costs.observations.size(), job.world_size,
      100 * costs.prior.MeanRelativeError(costs.observations),
      100 * costs.fitted.MeanRelativeError(costs.observations));
  PrintFitByShape(costs);
  if (o.memory_cap_tokens > 0) {
    absl::PrintF(
        "  memory cap per rank: %.1f MiB in the cost model's units, what "
        "%d tokens need at recompute 0 (%d at recompute 1): longer "
        "sequences need a group or recompute\n",
        cluster.MemoryCap() / (1 << 20), o.memory_cap_tokens,
        static_cast<int64_t>(costs.fitted.MaxTokensPerGpu(1.0)));
  } else {
    absl::PrintF("  memory per rank: the machine's over the ranks, %.1f GiB\n",
                 cluster.MemoryCap() / (1 << 30));
  }
  absl::PrintF("  dcp plan: Planner over the fitted model: %s\n",
               PlanSummary(plans.dcp, o.warmup_steps));
  absl::PrintF(
      "  static plan: PlanStatic(balanced, plain Ulysses) at the "
      "configuration the fitted model predicts fastest, of %d: group size "
      "%d, recompute %g: %s\n",
      plans.tuned.configs_tried, plans.tuned.config.group_size,
      plans.tuned.config.recompute, PlanSummary(plans.fixed, o.warmup_steps));
  absl::PrintF(
      "  order: interleaved step by step (dcp then static, then "
      "static then dcp, ...), each kind its own trainer from the "
      "same weights, so that load from anything else on the machine "
      "falls on both alike\n");
}

// ---- The run -------------------------------------------------------------

// Rank processes of one phase (`flag`: --gloo_job or --rank_job), meeting
// through the rendezvous store at `address`, until they all ended.
absl::Status RunRanks(const std::string& flag, const std::string& dir,
                      const Job& job, const std::string& address,
                      absl::Duration timeout) {
  ASSIGN_OR_RETURN(std::string self, subprocess::SelfExecutable());
  subprocess::Children ranks;
  for (int r = 0; r < job.world_size; ++r) {
    RETURN_IF_ERROR(ranks.Start(absl::StrCat(flag.substr(2), r),
                                {self, flag, dir, absl::StrCat(r), address},
                                dir));
  }
  return ranks.Wait(absl::Now() + timeout);
}

// The memory check, after the ranks, so that it has the cores to itself.
absl::Status RunMemoryJob(const std::string& dir, absl::Duration timeout) {
  ASSIGN_OR_RETURN(std::string self, subprocess::SelfExecutable());
  subprocess::Children memory;
  RETURN_IF_ERROR(memory.Start("memory", {self, "--memory_job", dir}, dir));
  return memory.Wait(absl::Now() + timeout);
}

absl::StatusOr<PlanSet> Plan(const BenchmarkOptions& o, const Job& job,
                             const std::vector<int32_t>& lengths,
                             const CostModel& model,
                             const ClusterSpec& cluster) {
  PlanSetOptions po;
  po.world_size = job.world_size;
  po.tokens_per_step = o.job.tokens_per_step;
  po.seed = o.job.seed;
  po.steps = job.steps;
  po.session = job.session;
  return MakePlanSet(LengthView(lengths, o.job.window), model, cluster, po);
}

absl::Status WritePlans(const std::string& dir, const Job& job,
                        const PlanSet& plans) {
  for (int s = 0; s < job.steps; ++s) {
    RETURN_IF_ERROR(WritePlan(dir, PlanKind::kDcp, s, plans.dcp[s]));
    RETURN_IF_ERROR(WritePlan(dir, PlanKind::kStatic, s, plans.fixed[s]));
  }
  return absl::OkStatus();
}

// Prints both tables; whether the memory check passed.
absl::StatusOr<bool> Report(const std::string& dir, const BenchmarkOptions& o,
                            const Job& job, const PlanSet& plans) {
  RankRecords records;
  for (int r = 0; r < job.world_size; ++r) {
    ASSIGN_OR_RETURN(std::vector<StepRecord> mine, ReadStepRecords(dir, r));
    records.push_back(std::move(mine));
  }
  RETURN_IF_ERROR(CheckRecords(records, job.steps));
  const KindFigures dcp =
      Figures(records, PlanKind::kDcp, plans.dcp_predicted_s, o.warmup_steps);
  const KindFigures fixed = Figures(records, PlanKind::kStatic,
                                    plans.fixed_predicted_s, o.warmup_steps);
  PrintThroughput(dcp, fixed, o.steps, job.world_size);
  PrintSpeedup(dcp, fixed);
  ASSIGN_OR_RETURN(std::vector<MemoryRecord> memory, ReadMemoryRecords(dir));
  return ReportMemory(std::move(memory), job);
}

// The phases in the run's folder `dir`: the Gloo probe, the plans, the
// ranks, the memory check; whether the memory check passed.
absl::StatusOr<bool> RunInDir(const std::string& dir, const BenchmarkOptions& o,
                              const Job& job,
                              const std::vector<int32_t>& lengths,
                              const CpuCalibration& cal) {
  RETURN_IF_ERROR(WriteJob(dir, job));
  ASSIGN_OR_RETURN(
      std::unique_ptr<SchedulerServer> server,
      examples::StartRendezvousServer(job.world_size, job.session, job.model,
                                      job.memory_length));
  RETURN_IF_ERROR(
      RunRanks("--gloo_job", dir, job, server->address(), o.timeout));
  ASSIGN_OR_RETURN(std::vector<GlooRecord> records, ReadGlooRecords(dir));
  ASSIGN_OR_RETURN(GlooCosts gloo, FitGlooCosts(records, job.world_size));
  const ClusterSpec cluster =
      CpuCluster(job.model, job.world_size, cal, gloo, o.memory_cap_tokens);
  ASSIGN_OR_RETURN(std::vector<TaskObservation> tasks, ReadTaskRecords(dir));
  ASSIGN_OR_RETURN(FittedCosts costs,
                   FitToProbe(job, cluster, std::move(tasks)));
  ASSIGN_OR_RETURN(PlanSet plans, Plan(o, job, lengths, costs.fitted, cluster));
  PrintSetup(o, job, cal, gloo, cluster, costs, plans);
  std::fflush(stdout);
  RETURN_IF_ERROR(WritePlans(dir, job, plans));
  RETURN_IF_ERROR(
      RunRanks("--rank_job", dir, job, server->address(), o.timeout));
  server->Shutdown();
  RETURN_IF_ERROR(RunMemoryJob(dir, o.timeout));
  return Report(dir, o, job, plans);
}

// The whole benchmark; whether the memory check passed.
absl::StatusOr<bool> RunBenchmark(const BenchmarkOptions& o) {
  const absl::Time start = absl::Now();
  RETURN_IF_ERROR(Validate(o));
  ASSIGN_OR_RETURN(LoadedJob loaded, LoadJob(o.job, ClusterSpec::H200(), 1.0,
                                             /*working_dir=*/""));
  Job job;
  job.model = loaded.model;
  job.world_size = o.job.world_size;
  job.session = kSession;
  job.steps = o.warmup_steps + o.steps;
  job.memory_length = o.memory_length;
  job.window = o.job.window;
  train::SetTorchThreads(1);  // As the ranks run.
  RETURN_IF_ERROR(KeepFreedMemory());
  ASSIGN_OR_RETURN(CpuCalibration cal, CalibrateCpuCosts(job, o.job.window));
  ASSIGN_OR_RETURN(std::string dir, MakeRunDir());
  const absl::StatusOr<bool> memory_ok =
      RunInDir(dir, o, job, loaded.lengths, cal);
  if (o.keep_dir || !memory_ok.ok()) {
    absl::FPrintF(stderr, "run folder kept: %s\n", dir);
  } else {
    std::filesystem::remove_all(dir);
  }
  if (memory_ok.ok()) {
    absl::PrintF(
        "\nfinished in %.0f s (calibration, Gloo probe, ranks, memory "
        "check)\n",
        absl::ToDoubleSeconds(absl::Now() - start));
  }
  return memory_ok;
}

// --rank_job or --gloo_job <dir> <rank> <address>, and --memory_job <dir>.
int ChildMain(const std::vector<std::string>& args) {
  int rank = -1;
  absl::Status status;
  if (args.size() == 4 && args[0] == "--rank_job" &&
      absl::SimpleAtoi(args[2], &rank)) {
    status = RunRank(args[1], rank, args[3]);
  } else if (args.size() == 4 && args[0] == "--gloo_job" &&
             absl::SimpleAtoi(args[2], &rank)) {
    status = RunGlooProbe(args[1], rank, args[3]);
  } else if (args.size() == 2 && args[0] == "--memory_job") {
    status = RunMemoryCheck(args[1]);
  } else {
    status = absl::InvalidArgumentError("bad child arguments");
  }
  if (status.ok()) return 0;
  absl::FPrintF(stderr, "%s\n", status.ToString());
  return 3;
}

}  // namespace
}  // namespace dcp::train_benchmark

int main(int argc, char** argv) {
  if (argc >= 2 && (std::string(argv[1]) == "--rank_job" ||
                    std::string(argv[1]) == "--gloo_job" ||
                    std::string(argv[1]) == "--memory_job")) {
    return dcp::train_benchmark::ChildMain(
        std::vector<std::string>(argv + 1, argv + argc));
  }
  absl::SetProgramUsageMessage(
      "dcp plans vs the tuned static plan, trained on rank processes of this "
      "machine; see examples/train_benchmark.cc.");
  absl::ParseCommandLine(argc, argv);
  const absl::StatusOr<bool> memory_ok = dcp::train_benchmark::RunBenchmark(
      dcp::train_benchmark::OptionsFromFlags());
  if (!memory_ok.ok()) {
    absl::FPrintF(stderr, "dcp-train-bench: %s\n",
                  memory_ok.status().ToString());
    return 2;
  }
  return *memory_ok ? 0 : 1;
}
