// Planning time per step (one core), on the bundled Wikipedia trace with
// llama3-8b, a 131072-token window and 64K tokens per GPU per step: at
// 1,024 GPUs that is 64M tokens a step. BM_ScenarioA is scenario A exactly
// (32 GPUs, 2M tokens a step).
//
//   bazel run -c opt //scheduler/planner:planner_benchmark

#include <limits>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
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

void PlanSteps(benchmark::State& state, int world, int64_t tokens_per_step,
               int64_t window) {
  LengthView view(Wikipedia(), window);
  StepBuilderOptions so;
  so.tokens_per_step = tokens_per_step;
  absl::StatusOr<std::vector<std::vector<int64_t>>> steps =
      BuildSteps(view, so, 4);
  ModelSpec model = *BuiltinModel("llama3-8b");
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
  for (auto _ : state) {
    const std::vector<int64_t>& step = (*steps)[i++ % steps->size()];
    absl::StatusOr<StepPlan> plan = planner->PlanStep(0, step, view);
    benchmark::DoNotOptimize(plan);
    samples += static_cast<int64_t>(step.size());
  }
  state.counters["samples_per_step"] =
      benchmark::Counter(static_cast<double>(samples) / state.iterations());
  state.counters["gpus"] = world;
}

void BM_PlanStep(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  PlanSteps(state, world, int64_t{65536} * world, 131072);
}
BENCHMARK(BM_PlanStep)
    ->Arg(32)
    ->Arg(256)
    ->Arg(1024)
    ->Arg(4096)
    ->Unit(benchmark::kMillisecond);

void BM_ScenarioA(benchmark::State& state) {
  PlanSteps(state, 32, 2097152, 131072);
}
BENCHMARK(BM_ScenarioA)->Unit(benchmark::kMillisecond);

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

BENCHMARK_MAIN();
