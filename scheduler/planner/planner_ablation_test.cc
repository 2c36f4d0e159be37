// The ablation options of PlannerOptions: each changes what it says, and
// with all of them off the planner keeps the faster of its two candidates.

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/eval/simulator.h"
#include "scheduler/planner/planner.h"
#include "scheduler/planner/test_data.h"

namespace dcp {
namespace {

std::vector<int64_t> AllIds(size_t n) {
  std::vector<int64_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = static_cast<int64_t>(i);
  return ids;
}

// A step with short, medium and long sequences (to 100K tokens): on
// llama3-8b over 32 GPUs it needs groups of several sizes and recompute.
std::vector<int32_t> MixedLengths() {
  return testing_data::ThreeTierTrace(600, 11, 50000, 50000);
}

StepPlan PlanOrDie(const CostModel& costs, PlannerOptions o, int world,
                   const std::vector<int32_t>& lengths) {
  o.world_size = world;
  absl::StatusOr<Planner> planner = Planner::Create(costs, o);
  EXPECT_TRUE(planner.ok()) << planner.status();
  if (!planner.ok()) return StepPlan();
  const std::vector<int64_t> ids = AllIds(lengths.size());
  absl::StatusOr<StepPlan> plan =
      planner->PlanStep(0, ids, LengthView(lengths, 131072));
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : StepPlan();
}

// The reference cluster accepts the plan, it holds every sample once, and
// (the cost model being the reference one) the planner predicted its time.
void ExpectValid(const ModelSpec& model, int world, const StepPlan& plan,
                 const std::vector<int32_t>& lengths) {
  const LengthView view(lengths, 131072);
  ReferenceCluster ref(ClusterSpec::H200(), model, world);
  absl::StatusOr<StepReport> report = ReplayStep(ref, plan, view);
  ASSERT_TRUE(report.ok()) << report.status();
  std::multiset<int64_t> seen;
  for (const TaskPlan& t : plan.tasks) {
    EXPECT_EQ(t.samples.size(), t.loss_weights.size());
    seen.insert(t.samples.begin(), t.samples.end());
  }
  const std::vector<int64_t> ids = AllIds(lengths.size());
  EXPECT_EQ(seen, std::multiset<int64_t>(ids.begin(), ids.end()));
  EXPECT_NEAR(plan.predicted_makespan_s, report->makespan_s,
              1e-9 * report->makespan_s);
}

std::map<int, int> MicroSteps(const StepPlan& plan) {
  std::map<int, int> n;
  for (const TaskPlan& t : plan.tasks) {
    for (int r : t.ranks) ++n[r];
  }
  return n;
}

std::set<double> Ratios(const StepPlan& plan) {
  std::set<double> ratios;
  for (const TaskPlan& t : plan.tasks) ratios.insert(t.recompute);
  return ratios;
}

std::set<size_t> SplitSizes(const StepPlan& plan) {
  std::set<size_t> sizes;
  for (const TaskPlan& t : plan.tasks) {
    if (t.ranks.size() > 1) sizes.insert(t.ranks.size());
  }
  return sizes;
}

bool SameTasks(const StepPlan& a, const StepPlan& b) {
  if (a.tasks.size() != b.tasks.size()) return false;
  for (size_t j = 0; j < a.tasks.size(); ++j) {
    if (a.tasks[j].ranks != b.tasks[j].ranks ||
        a.tasks[j].samples != b.tasks[j].samples ||
        a.tasks[j].recompute != b.tasks[j].recompute ||
        a.tasks[j].ulysses != b.tasks[j].ulysses) {
      return false;
    }
  }
  return true;
}

struct Job {
  ModelSpec model;
  int world;
  CostModel costs;
};

Job Reference(int world) {
  const ModelSpec model = *BuiltinModel("llama3-8b");
  return {model, world,
          CostModel::FromSpecs(ClusterSpec::H200(), model, world)};
}

// Costs where one pack over every GPU is fastest (free all-to-all, a large
// cost per task): a uniform candidate beats the search.
Job UniformFriendly() {
  Job s = Reference(8);
  CostModel::Coefficients c = s.costs.coefficients();
  c.a2a_byte_intra = c.a2a_byte_inter = 0;
  c.a2a_fixed_intra = c.a2a_fixed_inter = 0;
  c.fixed = 1.0;
  s.costs =
      CostModel(c, s.model, s.costs.memory_cap(), s.costs.gpus_per_node());
  return s;
}

TEST(PlannerAblationTest, DefaultKeepsTheFasterOfSearchAndUniform) {
  struct Case {
    Job setup;
    std::vector<int32_t> lengths;
    PlanOrigin expected;
  };
  std::vector<Case> cases = {
      {Reference(32), MixedLengths(), PlanOrigin::kSearch},
      {UniformFriendly(), testing_data::ThreeTierTrace(40, 5, 4000, 4000),
       PlanOrigin::kUniform}};
  for (const Case& c : cases) {
    const Job& s = c.setup;
    PlannerOptions o;
    const StepPlan both = PlanOrDie(s.costs, o, s.world, c.lengths);
    o.candidates = PlanCandidates::kSearchOnly;
    const StepPlan search = PlanOrDie(s.costs, o, s.world, c.lengths);
    o.candidates = PlanCandidates::kUniformOnly;
    const StepPlan uniform = PlanOrDie(s.costs, o, s.world, c.lengths);
    EXPECT_EQ(both.origin, c.expected);
    EXPECT_EQ(search.origin, PlanOrigin::kSearch);
    EXPECT_EQ(uniform.origin, PlanOrigin::kUniform);
    // The two candidates differ, and the default is exactly the faster.
    EXPECT_FALSE(SameTasks(search, uniform));
    const bool uniform_faster =
        uniform.predicted_makespan_s < search.predicted_makespan_s;
    EXPECT_EQ(uniform_faster, c.expected == PlanOrigin::kUniform);
    EXPECT_TRUE(SameTasks(both, uniform_faster ? uniform : search));
    EXPECT_EQ(both.predicted_makespan_s, uniform_faster
                                             ? uniform.predicted_makespan_s
                                             : search.predicted_makespan_s);
  }
}

TEST(PlannerAblationTest, UniformOnlyUsesOneGroupSizeForEveryTask) {
  const Job s = Reference(32);
  const std::vector<int32_t> lengths = MixedLengths();
  PlannerOptions o;
  o.candidates = PlanCandidates::kUniformOnly;
  const StepPlan plan = PlanOrDie(s.costs, o, s.world, lengths);
  std::set<size_t> sizes;
  for (const TaskPlan& t : plan.tasks) sizes.insert(t.ranks.size());
  EXPECT_EQ(sizes.size(), 1u);
  ExpectValid(s.model, s.world, plan, lengths);
}

TEST(PlannerAblationTest, PerStepRecomputeGivesEveryTaskOneRatio) {
  const Job s = Reference(32);
  const std::vector<int32_t> lengths = MixedLengths();
  const StepPlan by_task = PlanOrDie(s.costs, {}, s.world, lengths);
  ASSERT_GT(Ratios(by_task).size(), 1u);  // else the test shows nothing
  PlannerOptions o;
  o.recompute_choice = RecomputeChoice::kPerStep;
  const StepPlan plan = PlanOrDie(s.costs, o, s.world, lengths);
  EXPECT_EQ(Ratios(plan).size(), 1u);
  ExpectValid(s.model, s.world, plan, lengths);
}

TEST(PlannerAblationTest, FixedRecomputeIsTheGivenRatioRoundedUp) {
  const Job s = Reference(32);
  const std::vector<int32_t> lengths = MixedLengths();
  for (double r : {1.0, 0.5, 0.3}) {
    PlannerOptions o;
    o.recompute_choice = RecomputeChoice::kFixed;
    o.fixed_recompute = r;
    const StepPlan plan = PlanOrDie(s.costs, o, s.world, lengths);
    const int layers = s.model.layers;
    const double grid = std::ceil(r * layers - 1e-9) / layers;
    EXPECT_EQ(Ratios(plan), std::set<double>{grid}) << r;
    ExpectValid(s.model, s.world, plan, lengths);
  }
  PlannerOptions bad;
  bad.world_size = 32;
  bad.fixed_recompute = 1.5;
  EXPECT_FALSE(Planner::Create(s.costs, bad).ok());
}

TEST(PlannerAblationTest, EvenMicroStepsGiveEveryRankTheSameCount) {
  for (int world : {8, 32}) {
    const Job s = Reference(world);
    const std::vector<int32_t> lengths =
        testing_data::ThreeTierTrace(300 * world / 8, 5, 30000, 30000);
    std::set<int> uneven;
    for (const auto& [rank, n] :
         MicroSteps(PlanOrDie(s.costs, {}, world, lengths))) {
      uneven.insert(n);
    }
    ASSERT_GT(uneven.size(), 1u);  // the default plan is uneven
    PlannerOptions o;
    o.even_micro_steps = true;
    const StepPlan plan = PlanOrDie(s.costs, o, world, lengths);
    const std::map<int, int> n = MicroSteps(plan);
    ASSERT_EQ(n.size(), static_cast<size_t>(world));
    std::set<int> counts;
    for (const auto& [rank, c] : n) counts.insert(c);
    EXPECT_EQ(counts.size(), 1u) << "W=" << world;
    ExpectValid(s.model, world, plan, lengths);
  }
}

TEST(PlannerAblationTest, OneGroupSizeSplitsSequencesOverOneSizeAStep) {
  const Job s = Reference(32);
  const std::vector<int32_t> lengths = MixedLengths();
  ASSERT_GT(SplitSizes(PlanOrDie(s.costs, {}, s.world, lengths)).size(), 1u);
  PlannerOptions o;
  o.one_group_size = true;
  const StepPlan plan = PlanOrDie(s.costs, o, s.world, lengths);
  EXPECT_EQ(SplitSizes(plan).size(), 1u);
  ExpectValid(s.model, s.world, plan, lengths);
}

TEST(PlannerAblationTest, OptionsCombine) {
  // Every option at once: each still does what it says.
  const Job s = Reference(32);
  const std::vector<int32_t> lengths = MixedLengths();
  PlannerOptions o;
  o.recompute_choice = RecomputeChoice::kFixed;
  o.even_micro_steps = true;
  o.one_group_size = true;
  o.candidates = PlanCandidates::kSearchOnly;
  const StepPlan plan = PlanOrDie(s.costs, o, s.world, lengths);
  EXPECT_EQ(plan.origin, PlanOrigin::kSearch);
  EXPECT_EQ(Ratios(plan), std::set<double>{1.0});
  EXPECT_LE(SplitSizes(plan).size(), 1u);
  std::set<int> counts;
  for (const auto& [rank, c] : MicroSteps(plan)) counts.insert(c);
  EXPECT_EQ(counts.size(), 1u);
  ExpectValid(s.model, s.world, plan, lengths);
}

}  // namespace
}  // namespace dcp
