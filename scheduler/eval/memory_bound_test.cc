// The memory-aware lower bound (ReferenceCluster::MemoryAwareLowerBound):
// its formula, and that no plan beats it — the planner's and every
// baseline's, on the reference scenarios A-D and on random small cases, and
// hand-built hybrid plans (Ulysses inside rings, over groups larger than the
// head count and not dividing the world).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/eval/baselines.h"
#include "scheduler/eval/evaluation.h"
#include "scheduler/eval/simulator.h"
#include "scheduler/lengths/length_reader.h"
#include "scheduler/planner/planner.h"
#include "scheduler/planner/test_data.h"

namespace dcp {
namespace {

using testing_data::Lcg;
using testing_data::RoundCluster;
using testing_data::TinyModel;

// The most tokens a GPU holds at recompute `r`, from docs/COST_MODEL.md.
double TokensPerGpu(const ClusterSpec& c, const ModelSpec& m, int world,
                    double r) {
  const double d = m.hidden, layers = m.layers;
  const double free = c.MemoryCap() - 16.0 * m.TotalParams() / world;
  return free / ((1 - r) * 34 * d * layers + r * 2 * d * layers + 34 * d);
}

// The linear and attention GPU-seconds of one sequence of `s` tokens at
// recompute `r`, written out from docs/COST_MODEL.md (not from the
// simulator's code): the linear work at the GEMM efficiency of a full GPU
// (the most tokens that fit at r), the attention at the efficiency of
// chunks of `chunk` tokens.
double Compute(const ClusterSpec& c, const ModelSpec& m, int world, double s,
               double chunk, double r) {
  const double d = m.hidden, layers = m.layers;
  const double t_max = TokensPerGpu(c, m, world, r);
  const double gemm_eff =
      c.gemm_eff_max * t_max / (t_max + c.gemm_eff_half_tokens);
  const double attn_eff =
      c.attn_eff_max * chunk / (chunk + c.attn_eff_half_tokens);
  const double attn_factor = m.causal ? 0.5 : 1.0;
  return 2 * m.ParamsPerLayer() * layers * s * (3 + r) /
             (c.peak_flops * gemm_eff) +
         4 * s * s * d * layers * attn_factor * (3.5 + r) /
             (c.peak_flops * attn_eff);
}

// The GPU-seconds of the Ulysses all-to-all of a sequence of `s` tokens
// split u ways (no latency, at the faster link), over all its GPUs.
double UlyssesVolumeSeconds(const ClusterSpec& c, const ModelSpec& m, double s,
                            int u, double r) {
  if (u == 1) return 0.0;
  const double bw = std::max(c.intra_node_bw, c.inter_node_bw);
  return 2 * s * m.hidden * (2 + 2.0 * std::max(m.kv_heads, u) / m.heads) *
         (u - 1) / u / bw * m.layers * (2 + r);
}

// What the bound charges a sequence of `s` tokens run u-way Ulysses inside
// a `ring`-way ring at recompute `r`: its compute with chunks of s / ring
// and its Ulysses volume, the ring itself nothing (it may hide behind the
// task's attention); infinite when s / (u * ring) tokens do not fit a GPU
// at r.
double SequenceBoundAt(const ClusterSpec& c, const ModelSpec& m, int world,
                       double s, int u, int ring, double r) {
  if (s / (u * ring) > TokensPerGpu(c, m, world, r)) return INFINITY;
  return Compute(c, m, world, s, s / ring, r) +
         UlyssesVolumeSeconds(c, m, s, u, r);
}

// The least of SequenceBoundAt over `points` + 1 ratios in [0, 1] and every
// group of p <= world GPUs as u-way Ulysses (u dividing p and the heads)
// inside a (p / u)-way ring.
double BruteForceSequenceBound(const ClusterSpec& c, const ModelSpec& m,
                               int world, double s, int points) {
  double best = INFINITY;
  for (int p = 1; p <= world; ++p) {
    for (int u = 1; u <= p; ++u) {
      if (p % u != 0 || m.heads % u != 0) continue;
      for (int i = 0; i <= points; ++i) {
        best = std::min(best, SequenceBoundAt(c, m, world, s, u, p / u,
                                              i / double(points)));
      }
    }
  }
  return best;
}

TEST(MemoryAwareLowerBoundTest, IsTheLeastOverEveryRatioAndGroupSize) {
  // 4 GPUs of 1e7 bytes: memory binds the tiny model hard (870 tokens a GPU
  // at r = 0, 4,480 at r = 1), so the ratio matters, and 5000 tokens fit
  // only on two GPUs or more. The simulator takes each group at the least
  // ratio that holds the sequence and at r = 1 (the time is concave in r);
  // a brute force over 20,001 ratios and every (u, c) split can only come
  // out at or a little above it (at most one grid step, 5e-5 in r, off the
  // threshold).
  const ClusterSpec c = RoundCluster(1e7);
  const ModelSpec m = TinyModel();
  const ReferenceCluster cluster(c, m, 4);
  ASSERT_LT(TokensPerGpu(c, m, 4, 1.0), 5000);
  ASSERT_GT(TokensPerGpu(c, m, 4, 1.0), 2000);
  const std::vector<int64_t> lengths = {100, 700, 2000, 5000};
  double work = 0;
  for (int64_t s : lengths) {
    const double brute = BruteForceSequenceBound(c, m, 4, s, 20000);
    EXPECT_LE(cluster.SequenceBound(s), brute * (1 + 1e-12)) << s;
    EXPECT_GE(cluster.SequenceBound(s), brute * (1 - 1e-4)) << s;
    work += brute;
  }
  const double expected = work / 4 + cluster.SyncSeconds();
  EXPECT_NEAR(cluster.MemoryAwareLowerBound(lengths), expected,
              1e-4 * expected);
  EXPECT_GT(cluster.MemoryAwareLowerBound(lengths),
            cluster.LowerBound(lengths));
}

TEST(MemoryAwareLowerBoundTest, IsTheLeastOverRingsLongerThanTheHeads) {
  // Two heads on 16 GPUs of 1e7 bytes: a sequence of 20,000 tokens fits
  // only on 8 GPUs or more even at r = 1, so only rings (u <= 2) hold it,
  // over groups that need not divide the world (9, 10, 11, ...).
  const ClusterSpec c = RoundCluster(1e7);
  ModelSpec m = TinyModel();
  m.heads = 2;
  m.kv_heads = 1;
  const ReferenceCluster cluster(c, m, 16);
  const double s = 20000;
  ASSERT_GT(s / 7, TokensPerGpu(c, m, 16, 1.0));
  ASSERT_LE(s / 8, TokensPerGpu(c, m, 16, 1.0));
  ASSERT_GT(s / 8, TokensPerGpu(c, m, 16, 0.0));
  const double brute = BruteForceSequenceBound(c, m, 16, s, 20000);
  EXPECT_LE(cluster.SequenceBound(s), brute * (1 + 1e-12));
  EXPECT_GE(cluster.SequenceBound(s), brute * (1 - 1e-4));
}

TEST(MemoryAwareLowerBoundTest, ASequenceNoGpuHoldsPaysTheCheapestSplit) {
  // 5000 tokens need two GPUs even at r = 1. Split u >= 2 ways it pays at
  // least its unchunked compute plus the all-to-all of its tokens over two
  // GPUs at r = 0 (the least there is); on a ring (u = 1, c >= 2) at least
  // the compute with chunks of half its length.
  const ClusterSpec c = RoundCluster(1e7);
  const ModelSpec m = TinyModel();
  const ReferenceCluster cluster(c, m, 4);
  const double s = 5000;
  ASSERT_GT(s, TokensPerGpu(c, m, 4, 1.0));
  double ulysses = INFINITY, ring = INFINITY;
  for (int i = 0; i <= 20000; ++i) {
    const double r = i / 20000.0;
    if (s / 4 > TokensPerGpu(c, m, 4, r)) continue;  // no group holds it
    ulysses = std::min(ulysses, Compute(c, m, 4, s, s, r) +
                                    UlyssesVolumeSeconds(c, m, s, 2, 0.0));
    ring = std::min(ring, Compute(c, m, 4, s, s / 2, r));
  }
  ASSERT_LT(ulysses, INFINITY);
  EXPECT_GE(cluster.SequenceBound(s), std::min(ulysses, ring) * (1 - 1e-4));
  // Every task that could run it: 2, 3 or 4 GPUs, every Ulysses degree,
  // any ratio that fits.
  for (int p : {2, 3, 4}) {
    std::vector<int> ranks(p);
    for (int r = 0; r < p; ++r) ranks[r] = r;
    for (int u = 1; u <= p; ++u) {
      if (p % u != 0 || m.heads % u != 0) continue;
      for (int i = 0; i <= 100; ++i) {
        const double r = i / 100.0;
        const std::vector<int64_t> seq = {5000};
        const ReferenceCluster::TaskCost cost = cluster.Cost(ranks, seq, r, u);
        if (cost.memory_bytes > c.MemoryCap()) continue;
        EXPECT_GE(p * cost.total_s, cluster.SequenceBound(s))
            << "p " << p << " u " << u << " r " << r;
      }
    }
  }
}

TEST(MemoryAwareLowerBoundTest, MeetsThePlainBoundWhenMemoryIsPlentiful) {
  // With 1e15 bytes a GPU the GEMM efficiency at the memory limit is the
  // peak to within 1e-6 relative, and recompute never pays.
  const ReferenceCluster cluster(RoundCluster(1e15), TinyModel(), 4);
  const std::vector<int64_t> lengths = {100, 700, 2000, 5000};
  const double plain = cluster.LowerBound(lengths);
  EXPECT_GE(cluster.MemoryAwareLowerBound(lengths), plain);
  EXPECT_NEAR(cluster.MemoryAwareLowerBound(lengths), plain, 1e-5 * plain);
}

TEST(MemoryAwareLowerBoundTest, IsThePlainBoundWhenNothingFits) {
  // 1e6 bytes cannot hold the 1.12e6 bytes of sharded states.
  const ReferenceCluster cluster(RoundCluster(1e6), TinyModel(), 4);
  const std::vector<int64_t> lengths = {100, 700};
  EXPECT_EQ(cluster.MemoryAwareLowerBound(lengths),
            cluster.LowerBound(lengths));
}

// A task as full as memory allows at an arbitrary (off-grid) ratio: the
// closest a plan can come to the bound, and still not below it.
TEST(MemoryAwareLowerBoundTest, FullTasksAtAnyRatioDoNotBeatIt) {
  const ClusterSpec c = RoundCluster(1e7);
  const ModelSpec m = TinyModel();
  const ReferenceCluster cluster(c, m, 4);
  for (double r : {0.0, 0.13, 0.5, 0.77, 1.0}) {
    SCOPED_TRACE(testing::Message() << "recompute " << r);
    const double per_token = (1 - r) * 34 * m.hidden * m.layers +
                             r * 2 * m.hidden * m.layers + 34 * m.hidden;
    const int32_t t = static_cast<int32_t>(
        std::floor((c.MemoryCap() - 16.0 * m.TotalParams() / 4) / per_token));
    // Each of the 4 ranks runs one task of t tokens (two sequences).
    const std::vector<int32_t> table = {t / 2, t - t / 2, t / 2, t - t / 2,
                                        t / 2, t - t / 2, t / 2, t - t / 2};
    const LengthView view(table, 1 << 30);
    StepPlan plan;
    for (int rank = 0; rank < 4; ++rank) {
      plan.samples.push_back(2 * rank);
      plan.samples.push_back(2 * rank + 1);
      plan.tasks.push_back({{rank}, {2 * rank, 2 * rank + 1}, {}, r});
    }
    absl::StatusOr<StepReport> report = ReplayStep(cluster, plan, view);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_GE(report->makespan_s, report->memory_bound_s);
    EXPECT_GT(report->memory_bound_s, report->lower_bound_s);
  }
}

// A model of two heads, so every group of more than two GPUs is a ring.
ModelSpec TwoHeadModel() {
  ModelSpec m = TinyModel();
  m.heads = 2;
  m.kv_heads = 1;
  return m;
}

// Hybrid tasks as full as memory allows, one sequence each, over groups of
// 4 and 8 on 8 GPUs (u = 1 or 2 of the 2 heads): the closest a hybrid plan
// comes to the bound, and still not below it.
TEST(MemoryAwareLowerBoundTest, FullHybridTasksDoNotBeatIt) {
  const ClusterSpec c = RoundCluster(1e7);
  const ModelSpec m = TwoHeadModel();
  const int world = 8;
  const ReferenceCluster cluster(c, m, world);
  struct Split {
    int u, ring;
  };
  for (double r : {0.0, 0.13, 0.5, 1.0}) {
    for (Split split : {Split{1, 4}, Split{2, 2}, Split{1, 8}, Split{2, 4}}) {
      const int p = split.u * split.ring;
      SCOPED_TRACE(testing::Message() << "recompute " << r << " u " << split.u
                                      << " c " << split.ring);
      const int32_t s = static_cast<int32_t>(
          std::floor(p * TokensPerGpu(c, m, world, r) * (1 - 1e-9)));
      const std::vector<int32_t> table(world / p, s);
      const LengthView view(table, 1 << 30);
      StepPlan plan;
      for (int k = 0; k < world / p; ++k) {
        plan.samples.push_back(k);
        std::vector<int> ranks(p);
        for (int i = 0; i < p; ++i) ranks[i] = k * p + i;
        plan.tasks.push_back({ranks, {k}, {}, r, split.u});
      }
      absl::StatusOr<StepReport> report = ReplayStep(cluster, plan, view);
      ASSERT_TRUE(report.ok()) << report.status();
      EXPECT_GE(report->makespan_s, report->memory_bound_s);
      EXPECT_GT(report->memory_bound_s, report->lower_bound_s);
      if (split.u > 1) continue;
      // Without Ulysses the bound's charge for this very split is the
      // task's work less its overhead and its ring's exposed part (the
      // GEMMs run at exactly the tokens that fit): the bound is no higher.
      const std::vector<int64_t> seq = {s};
      const ReferenceCluster::TaskCost cost =
          cluster.Cost(plan.tasks[0].ranks, seq, r, 1);
      const double exposed = std::max(0.0, cost.ring_s - cost.attention_s);
      EXPECT_LE(report->memory_bound_s,
                (report->makespan_s - cost.overhead_s - exposed) * (1 + 1e-9));
    }
  }
}

// Random hybrid plans: consecutive blocks of ranks of any size (most not
// dividing the world, many larger than the heads) with a random Ulysses
// degree, their samples as long as memory allows at r = 1 or shorter, each
// task at the least recompute ratio that holds it or above, in two waves.
TEST(MemoryAwareLowerBoundTest, NoRandomHybridPlanBeatsIt) {
  int checked = 0, rings_beyond_heads = 0;
  bool memory_binds = false;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    Lcg rng(seed);
    ModelSpec m = TinyModel();
    m.layers = 1 + static_cast<int>(rng.Next() % 4);
    m.hidden = 64 * (1 + static_cast<int>(rng.Next() % 8));
    m.heads = rng.Next() % 2 == 0 ? 2 : 4;
    m.kv_heads = m.heads / (rng.Next() % 2 == 0 ? 1 : 2);
    m.ffn = m.hidden * (2 + static_cast<int>(rng.Next() % 3));
    m.causal = rng.Next() % 2 == 0;
    const int world = rng.Next() % 2 == 0 ? 8 : 12;
    const double per_token = 35.0 * m.hidden * m.layers;
    const double hbm =
        16.0 * m.TotalParams() / world +
        per_token * (200 + static_cast<double>(rng.Next() % 3000));
    const ClusterSpec c = RoundCluster(hbm);
    const ReferenceCluster cluster(c, m, world);
    const double d = m.hidden, layers = m.layers;
    const double free = c.MemoryCap() - 16.0 * m.TotalParams() / world;
    std::vector<int32_t> table;
    StepPlan plan;
    for (int wave = 0; wave < 2; ++wave) {
      for (int first = 0; first < world;) {
        const int p = 1 + static_cast<int>(rng.Next() % (world - first));
        std::vector<int> us;
        for (int u = 1; u <= p; ++u) {
          if (p % u == 0 && m.heads % u == 0) us.push_back(u);
        }
        const int u = us[rng.Next() % us.size()];
        rings_beyond_heads += p > m.heads;
        TaskPlan task;
        for (int i = 0; i < p; ++i) task.ranks.push_back(first + i);
        task.ulysses = rng.Next() % 4 == 0 && u == p ? 0 : u;
        // Up to 3 samples sharing up to all the tokens the group holds.
        const int n = 1 + static_cast<int>(rng.Next() % 3);
        const double room = p * TokensPerGpu(c, m, world, 1.0) * (1 - 1e-9);
        double tokens = 0;
        for (int k = 0; k < n; ++k) {
          const double share = (1 + rng.Next() % 1000) / 1000.0;
          const int32_t len =
              std::max<int32_t>(1, static_cast<int32_t>(room / n * share));
          task.samples.push_back(static_cast<int64_t>(table.size()));
          plan.samples.push_back(static_cast<int64_t>(table.size()));
          table.push_back(len);
          tokens += len;
        }
        // The least ratio at which tokens / p fit, or up to 1 above it.
        const double least = std::clamp(
            (34 * d * layers + 34 * d - free * p / tokens) / (32 * d * layers),
            0.0, 1.0);
        task.recompute = std::min(
            1.0, least + (1 - least) * (rng.Next() % 3 == 0
                                            ? (rng.Next() % 1000) / 1000.0
                                            : 1e-9));
        plan.tasks.push_back(std::move(task));
        first += p;
      }
    }
    const LengthView view(table, 1 << 30);
    absl::StatusOr<StepReport> report = ReplayStep(cluster, plan, view);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_GE(report->makespan_s, report->memory_bound_s);
    memory_binds |= report->memory_bound_s > 1.01 * report->lower_bound_s;
    ++checked;
  }
  EXPECT_EQ(checked, 150);
  EXPECT_GT(rings_beyond_heads, 150);
  EXPECT_TRUE(memory_binds);
}

// Every plan of every planner in the result stays at or above both bounds,
// step by step.
void ExpectNoPlanBeatsTheBounds(const EvaluationResult& r) {
  ASSERT_EQ(r.memory_bound_step_s.size(), static_cast<size_t>(r.steps));
  std::vector<const PlannerFigures*> all = {&r.dcp};
  for (const PlannerFigures& b : r.baselines) all.push_back(&b);
  ASSERT_EQ(all.size(), 4u);  // dcp and three baselines
  for (const PlannerFigures* f : all) {
    ASSERT_EQ(f->step_s.size(), static_cast<size_t>(r.steps)) << f->name;
    for (int i = 0; i < r.steps; ++i) {
      EXPECT_GE(r.memory_bound_step_s[i], r.lower_bound_step_s[i]);
      EXPECT_GE(f->step_s[i], r.memory_bound_step_s[i])
          << f->name << " step " << i;
    }
  }
}

struct Scenario {
  const char* model;
  int world_size;
  const char* trace;
  int64_t window;
  int64_t tokens_per_step;
};

TEST(MemoryAwareLowerBoundTest, NoPlanBeatsItInTheReferenceScenarios) {
  // Scenarios A-D of dcp-bench, two steps each.
  const Scenario scenarios[] = {
      {"llama3-8b", 32, "wikipedia.txt", 131072, 2097152},
      {"llama3-8b", 32, "longctx_wlb.txt", 524288, 4194304},
      {"dit-video-1.3b", 32, "video_balanced.txt", 262144, 4194304},
      {"llama3-70b", 64, "wikipedia.txt", 524288, 4194304},
  };
  for (const Scenario& sc : scenarios) {
    SCOPED_TRACE(testing::Message() << sc.model << " on " << sc.trace);
    LengthSourceOptions source;
    source.path = std::string("data/lengths/") + sc.trace;
    absl::StatusOr<std::vector<int32_t>> lengths = ReadAllLengths(source);
    ASSERT_TRUE(lengths.ok()) << lengths.status();
    EvaluationOptions o;
    o.model = *BuiltinModel(sc.model);
    o.world_size = sc.world_size;
    o.window = sc.window;
    o.tokens_per_step = sc.tokens_per_step;
    o.steps = 2;
    int64_t fake_ns = 0;
    o.now_ns = [&fake_ns] { return fake_ns += 1000; };
    absl::StatusOr<EvaluationResult> r =
        Evaluate(LengthView(*lengths, sc.window), o);
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectNoPlanBeatsTheBounds(*r);
  }
}

// A random small model: 1-4 layers, hidden 64-512, 4 or 8 heads.
ModelSpec RandomModel(Lcg& rng) {
  ModelSpec m = TinyModel();
  m.layers = 1 + static_cast<int>(rng.Next() % 4);
  m.hidden = 64 * (1 + static_cast<int>(rng.Next() % 8));
  m.heads = rng.Next() % 2 == 0 ? 4 : 8;
  m.kv_heads = m.heads / (rng.Next() % 2 == 0 ? 1 : 2);
  m.ffn = m.hidden * (2 + static_cast<int>(rng.Next() % 3));
  m.causal = rng.Next() % 2 == 0;
  return m;
}

// Replays `plan` (when it could be made) and checks it against the bound;
// returns whether a plan was checked.
bool CheckPlan(const ReferenceCluster& cluster, const LengthView& view,
               const absl::StatusOr<StepPlan>& plan, const std::string& who) {
  if (!plan.ok()) return false;  // that configuration does not fit
  absl::StatusOr<StepReport> report = ReplayStep(cluster, *plan, view);
  EXPECT_TRUE(report.ok()) << who << ": " << report.status();
  if (!report.ok()) return false;
  EXPECT_GE(report->makespan_s, report->memory_bound_s) << who;
  return true;
}

// Plans one random step with the planner and with every static and dynamic
// CP configuration on the recompute grid; returns the plans checked.
int CheckRandomCase(uint64_t seed, bool* memory_binds) {
  Lcg rng(seed);
  const ModelSpec m = RandomModel(rng);
  const int world = 2 << (rng.Next() % 3);  // 2, 4 or 8
  // Per-GPU memory from a few hundred to ~10^5 tokens at r = 0.
  const double per_token = 35.0 * m.hidden * m.layers;
  const double hbm =
      16.0 * m.TotalParams() / world +
      per_token * (300 + static_cast<double>(rng.Next() % 100000));
  const ClusterSpec c = RoundCluster(hbm);
  const ReferenceCluster cluster(c, m, world);
  const std::vector<int32_t> table =
      testing_data::UniformTrace(64, 16, 4000, rng.Next());
  // The window is the longest length: the baselines must fit it.
  const LengthView view(table, 4000);
  std::vector<int64_t> samples(table.size());
  for (size_t i = 0; i < samples.size(); ++i) samples[i] = i;
  std::vector<int64_t> lengths(table.begin(), table.end());
  *memory_binds |= cluster.MemoryAwareLowerBound(lengths) >
                   1.01 * cluster.LowerBound(lengths);
  int checked = 0;
  absl::StatusOr<Planner> planner =
      Planner::Create(CostModel::FromSpecs(c, m, world), {.world_size = world});
  if (planner.ok()) {
    checked +=
        CheckPlan(cluster, view, planner->PlanStep(0, samples, view), "dcp");
  }
  for (int k = 0; k <= m.layers; ++k) {
    const double r = static_cast<double>(k) / m.layers;
    for (StaticConfig config : StaticShapes(cluster)) {
      config.recompute = r;
      for (bool balanced : {false, true}) {
        checked += CheckPlan(
            cluster, view,
            PlanStatic(cluster, view, 0, samples, config, balanced),
            "static p=" + std::to_string(config.group_size) +
                " u=" + std::to_string(config.ulysses) +
                " r=" + std::to_string(r));
      }
    }
    checked += CheckPlan(cluster, view,
                         PlanDynamicCp(cluster, view, 0, samples, {r, 0}),
                         "dynamic_cp r=" + std::to_string(r));
  }
  return checked;
}

TEST(MemoryAwareLowerBoundTest, NoPlanBeatsItOnRandomSmallCases) {
  int checked = 0;
  bool memory_binds = false;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    checked += CheckRandomCase(seed, &memory_binds);
  }
  // The property was exercised: many plans, some where memory binds.
  EXPECT_GT(checked, 500);
  EXPECT_TRUE(memory_binds);
}

}  // namespace
}  // namespace dcp
