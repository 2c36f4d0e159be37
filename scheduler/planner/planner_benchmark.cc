// Planning time per step (one core) on the bundled Wikipedia trace, 64K
// tokens per GPU per step (64M tokens at 1,024 GPUs, 256M at 4,096).
//
//   bazel run -c opt //scheduler/planner:planner_benchmark
//
// BM_PlanStep/<GPUs>: llama3-8b with a 131072-token window at 32 to 4,096
// GPUs. BM_ScenarioA is scenario A exactly (32 GPUs, 2M tokens a step).
// BM_Model/<model>/<GPUs>: every built-in model and every model of
// data/models/ at 1,024 and 4,096 GPUs with a 524288-token window.
//
// Counters of the BM_Model and BM_PlanStep rows: p50_ms and cpu_p50_ms, the
// median planning time of one step in wall-clock and in this thread's CPU
// time (the figure to quote on a shared machine); the mean CPU milliseconds a
// step spends in each planner phase (sizing_ms, packing_ms, placement_ms,
// dealing_ms, refinement_ms, uniform_ms, emit_ms; see PlanPhase), timed here
// through a PlanPhaseObserver because the planner has no clock; form_ms, the
// mean CPU time to form each of the first four steps' sample lists
// (StepBuilder, before planning; the epoch's shuffle included); x_lower and
// x_mem, the plans of the benchmark's steps replayed on the reference
// cluster (docs/COST_MODEL.md) over its lower bound and its memory-aware
// bound; faults, the mean minor page faults of a step (fresh memory the
// kernel hands the planner). The row's label is a hash of those plans (every
// task's ranks, samples and recompute, in order): equal labels before and
// after a change mean the change planned exactly the same.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "scheduler/eval/simulator.h"
#include "scheduler/lengths/length_reader.h"
#include "scheduler/planner/planner.h"
#include "scheduler/planner/step_builder.h"

