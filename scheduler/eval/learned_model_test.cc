#include "scheduler/eval/learned_model.h"

#include <algorithm>
#include <cmath>

#include "absl/time/clock.h"
#include "common/cluster_config.h"
#include "common/model_spec.h"
#include "gtest/gtest.h"
#include "scheduler/control/profile_stage.h"
#include "scheduler/eval/evaluation.h"
#include "scheduler/eval/simulated_profile.h"
#include "scheduler/eval/simulator.h"
#include "scheduler/planner/cost_model.h"
#include "scheduler/planner/test_data.h"

namespace dcp {
namespace {

int64_t NowNs() { return absl::GetCurrentTimeNanos(); }

// llama3-8b on `world` GPUs of the reference cluster, a skewed trace,
// 16K tokens a GPU a step.
EvaluationOptions Scenario(int world) {
  EvaluationOptions o;
  o.model = *BuiltinModel("llama3-8b");
  o.world_size = world;
  o.window = 32768;
  o.tokens_per_step = int64_t{16384} * world;
  o.steps = 3;
  o.seed = 5;
  o.run_baselines = false;
  o.now_ns = NowNs;
  return o;
}

const std::vector<int32_t>& Trace() {
  static const std::vector<int32_t> trace = testing_data::SkewedTrace(20000, 3);
  return trace;
}

EvaluationResult PlanWith(const EvaluationOptions& base, CostModel model) {
  EvaluationOptions o = base;
  o.cost_model = std::move(model);
  absl::StatusOr<EvaluationResult> r =
      Evaluate(LengthView(Trace(), o.window), o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : EvaluationResult{};
}

bool SamePlans(const EvaluationResult& a, const EvaluationResult& b) {
  if (a.plans.size() != b.plans.size()) return false;
  for (size_t i = 0; i < a.plans.size(); ++i) {
    const std::vector<TaskPlan>& x = a.plans[i].tasks;
    const std::vector<TaskPlan>& y = b.plans[i].tasks;
    if (x.size() != y.size()) return false;
    for (size_t t = 0; t < x.size(); ++t) {
      if (x[t].ranks != y[t].ranks || x[t].samples != y[t].samples ||
          x[t].recompute != y[t].recompute) {
        return false;
      }
    }
  }
  return true;
}

TEST(LearnedModelTest, APriorOfAnotherGpuChangesPlans) {
  const EvaluationOptions o = Scenario(16);
  const EvaluationResult perfect =
      PlanWith(o, CostModel::FromSpecs(ClusterSpec::H200(), o.model, 16));
  for (const char* gpu : {"h100-sxm", "a100-80g"}) {
    SCOPED_TRACE(gpu);
    const EvaluationResult other =
        PlanWith(o, CostModel::FromSpecs(*BuiltinCluster(gpu), o.model, 16));
    EXPECT_FALSE(SamePlans(perfect, other));
    EXPECT_NE(other.dcp.makespan_s, perfect.dcp.makespan_s);
  }
  // The h200 built-in is the reference itself: the same plans.
  EXPECT_TRUE(SamePlans(
      perfect,
      PlanWith(o, CostModel::FromSpecs(*BuiltinCluster("h200"), o.model, 16))));
}

// The largest relative error of `model` against the judge over every task
// of `plans`.
double MaxTaskError(const CostModel& model, const ReferenceCluster& judge,
                    const std::vector<StepPlan>& plans) {
  const LengthView view(Trace(), 32768);
  double worst = 0;
  for (const StepPlan& plan : plans) {
    for (const TaskPlan& t : plan.tasks) {
      std::vector<int64_t> lengths;
      for (int64_t id : t.samples) lengths.push_back(view[id]);
      const double truth = judge.Cost(t.ranks, lengths, t.recompute).total_s;
      const double predicted =
          model.TaskSeconds(static_cast<int>(t.ranks.size()),
                            judge.IntraNode(t.ranks), lengths, t.recompute);
      worst = std::max(worst, std::abs(predicted - truth) / truth);
    }
  }
  return worst;
}

TEST(LearnedModelTest, FitToANoiselessProfileOfTheReferenceRecoversPlans) {
  // One node, so that every task is inside it, as every profiled group is.
  constexpr int kWorld = 8;
  const EvaluationOptions o = Scenario(kWorld);
  const ReferenceCluster judge(ClusterSpec::H200(), o.model, kWorld);
  ClusterSpec a100 = *BuiltinCluster("a100-80g");
  a100.hbm_bytes = ClusterSpec::H200().hbm_bytes;
  const CostModel prior = CostModel::FromSpecs(a100, o.model, kWorld);
  // The agents' default grid: its lengths reach the window (32768).
  SimulatedProfileOptions grid;
  grid.window = o.window;
  absl::StatusOr<CostModel> fitted =
      prior.Fit(SimulateProfile(judge, prior, grid));
  ASSERT_TRUE(fitted.ok()) << fitted.status();

  const EvaluationResult perfect =
      PlanWith(o, CostModel::FromSpecs(ClusterSpec::H200(), o.model, kWorld));
  const EvaluationResult learned = PlanWith(o, *fitted);
  // e: how far the fitted model is from the judge on any task either set of
  // plans runs.
  const double e = std::max(MaxTaskError(*fitted, judge, perfect.plans),
                            MaxTaskError(*fitted, judge, learned.plans));
  EXPECT_LT(e, 0.01);
  EXPECT_GT(MaxTaskError(prior, judge, perfect.plans), 0.5);
  // Step times are maxima of sums of task times: a model within e of the
  // judge on every task is within e on every schedule. A plan the fitted
  // model thinks no worse than the perfect model's is then at most
  // (1 + e) / (1 - e) worse on the judge.
  EXPECT_LE(learned.dcp.makespan_s, perfect.dcp.makespan_s * (1 + e) / (1 - e));
  // The GEMM curve's shape was learned: the prior's half-efficiency token
  // count (570) moved to the judge's (768).
  EXPECT_NEAR(fitted->coefficients().gemm_half,
              ClusterSpec::H200().gemm_eff_half_tokens, 0.05 * 768);
}

TEST(LearnedModelTest, ReportsEveryModelAndTheOnlineRefit) {
  LearnedModelOptions o;
  o.evaluation = Scenario(16);
  o.prior = *BuiltinCluster("a100-80g");
  o.noise = 0.1;
  o.seed = 3;
  o.online_steps = 4;
  // Refits from the first step's reports on (a step of this scenario
  // brings fewer than the scheduler's default 64).
  o.refit_every = 8;
  const LengthView view(Trace(), o.evaluation.window);
  absl::StatusOr<LearnedModelResult> r = EvaluateLearnedModel(view, o);
  ASSERT_TRUE(r.ok()) << r.status();
  // 16 ranks x 2 ratios x 2 reps x the points: by default lengths 256,
  // 1024 and 4096 on the 9 shapes (group sizes 1, 2, 4, 8 and 16, beyond 1
  // both as plain Ulysses and as a ring of two) and 16384 and 32768 (above
  // kProfileAllGroupsUpToLength) on groups of 16 as plain Ulysses only,
  // where they fit; else 256, 1024 and 4096 on all 9.
  ASSERT_EQ(kProfileAllGroupsUpToLength, 4096);
  EXPECT_EQ(r->profile_rows, 16 * 2 * 2 * (3 * 9 + 2 * 1));
  EXPECT_EQ(r->profile_short_rows, 9 * 16 * 3 * 2 * 2);
  // The same points and more: the longer grid costs more.
  EXPECT_GT(r->profile_seconds, r->profile_short_seconds);
  ASSERT_EQ(r->online_s.size(), 5u);
  EXPECT_EQ(r->online_s[0], r->prior_s);
  EXPECT_GE(r->perfect_s, r->lower_bound_s);
  for (double s :
       {r->sheet_s, r->prior_s, r->profiled_s, r->profiled_short_s}) {
    EXPECT_GE(s, r->lower_bound_s);
  }
  // Deterministic for the options.
  absl::StatusOr<LearnedModelResult> again = EvaluateLearnedModel(view, o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->profiled_s, r->profiled_s);
  EXPECT_EQ(again->online_s, r->online_s);
  // One out-of-sample error pair a step planned; the first step is the
  // prior's (the A100's 3.2x slower compute, far off), the last one's model
  // learnt from the reports of the steps before it.
  ASSERT_EQ(r->online_errors.size(), 4u);
  EXPECT_GT(r->online_errors[0].task, 0.3);
  EXPECT_GT(r->online_errors[0].step, 0.3);
  EXPECT_LT(r->online_errors.back().task, r->online_errors[0].task / 2);
  EXPECT_LT(r->online_errors.back().step, r->online_errors[0].step / 2);
  EXPECT_EQ(again->online_errors.back().task, r->online_errors.back().task);
  // The steps-to-target figure is what online_s says.
  const double limit = o.target_ratio * r->perfect_s;
  if (r->online_steps_to_target >= 0) {
    for (size_t k = r->online_steps_to_target; k < r->online_s.size(); ++k) {
      EXPECT_LE(r->online_s[k], limit);
    }
    if (r->online_steps_to_target > 0) {
      EXPECT_GT(r->online_s[r->online_steps_to_target - 1], limit);
    }
  } else {
    EXPECT_GT(r->online_s.back(), limit);
  }
}

}  // namespace
}  // namespace dcp
