#include "scheduler/eval/ablations.h"

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/eval/baselines.h"
#include "scheduler/eval/evaluation.h"
#include "scheduler/eval/simulator.h"
#include "scheduler/planner/test_data.h"

namespace dcp {
namespace {

class AblationsTest : public ::testing::Test {
 protected:
  AblationsTest()
      : lengths_(testing_data::ThreeTierTrace(4000, 7, 30000, 60000)),
        view_(lengths_, 131072) {
    options_.model = *BuiltinModel("llama3-8b");
    options_.world_size = 8;
    options_.window = 131072;
    options_.tokens_per_step = 1 << 20;
    options_.steps = 3;
    options_.now_ns = [] { return int64_t{0}; };
  }

  double DcpMakespan(const PlannerOptions& planner) {
    EvaluationOptions o = options_;
    o.planner = planner;
    o.run_baselines = false;
    absl::StatusOr<EvaluationResult> r = Evaluate(view_, o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->dcp.makespan_s : -1;
  }

  std::vector<int32_t> lengths_;
  LengthView view_;
  EvaluationOptions options_;
};

TEST_F(AblationsTest, UniformWinsCountsUniformPlans) {
  std::vector<StepPlan> plans(5);
  plans[1].origin = PlanOrigin::kUniform;
  plans[3].origin = PlanOrigin::kUniform;
  plans[4].origin = PlanOrigin::kSearch;
  EXPECT_EQ(UniformWins(plans), 2);
}

TEST_F(AblationsTest, EveryVariantIsReplayedOnTheSameSteps) {
  absl::StatusOr<std::vector<AblationFigures>> rows =
      RunAblations(view_, options_);
  ASSERT_TRUE(rows.ok()) << rows.status();
  std::vector<std::string> names;
  for (const AblationFigures& a : *rows) names.push_back(a.figures.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "dcp-search-only", "dcp-uniform-only", "dcp-fixed-recompute",
                "dcp-even-microsteps", "dcp-one-group-size"}));
  const std::vector<std::pair<std::string, PlannerOptions>> variants =
      AblationVariants(options_.planner);
  ASSERT_EQ(variants.size(), rows->size());
  for (size_t k = 0; k < rows->size(); ++k) {
    const AblationFigures& a = (*rows)[k];
    EXPECT_EQ(a.steps, options_.steps);
    ASSERT_EQ(a.figures.step_s.size(), static_cast<size_t>(a.steps));
    // The figures are those of Evaluate with the variant's options.
    EXPECT_DOUBLE_EQ(a.figures.makespan_s, DcpMakespan(variants[k].second))
        << a.figures.name;
  }
  EXPECT_EQ((*rows)[0].uniform_won, 0);               // search only
  EXPECT_EQ((*rows)[1].uniform_won, options_.steps);  // uniform only
}

TEST(AblationsFewHeadsTest, EveryVariantPlansValidHybridGroups) {
  // dit-video-1.3b's 12 heads on 32 GPUs: groups of 8 and 16 run Ulysses
  // inside a ring, and each variant's plans (even micro-steps splitting
  // such tasks, one group size a step) must keep their layouts for the
  // reference cluster to accept them.
  const std::vector<int32_t> lengths =
      testing_data::ThreeTierTrace(6000, 3, 100000, 150000);
  const LengthView view(lengths, 262144);
  EvaluationOptions o;
  o.model = *BuiltinModel("dit-video-1.3b");
  o.world_size = 32;
  o.window = 262144;
  o.tokens_per_step = 4 << 20;
  o.steps = 20;
  o.now_ns = [] { return int64_t{0}; };
  absl::StatusOr<std::vector<AblationFigures>> rows = RunAblations(view, o);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->size(), AblationVariants(o.planner).size());
}

TEST_F(AblationsTest, PaperRowsAreTheBaselineAndThreePlannerVariants) {
  const StaticConfig sp4{4, 1.0};
  absl::StatusOr<PaperAblation> r = RunPaperAblation(view_, options_, sp4);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps, options_.steps);
  EXPECT_EQ(r->baseline.name, "fixed-sp4-full-recompute");

  // The baseline: the balanced static plan of SP 4, full recompute, of
  // each step, replayed.
  absl::StatusOr<std::vector<std::vector<int64_t>>> steps =
      EvaluationSteps(view_, options_);
  ASSERT_TRUE(steps.ok()) << steps.status();
  const ReferenceCluster cluster(options_.cluster, options_.model,
                                 options_.world_size);
  double baseline = 0;
  for (size_t i = 0; i < steps->size(); ++i) {
    absl::StatusOr<StepPlan> plan = PlanStatic(
        cluster, view_, static_cast<int64_t>(i), (*steps)[i], sp4, true);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<StepReport> report = ReplayStep(cluster, *plan, view_);
    ASSERT_TRUE(report.ok()) << report.status();
    baseline += report->makespan_s;
  }
  EXPECT_DOUBLE_EQ(r->baseline.makespan_s, baseline);

  PlannerOptions full;
  full.recompute_choice = RecomputeChoice::kFixed;
  full.fixed_recompute = 1.0;
  PlannerOptions even = full;
  even.even_micro_steps = true;
  EXPECT_DOUBLE_EQ(r->intra_step.makespan_s, DcpMakespan(even));
  EXPECT_DOUBLE_EQ(r->accumulation.makespan_s, DcpMakespan(full));
  EXPECT_DOUBLE_EQ(r->recompute.makespan_s, DcpMakespan(PlannerOptions()));
  // No plan beats the bounds.
  for (const PlannerFigures* f :
       {&r->baseline, &r->intra_step, &r->accumulation, &r->recompute}) {
    EXPECT_GE(f->makespan_s, r->memory_bound_s) << f->name;
  }
  EXPECT_GE(r->memory_bound_s, r->lower_bound_s);
}

}  // namespace
}  // namespace dcp
