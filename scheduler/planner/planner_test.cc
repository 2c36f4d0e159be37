#include "scheduler/planner/planner.h"

#include <map>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/planner/test_data.h"
#include "scheduler/eval/simulator.h"

namespace dcp {
namespace {

std::vector<int32_t> SkewedLengths(int n, uint32_t seed, int32_t longest) {
  return testing_data::ThreeTierTrace(n, seed, longest / 2, longest / 2);
}

std::vector<int64_t> AllIds(size_t n) {
  std::vector<int64_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = static_cast<int64_t>(i);
  return ids;
}

struct Cluster {
  ModelSpec model;
  int world;
  ClusterSpec cluster = ClusterSpec::H200();
};

StepPlan PlanOrDie(const Cluster& s, absl::Span<const int64_t> ids,
                   const LengthView& view) {
  PlannerOptions o;
  o.world_size = s.world;
  absl::StatusOr<Planner> planner =
      Planner::Create(CostModel::FromSpecs(s.cluster, s.model, s.world), o);
  EXPECT_TRUE(planner.ok()) << planner.status();
  absl::StatusOr<StepPlan> plan = planner->PlanStep(3, ids, view);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : StepPlan();
}

TEST(PlannerTest, PlansAreValidAndCoverEverySampleOnce) {
  ModelSpec odd = *BuiltinModel("dit-video-1.3b");  // 12 heads
  std::vector<Cluster> setups = {{*BuiltinModel("llama3-8b"), 32},
                                 {*BuiltinModel("llama3-70b"), 64},
                                 {odd, 24},  // group sizes 1, 2, 3, 4, 6, 12
                                 {*BuiltinModel("llama3-8b"), 8}};
  for (const Cluster& s : setups) {
    std::vector<int32_t> lengths = SkewedLengths(600, 11, 100000);
    LengthView view(lengths, 131072);
    std::vector<int64_t> ids = AllIds(lengths.size());
    StepPlan plan = PlanOrDie(s, ids, view);
    ReferenceCluster ref(s.cluster, s.model, s.world);
    absl::StatusOr<StepReport> report = ReplayStep(ref, plan, view);
    ASSERT_TRUE(report.ok())
        << s.model.name << " W=" << s.world << ": " << report.status();
    std::multiset<int64_t> seen;
    double weight_sum = 0;
    for (const TaskPlan& t : plan.tasks) {
      ASSERT_EQ(t.samples.size(), t.loss_weights.size());
      for (size_t k = 0; k < t.samples.size(); ++k) {
        seen.insert(t.samples[k]);
        weight_sum += t.loss_weights[k];
        EXPECT_NEAR(t.loss_weights[k],
                    static_cast<double>(view[t.samples[k]]) / report->tokens,
                    1e-15);
      }
    }
    EXPECT_EQ(seen, std::multiset<int64_t>(ids.begin(), ids.end()));
    EXPECT_NEAR(weight_sum, 1.0, 1e-9);
    // The default cost model is the reference one, so the planner's own
    // bookkeeping must predict the replay exactly.
    EXPECT_NEAR(plan.predicted_makespan_s, report->makespan_s,
                1e-9 * report->makespan_s);
    EXPECT_EQ(plan.step, 3);
  }
}

TEST(PlannerTest, GroupSizesAreTheWorldsDivisorsAndRingsOfUlyssesGroups) {
  // 24 GPUs, 12 heads: every size dividing the world (8 and 24 beyond the
  // heads), and 16 = 4 x 4 too, a ring of four Ulysses groups of 4, which
  // does not divide the world.
  Cluster s{*BuiltinModel("dit-video-1.3b"), 24};
  ASSERT_EQ(s.model.heads, 12);
  PlannerOptions o;
  o.world_size = 24;
  absl::StatusOr<Planner> planner =
      Planner::Create(CostModel::FromSpecs(s.cluster, s.model, 24), o);
  ASSERT_TRUE(planner.ok());
  const std::vector<int>& sizes = planner->group_sizes();
  EXPECT_TRUE(std::is_sorted(sizes.begin(), sizes.end()));
  for (int p = 1; p <= 24; ++p) {
    const bool listed = std::find(sizes.begin(), sizes.end(), p) != sizes.end();
    if (24 % p == 0) {
      EXPECT_TRUE(listed) << p;
    }
  }
  EXPECT_NE(std::find(sizes.begin(), sizes.end(), 16), sizes.end());
  // 4096 GPUs: rings of 12-way Ulysses groups (12 * 2^k) beside the powers
  // of two.
  o.world_size = 4096;
  absl::StatusOr<Planner> big =
      Planner::Create(CostModel::FromSpecs(s.cluster, s.model, 4096), o);
  ASSERT_TRUE(big.ok());
  for (int p : {12, 24, 768, 3072}) {
    EXPECT_NE(std::find(big->group_sizes().begin(), big->group_sizes().end(),
                        p),
              big->group_sizes().end())
        << p;
  }
}

TEST(PlannerTest, LongSequencesGetGroupsInsideANode) {
  Cluster s{*BuiltinModel("llama3-8b"), 32};
  // Enough short work that a group of 8 finishes the long one well within a
  // rank's share of the step.
  std::vector<int32_t> lengths(4000, 1000);
  lengths[7] = 120000;  // needs a group of at least 5 GPUs at r = 0
  LengthView view(lengths, 131072);
  StepPlan plan = PlanOrDie(s, AllIds(lengths.size()), view);
  bool found = false;
  for (const TaskPlan& t : plan.tasks) {
    for (int64_t id : t.samples) {
      if (id != 7) continue;
      found = true;
      EXPECT_GE(t.ranks.size(), 5u);
      EXPECT_EQ(t.ranks.front() / 8, t.ranks.back() / 8) << "spans nodes";
    }
  }
  EXPECT_TRUE(found);
}

TEST(PlannerTest, RanksGetDifferentNumbersOfMicroSteps) {
  Cluster s{*BuiltinModel("llama3-8b"), 8};
  std::vector<int32_t> lengths = SkewedLengths(300, 5, 60000);
  LengthView view(lengths, 131072);
  StepPlan plan = PlanOrDie(s, AllIds(lengths.size()), view);
  std::map<int, int> micro_steps;
  for (const TaskPlan& t : plan.tasks) {
    for (int r : t.ranks) ++micro_steps[r];
  }
  std::set<int> counts;
  for (const auto& [rank, n] : micro_steps) counts.insert(n);
  EXPECT_GT(counts.size(), 1u);
}

TEST(PlannerTest, IsDeterministic) {
  Cluster s{*BuiltinModel("llama3-70b"), 64};
  std::vector<int32_t> lengths = SkewedLengths(800, 9, 200000);
  LengthView view(lengths, 524288);
  std::vector<int64_t> ids = AllIds(lengths.size());
  StepPlan a = PlanOrDie(s, ids, view);
  StepPlan b = PlanOrDie(s, ids, view);
  ASSERT_EQ(a.tasks.size(), b.tasks.size());
  for (size_t i = 0; i < a.tasks.size(); ++i) {
    EXPECT_EQ(a.tasks[i].ranks, b.tasks[i].ranks);
    EXPECT_EQ(a.tasks[i].samples, b.tasks[i].samples);
    EXPECT_EQ(a.tasks[i].recompute, b.tasks[i].recompute);
  }
}

// A repeated threshold builds drafts equal to earlier ones, which are
// neither placed nor finished: the plan is the one without the repeats.
TEST(PlannerTest, RepeatedThresholdsPlanAsTheDistinctOnes) {
  Cluster s{*BuiltinModel("llama3-70b"), 64};
  std::vector<int32_t> lengths = SkewedLengths(2000, 5, 200000);
  LengthView view(lengths, 524288);
  std::vector<int64_t> ids = AllIds(lengths.size());
  auto plan = [&](std::vector<double> thresholds) {
    PlannerOptions o;
    o.world_size = s.world;
    o.split_thresholds = std::move(thresholds);
    o.finished_variants = 8;  // every distinct draft finished
    absl::StatusOr<Planner> planner =
        Planner::Create(CostModel::FromSpecs(s.cluster, s.model, s.world), o);
    EXPECT_TRUE(planner.ok()) << planner.status();
    absl::StatusOr<StepPlan> p = planner->PlanStep(3, ids, view);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : StepPlan();
  };
  const StepPlan distinct = plan({0.5, 1.0});
  const StepPlan repeated = plan({0.5, 0.5, 1.0, 0.5});
  ASSERT_FALSE(distinct.tasks.empty());
  EXPECT_EQ(repeated.predicted_makespan_s, distinct.predicted_makespan_s);
  ASSERT_EQ(repeated.tasks.size(), distinct.tasks.size());
  for (size_t i = 0; i < distinct.tasks.size(); ++i) {
    EXPECT_EQ(repeated.tasks[i].ranks, distinct.tasks[i].ranks);
    EXPECT_EQ(repeated.tasks[i].samples, distinct.tasks[i].samples);
    EXPECT_EQ(repeated.tasks[i].recompute, distinct.tasks[i].recompute);
  }
}

TEST(PlannerTest, ComesCloseToTheLowerBoundOnABalancedLoad) {
  Cluster s{*BuiltinModel("llama3-8b"), 32};
  std::vector<int32_t> lengths = SkewedLengths(3000, 21, 100000);
  LengthView view(lengths, 131072);
  StepPlan plan = PlanOrDie(s, AllIds(lengths.size()), view);
  ReferenceCluster ref(s.cluster, s.model, s.world);
  absl::StatusOr<StepReport> r = ReplayStep(ref, plan, view);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(r->makespan_s / r->lower_bound_s, 1.06);
}

// Where communication is free and every task costs a fixed second (a CPU
// host over loopback, say), one pack of everything over the whole world is
// the best plan there is: the planner must not do worse under its own model.
TEST(PlannerTest, NeverWorseThanOneGroupSizeForEverySequence) {
  const ModelSpec model = *BuiltinModel("llama3-8b");
  constexpr int kWorld = 8;
  const CostModel sheet = CostModel::FromSpecs(ClusterSpec::H200(), model, kWorld);
  CostModel::Coefficients c = sheet.coefficients();
  c.a2a_byte_intra = c.a2a_byte_inter = 0;
  c.a2a_fixed_intra = c.a2a_fixed_inter = 0;
  c.fixed = 1.0;
  const CostModel costs(c, model, sheet.memory_cap(), sheet.gpus_per_node());
  std::vector<int32_t> lengths = SkewedLengths(40, 5, 8000);
  LengthView view(lengths, 131072);
  PlannerOptions o;
  o.world_size = kWorld;
  absl::StatusOr<Planner> planner = Planner::Create(costs, o);
  ASSERT_TRUE(planner.ok()) << planner.status();
  const std::vector<int64_t> ids = AllIds(lengths.size());
  absl::StatusOr<StepPlan> plan = planner->PlanStep(0, ids, view);
  ASSERT_TRUE(plan.ok()) << plan.status();
  double tokens = 0, units = 0;
  for (int64_t id : ids) {
    tokens += view[id];
    units += costs.AttentionUnits(view[id]);
  }
  ASSERT_LE(tokens / kWorld, costs.MaxTokensPerGpu(0));  // One pack fits.
  const double one_pack =
      costs.TaskSecondsFromSums(kWorld, true, tokens, units, 0);
  EXPECT_LE(plan->predicted_makespan_s, one_pack + costs.SyncSeconds() + 1e-9);
}

TEST(PlannerTest, ASequenceNoGpuHoldsRunsOnARingPastTheHeads) {
  // A single head allows no Ulysses: a 60K sequence cannot fit one GPU at
  // r = 0 (about 24K tokens on 8 ranks), so it runs on a ring (u = 1) of
  // several GPUs, recomputing only if its share still does not fit; the
  // short ones run alone, without recompute.
  ModelSpec one_head = *BuiltinModel("llama3-8b");
  one_head.heads = 1;
  one_head.kv_heads = 1;
  Cluster s{one_head, 8};
  const CostModel costs = CostModel::FromSpecs(s.cluster, s.model, 8);
  ASSERT_GT(60000, costs.MaxTokensPerGpu(0));
  std::vector<int32_t> lengths = {60000, 500, 700};
  LengthView view(lengths, 131072);
  StepPlan plan = PlanOrDie(s, AllIds(lengths.size()), view);
  int long_tasks = 0;
  for (const TaskPlan& t : plan.tasks) {
    const bool has_long =
        std::find(t.samples.begin(), t.samples.end(), 0) != t.samples.end();
    const int p = static_cast<int>(t.ranks.size());
    if (has_long) {
      ++long_tasks;
      EXPECT_GT(p, 1);
      EXPECT_EQ(t.ulysses, 1);
      EXPECT_EQ(t.recompute > 0, 60000.0 / p > costs.MaxTokensPerGpu(0));
    } else {
      EXPECT_EQ(p, 1);
      EXPECT_EQ(t.recompute, 0.0);
    }
  }
  EXPECT_EQ(long_tasks, 1);
}

TEST(PlannerTest, HybridGroupsNameADegreeDividingTheHeadsAndTheGroup) {
  // Two heads on 16 GPUs and sequences that need 8 GPUs or more: every task
  // larger than the heads is Ulysses inside a ring, with a degree that
  // divides both; plain Ulysses tasks leave the degree at 0.
  ModelSpec two_heads = *BuiltinModel("llama3-8b");
  two_heads.heads = 2;
  two_heads.kv_heads = 1;
  Cluster s{two_heads, 16};
  const CostModel costs = CostModel::FromSpecs(s.cluster, s.model, 16);
  const int32_t longest = static_cast<int32_t>(7.5 * costs.MaxTokensPerGpu(1));
  std::vector<int32_t> lengths = {longest, longest / 2, 3000, 900, 400};
  LengthView view(lengths, 1 << 30);
  StepPlan plan = PlanOrDie(s, AllIds(lengths.size()), view);
  bool ring_beyond_heads = false;
  for (const TaskPlan& t : plan.tasks) {
    const int p = static_cast<int>(t.ranks.size());
    if (p > two_heads.heads) {
      ASSERT_GT(t.ulysses, 0) << "a group of " << p << " has no degree";
      ring_beyond_heads = true;
    }
    if (t.ulysses > 0) {
      EXPECT_EQ(two_heads.heads % t.ulysses, 0);
      EXPECT_EQ(p % t.ulysses, 0);
      EXPECT_LT(t.ulysses, p);
    }
  }
  EXPECT_TRUE(ring_beyond_heads);
}

TEST(PlannerTest, RejectsWhatCannotBePlanned) {
  ModelSpec m = *BuiltinModel("llama3-70b");
  PlannerOptions o;
  o.world_size = 64;
  absl::StatusOr<Planner> planner =
      Planner::Create(CostModel::FromSpecs(ClusterSpec::H200(), m, 64), o);
  ASSERT_TRUE(planner.ok());
  std::vector<int32_t> lengths = {1000, 8000000};
  LengthView view(lengths, 1 << 30);
  std::vector<int64_t> ids = {0, 1};
  absl::Status s = planner->PlanStep(0, ids, view).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("sample 1"), std::string::npos) << s;

