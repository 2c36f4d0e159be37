#include "scheduler/eval/evaluation.h"

#include <cstdint>
#include <functional>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/planner/test_data.h"
#include "scheduler/eval/simulator.h"

namespace dcp {
namespace {

// Some of the long samples are beyond the window.
std::vector<int32_t> SkewedLengths(int n, uint32_t seed) {
  return testing_data::ThreeTierTrace(n, seed, 50000, 100000);
}

// A clock that advances 1 ms every time it is read.
struct FakeClock {
  int64_t now_ns = 0;
  int calls = 0;
  int64_t Read() {
    ++calls;
    now_ns += 1000000;
    return now_ns;
  }
};

constexpr int64_t kWindow = 131072;

EvaluationOptions SmallOptions(int world_size, FakeClock* clock) {
  EvaluationOptions o;
  o.model = *BuiltinModel("llama3-8b");
  o.world_size = world_size;
  o.window = kWindow;
  o.tokens_per_step = int64_t{65536} * world_size;
  o.steps = 4;
  o.seed = 3;
  o.now_ns = [clock] { return clock->Read(); };
  return o;
}

TEST(EvaluateTest, DcpPlansReplayAndBeatTheBaselines) {
  const std::vector<int32_t> lengths = SkewedLengths(3000, 7);
  const LengthView view(lengths, kWindow);
  for (int world : {8, 16}) {
    SCOPED_TRACE(testing::Message() << "world_size=" << world);
    FakeClock clock;
    const EvaluationOptions options = SmallOptions(world, &clock);
    absl::StatusOr<EvaluationResult> r = Evaluate(view, options);
    ASSERT_TRUE(r.ok()) << r.status();

    ASSERT_EQ(r->steps, options.steps);
    ASSERT_EQ(r->plans.size(), options.steps);
    ASSERT_EQ(r->dcp.step_s.size(), options.steps);
    EXPECT_EQ(r->dcp.name, "dcp");

    // Every dcp plan replays, with the figures Evaluate reported, and
    // covers its step's samples once; no sample is in two steps.
    ReferenceCluster cluster(options.cluster, options.model, world);
    std::set<int64_t> seen_in_run;
    double makespan = 0;
    double lower_bound = 0;
    int64_t tokens = 0;
    int64_t samples = 0;
    for (int i = 0; i < options.steps; ++i) {
      const StepPlan& plan = r->plans[i];
      EXPECT_EQ(plan.step, i);
      absl::StatusOr<StepReport> report = ReplayStep(cluster, plan, view);
      ASSERT_TRUE(report.ok()) << "step " << i << ": " << report.status();
      EXPECT_DOUBLE_EQ(report->makespan_s, r->dcp.step_s[i]);
      EXPECT_GE(report->makespan_s, report->lower_bound_s);
      makespan += report->makespan_s;
      lower_bound += report->lower_bound_s;
      tokens += report->tokens;
      samples += static_cast<int64_t>(plan.samples.size());
      std::multiset<int64_t> in_tasks;
      for (const TaskPlan& t : plan.tasks) {
        in_tasks.insert(t.samples.begin(), t.samples.end());
      }
      EXPECT_EQ(in_tasks, std::multiset<int64_t>(plan.samples.begin(),
                                                 plan.samples.end()));
      for (int64_t id : plan.samples) {
        EXPECT_TRUE(seen_in_run.insert(id).second)
            << "sample " << id << " is in two steps";
      }
    }
    EXPECT_NEAR(r->dcp.makespan_s, makespan, 1e-9 * makespan);
    EXPECT_NEAR(r->lower_bound_s, lower_bound, 1e-9 * lower_bound);
    EXPECT_EQ(r->tokens, tokens);
    EXPECT_EQ(r->samples, samples);
    EXPECT_GT(r->lower_bound_s, 0);
    EXPECT_GE(r->dcp.makespan_s, r->lower_bound_s);

    // The baselines ran on the same steps, and none beats dcp.
    ASSERT_EQ(r->baselines.size(), 3u);
    const char* names[] = {"static_packed", "static_balanced", "dynamic_cp"};
    for (size_t b = 0; b < r->baselines.size(); ++b) {
      const PlannerFigures& f = r->baselines[b];
      EXPECT_EQ(f.name, names[b]);
      ASSERT_EQ(f.step_s.size(), options.steps);
      double sum = 0;
      for (double s : f.step_s) sum += s;
      EXPECT_NEAR(f.makespan_s, sum, 1e-9 * sum);
      EXPECT_GE(f.makespan_s, r->lower_bound_s) << f.name;
      EXPECT_LE(r->dcp.makespan_s, f.makespan_s) << f.name;
    }
    EXPECT_GE(r->static_packed_config.group_size, 1);
    EXPECT_GE(r->static_balanced_config.group_size, 1);

    // The planner's default cost model is the reference model's analytic
    // form, so it predicts the replayed step time.
    EXPECT_LT(r->prediction_error, 1e-6);
    EXPECT_GE(r->prediction_error, 0);

    // One planning time per step, from the injected clock only.
    ASSERT_EQ(r->plan_ms.size(), options.steps);
    for (double ms : r->plan_ms) EXPECT_DOUBLE_EQ(ms, 1.0);
    EXPECT_EQ(clock.calls, 2 * options.steps);
    EXPECT_DOUBLE_EQ(Percentile(r->plan_ms, 50), 1.0);
    EXPECT_DOUBLE_EQ(Percentile(r->plan_ms, 100), 1.0);
  }
}

TEST(EvaluateTest, IsDeterministic) {
  const std::vector<int32_t> lengths = SkewedLengths(2000, 9);
  const LengthView view(lengths, kWindow);
  FakeClock clock;
  const EvaluationOptions options = SmallOptions(8, &clock);
  absl::StatusOr<EvaluationResult> a = Evaluate(view, options);
  absl::StatusOr<EvaluationResult> b = Evaluate(view, options);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->dcp.step_s, b->dcp.step_s);
  ASSERT_EQ(a->baselines.size(), b->baselines.size());
  for (size_t i = 0; i < a->baselines.size(); ++i) {
    EXPECT_EQ(a->baselines[i].step_s, b->baselines[i].step_s);
  }
  for (size_t i = 0; i < a->plans.size(); ++i) {
    EXPECT_EQ(a->plans[i].samples, b->plans[i].samples);
  }
}

TEST(EvaluateTest, SkipsBaselinesWhenAsked) {
  const std::vector<int32_t> lengths = SkewedLengths(2000, 5);
  const LengthView view(lengths, kWindow);
  FakeClock clock;
  EvaluationOptions options = SmallOptions(8, &clock);
  options.run_baselines = false;
  options.steps = 2;
  absl::StatusOr<EvaluationResult> r = Evaluate(view, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps, 2);
  EXPECT_TRUE(r->baselines.empty());
  EXPECT_EQ(r->plan_ms.size(), 2u);
  EXPECT_GT(r->dcp.makespan_s, 0);
}

TEST(EvaluateTest, UsesTheGivenCostModel) {
  const std::vector<int32_t> lengths = SkewedLengths(2000, 5);
  const LengthView view(lengths, kWindow);
  FakeClock clock;
  EvaluationOptions options = SmallOptions(8, &clock);
  options.run_baselines = false;
  options.steps = 2;
  // Every time coefficient doubled: the planner predicts twice the replayed
  // step time, whatever plan it picks.
  const CostModel reference =
      CostModel::FromSpecs(options.cluster, options.model, options.world_size);
  CostModel::Coefficients c = reference.coefficients();
  for (double* k :
       {&c.lin, &c.attn, &c.a2a_byte_intra, &c.a2a_fixed_intra,
        &c.a2a_byte_inter, &c.a2a_fixed_inter, &c.fixed, &c.grad_sync}) {
    *k *= 2;
  }
  options.cost_model = CostModel(c, options.model, reference.memory_cap(),
                                 reference.gpus_per_node());
  absl::StatusOr<EvaluationResult> r = Evaluate(view, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->prediction_error, 1.0, 1e-6);
}

TEST(EvaluateTest, BadOptionsGiveClearErrors) {
  const std::vector<int32_t> lengths = SkewedLengths(500, 1);
  const LengthView view(lengths, kWindow);
  FakeClock clock;
  struct Case {
    const char* what;
    std::function<void(EvaluationOptions&)> change;
    const char* message;
  };
  const Case cases[] = {
      {"no clock", [](EvaluationOptions& o) { o.now_ns = nullptr; }, "clock"},
      {"zero steps", [](EvaluationOptions& o) { o.steps = 0; },
       "steps must be positive"},
      {"zero world", [](EvaluationOptions& o) { o.world_size = 0; },
       "world_size must be positive"},
      {"zero budget", [](EvaluationOptions& o) { o.tokens_per_step = 0; },
       "tokens_per_step must be positive"},
      {"negative look-ahead",
       [](EvaluationOptions& o) { o.balance_steps = -1; },
       "lookahead_steps must be >= 0"},
      {"bad model", [](EvaluationOptions& o) { o.model.hidden = 0; },
       "model 'llama3-8b': layers, hidden"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    EvaluationOptions options = SmallOptions(8, &clock);
    c.change(options);
    absl::StatusOr<EvaluationResult> r = Evaluate(view, options);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << r.status();
    EXPECT_NE(r.status().message().find(c.message), absl::string_view::npos)
        << r.status();
  }
}

TEST(PercentileTest, NearestRank) {
  EXPECT_EQ(Percentile({}, 50), 0);
  EXPECT_EQ(Percentile({7}, 0), 7);
  EXPECT_EQ(Percentile({7}, 100), 7);
  // Unsorted input; nearest rank is ceil(p/100 * n), at least 1.
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_EQ(Percentile(v, 0), 1);
  EXPECT_EQ(Percentile(v, 25), 1);
  EXPECT_EQ(Percentile(v, 26), 2);
  EXPECT_EQ(Percentile(v, 50), 2);
  EXPECT_EQ(Percentile(v, 75), 3);
  EXPECT_EQ(Percentile(v, 99), 4);
  EXPECT_EQ(Percentile(v, 100), 4);
  EXPECT_EQ(Percentile({5, 1, 3}, 50), 3);
}

TEST(BreakDownGapTest, TheTermsAddUpToTheGapToTheMemoryBound) {
  // Samples up to 100,000 tokens: beyond what one GPU holds at r = 0.
  FakeClock clock;
  EvaluationOptions o = SmallOptions(8, &clock);
  o.run_baselines = false;
  const std::vector<int32_t> table = SkewedLengths(3000, 7);
  const LengthView view(table, kWindow);
  absl::StatusOr<EvaluationResult> r = Evaluate(view, o);
  ASSERT_TRUE(r.ok()) << r.status();
  const ReferenceCluster cluster(o.cluster, o.model, o.world_size);
  absl::StatusOr<BoundGap> gap = BreakDownGap(cluster, r->plans, view);
  ASSERT_TRUE(gap.ok()) << gap.status();
  const double sum = r->memory_bound_s + gap->long_excess_s +
                     gap->short_excess_s + gap->overhead_s + gap->imbalance_s;
  EXPECT_NEAR(sum, r->dcp.makespan_s, 1e-9 * r->dcp.makespan_s);
  // No task beats its samples' bounds; both classes occur.
  EXPECT_GT(gap->long_excess_s, 0);
  EXPECT_GT(gap->short_excess_s, 0);
  EXPECT_GT(gap->overhead_s, 0);
  EXPECT_GE(gap->imbalance_s, 0);
}

}  // namespace
}  // namespace dcp