namespace dcp {
namespace {

const std::vector<int32_t>& Wikipedia() {
  static const std::vector<int32_t>* lengths = [] {
    LengthSourceOptions source;
    source.path = "data/lengths/wikipedia.txt";
    absl::StatusOr<std::vector<int32_t>> l = ReadAllLengths(source);
    if (!l.ok()) {
      std::fprintf(stderr, "%s\n", std::string(l.status().message()).c_str());
      std::abort();
    }
    return new std::vector<int32_t>(std::move(*l));
  }();
  return *lengths;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// CPU time of this thread: on a shared machine it leaves out the time other
// processes hold the core.
int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

// Minor page faults of this thread so far.
int64_t MinorFaults() {
  rusage usage;
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

// FNV-1a over the plan's tasks: their ranks, samples and recompute, in order.
class PlanHash {
 public:
  void Add(const StepPlan& plan) {
    for (const TaskPlan& task : plan.tasks) {
      Mix(task.ranks.size());
      for (int r : task.ranks) Mix(r);
      Mix(task.samples.size());
      for (int64_t s : task.samples) Mix(s);
      uint64_t bits;
      std::memcpy(&bits, &task.recompute, sizeof(bits));
      Mix(bits);
    }
  }
  std::string Hex() const { return absl::StrFormat("plans=%016x", hash_); }

 private:
  void Mix(uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      hash_ = (hash_ ^ ((v >> (8 * b)) & 0xFF)) * 0x100000001b3ULL;
    }
  }
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

// Charges the time between two `Enter` calls to the phase entered first.
class PhaseTimer : public PlanPhaseObserver {
 public:
  void Enter(PlanPhase phase) override {
    const int64_t now = ThreadCpuNs();
    if (current_ != PlanPhase::kDone) {
      ns_[static_cast<int>(current_)] += now - since_;
    }
    current_ = phase;
    since_ = now;
  }
  double Ms(PlanPhase phase) const {
    return ns_[static_cast<int>(phase)] / 1e6;
  }

 private:
  std::array<int64_t, kNumPlanPhases> ns_{};
  PlanPhase current_ = PlanPhase::kDone;
  int64_t since_ = 0;
};

constexpr const char* kPhaseNames[kNumPlanPhases] = {
    "sizing_ms",    "packing_ms", "placement_ms", "dealing_ms",
    "refinement_ms", "uniform_ms", "emit_ms"};

// The steps' plans replayed on the reference cluster: makespan over the
// lower bound and over the memory-aware bound, summed over the steps.
void ReportQuality(benchmark::State& state, const ModelSpec& model, int world,
                   const Planner& planner,
                   const std::vector<std::vector<int64_t>>& steps,
                   const LengthView& view) {
  ReferenceCluster cluster(ClusterSpec::H200(), model, world);
  double makespan = 0, lower = 0, memory = 0;
  PlanHash hash;
  for (size_t i = 0; i < steps.size(); ++i) {
    absl::StatusOr<StepPlan> plan = planner.PlanStep(i, steps[i], view);
    if (plan.ok()) hash.Add(*plan);
    absl::StatusOr<StepReport> report =
        plan.ok() ? ReplayStep(cluster, *plan, view)
                  : absl::StatusOr<StepReport>(plan.status());
    if (!report.ok()) {
      state.SkipWithError(std::string(report.status().message()).c_str());
      return;
    }
    makespan += report->makespan_s;
    lower += report->lower_bound_s;
    memory += report->memory_bound_s;
  }
  state.counters["x_lower"] = makespan / lower;
  state.counters["x_mem"] = makespan / memory;
  state.SetLabel(hash.Hex());
}

void PlanSteps(benchmark::State& state, const ModelSpec& model, int world,
               int64_t tokens_per_step, int64_t window) {
  LengthView view(Wikipedia(), window);
  StepBuilderOptions so;
  so.tokens_per_step = tokens_per_step;
  const int64_t form_start = ThreadCpuNs();
  absl::StatusOr<std::vector<std::vector<int64_t>>> steps =
      BuildSteps(view, so, 4);
  const double form_ms = (ThreadCpuNs() - form_start) / 1e6 / 4;
  PlannerOptions po;
  po.world_size = world;
  absl::StatusOr<Planner> planner = Planner::Create(
      CostModel::FromSpecs(ClusterSpec::H200(), model, world), po);
  if (!steps.ok() || !planner.ok()) {
    state.SkipWithError("setup failed");
    return;
  }
  size_t i = 0;
  int64_t samples = 0;
  PhaseTimer phases;
  std::vector<double> ms, cpu_ms;
  const int64_t faults_start = MinorFaults();
  for (auto _ : state) {
    const std::vector<int64_t>& step = (*steps)[i++ % steps->size()];
    const int64_t start = NowNs();
    const int64_t cpu_start = ThreadCpuNs();
    absl::StatusOr<StepPlan> plan = planner->PlanStep(0, step, view, &phases);
    cpu_ms.push_back((ThreadCpuNs() - cpu_start) / 1e6);
    ms.push_back((NowNs() - start) / 1e6);
    benchmark::DoNotOptimize(plan);
    samples += static_cast<int64_t>(step.size());
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["faults"] = (MinorFaults() - faults_start) / n;
  for (std::vector<double>* v : {&ms, &cpu_ms}) {
    std::nth_element(v->begin(), v->begin() + v->size() / 2, v->end());
  }
  state.counters["p50_ms"] = ms[ms.size() / 2];
  state.counters["cpu_p50_ms"] = cpu_ms[cpu_ms.size() / 2];
  for (int p = 0; p < kNumPlanPhases; ++p) {
    state.counters[kPhaseNames[p]] = phases.Ms(static_cast<PlanPhase>(p)) / n;
  }
  state.counters["form_ms"] = form_ms;
  state.counters["samples_per_step"] = samples / n;
  state.counters["gpus"] = world;
  ReportQuality(state, model, world, *planner, *steps, view);
}

void BM_PlanStep(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  PlanSteps(state, *BuiltinModel("llama3-8b"), world, int64_t{65536} * world,
            131072);
}
BENCHMARK(BM_PlanStep)
    ->Arg(32)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(4096)
    ->Unit(benchmark::kMillisecond);

void BM_ScenarioA(benchmark::State& state) {
  PlanSteps(state, *BuiltinModel("llama3-8b"), 32, 2097152, 131072);
}
BENCHMARK(BM_ScenarioA)->Unit(benchmark::kMillisecond);

// The built-in models, then those of data/models/ by file name.
std::vector<ModelSpec> AllModels() {
  std::vector<ModelSpec> models;
  for (const std::string& name : BuiltinModelNames()) {
    models.push_back(*BuiltinModel(name));
  }
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator("data/models")) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const std::string& file : files) {
    absl::StatusOr<ModelSpec> m = LoadModelConfig(file);
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", std::string(m.status().message()).c_str());
      std::abort();
    }
    models.push_back(*std::move(m));
  }
  return models;
}

// BM_Model/<model>/<GPUs> for every model at 1,024 and 4,096 GPUs.
void RegisterModelRows() {
  for (const ModelSpec& model : AllModels()) {
    for (int world : {1024, 4096}) {
      benchmark::RegisterBenchmark(
          ("BM_Model/" + model.name + "/" + std::to_string(world)).c_str(),
          [model, world](benchmark::State& state) {
            PlanSteps(state, model, world, int64_t{65536} * world, 524288);
          })
          ->Unit(benchmark::kMillisecond);
    }
  }
}

// Forming one step's sample list at 1,024 GPUs (64M tokens, ~67K samples):
// the planning thread does this before every PlanStep.
void BM_FormStep1024(benchmark::State& state) {
  LengthView view(Wikipedia(), 131072);
  StepBuilderOptions so;
  so.tokens_per_step = int64_t{65536} * 1024;
  absl::StatusOr<StepBuilder> builder = StepBuilder::Create(view, so);
  if (!builder.ok()) {
    state.SkipWithError("setup failed");
    return;
  }
  for (auto _ : state) {
    absl::StatusOr<std::vector<int64_t>> step = builder->NextStep();
    benchmark::DoNotOptimize(step);
  }
}
BENCHMARK(BM_FormStep1024)->Unit(benchmark::kMillisecond);

// One draw of the shuffle over the Wikipedia trace's 1M ids, over whole
// epochs: Arg 0 keeps the swap map (no array), 1 is the default switch.
void BM_ShuffledOrderNext(benchmark::State& state) {
  const int64_t n = static_cast<int64_t>(Wikipedia().size());
  ShuffledOrder order(n, 0,
                      state.range(0) == 0 ? std::numeric_limits<int64_t>::max()
                                          : n / 32);
  for (auto _ : state) benchmark::DoNotOptimize(order.Next());
}
BENCHMARK(BM_ShuffledOrderNext)->Arg(0)->Arg(1)->Unit(benchmark::kNanosecond);

}  // namespace
}  // namespace dcp

int main(int argc, char** argv) {
  dcp::RegisterModelRows();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