  std::vector<int64_t> none;
  EXPECT_EQ(planner->PlanStep(0, none, view).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<int64_t> outside = {5};
  EXPECT_NE(planner->PlanStep(0, outside, view)
                .status()
                .message()
                .find("outside the length table"),
            std::string::npos);
  o.world_size = 0;
  EXPECT_FALSE(
      Planner::Create(CostModel::FromSpecs(ClusterSpec::H200(), m, 8), o).ok());
  // 70B on 8 ranks: the sharded weights and optimizer state alone overflow.
  o.world_size = 8;
  absl::StatusOr<Planner> small =
      Planner::Create(CostModel::FromSpecs(ClusterSpec::H200(), m, 8), o);
  ASSERT_TRUE(small.ok());
  std::vector<int64_t> first = {0};
  EXPECT_NE(
      small->PlanStep(0, first, view).status().message().find("static memory"),
      std::string::npos);
}

// Records the phases a step entered, in order.
class PhaseLog : public PlanPhaseObserver {
 public:
  void Enter(PlanPhase phase) override { phases.push_back(phase); }
  std::vector<PlanPhase> phases;
};

TEST(PlannerTest, TellsAnObserverEachPhaseAndPlansTheSameWithIt) {
  std::vector<int32_t> lengths = SkewedLengths(2000, 5, 100000);
  LengthView view(lengths, 131072);
  std::vector<int64_t> ids = AllIds(lengths.size());
  const ModelSpec model = *BuiltinModel("llama3-8b");
  absl::StatusOr<Planner> planner = Planner::Create(
      CostModel::FromSpecs(ClusterSpec::H200(), model, 32), {.world_size = 32});
  ASSERT_TRUE(planner.ok()) << planner.status();
  PhaseLog log;
  absl::StatusOr<StepPlan> observed = planner->PlanStep(0, ids, view, &log);
  absl::StatusOr<StepPlan> plain = planner->PlanStep(0, ids, view);
  ASSERT_TRUE(observed.ok() && plain.ok());
  // The observer changes nothing in the plan.
  ASSERT_EQ(observed->tasks.size(), plain->tasks.size());
  for (size_t t = 0; t < plain->tasks.size(); ++t) {
    EXPECT_EQ(observed->tasks[t].ranks, plain->tasks[t].ranks);
    EXPECT_EQ(observed->tasks[t].samples, plain->tasks[t].samples);
    EXPECT_EQ(observed->tasks[t].recompute, plain->tasks[t].recompute);
  }
  // Sizing first, then candidates built and one at least dealt and refined,
  // the uniform check, the emitted plan, and the end.
  ASSERT_GE(log.phases.size(), 8u);
  EXPECT_EQ(log.phases.front(), PlanPhase::kSizing);
  EXPECT_EQ(log.phases.back(), PlanPhase::kDone);
  EXPECT_EQ(log.phases[log.phases.size() - 2], PlanPhase::kEmit);
  EXPECT_EQ(log.phases[log.phases.size() - 3], PlanPhase::kUniform);
  std::set<PlanPhase> seen(log.phases.begin(), log.phases.end());
  for (PlanPhase p : {PlanPhase::kPacking, PlanPhase::kPlacement,
                      PlanPhase::kDealing, PlanPhase::kRefinement}) {
    EXPECT_TRUE(seen.count(p)) << static_cast<int>(p);
  }
}

TEST(PlannerTest, AnObserverHearsTheEndOfAFailedStep) {
  std::vector<int32_t> lengths = {100};
  LengthView view(lengths, 131072);
  absl::StatusOr<Planner> planner = Planner::Create(
      CostModel::FromSpecs(ClusterSpec::H200(), *BuiltinModel("llama3-8b"), 8),
      {.world_size = 8});
  ASSERT_TRUE(planner.ok());
  PhaseLog log;
  const std::vector<int64_t> outside = {7};  // not in the length table
  EXPECT_FALSE(planner->PlanStep(0, outside, view, &log).ok());
  ASSERT_FALSE(log.phases.empty());
  EXPECT_EQ(log.phases.back(), PlanPhase::kDone);
}

}  // namespace
}  // namespace dcp
