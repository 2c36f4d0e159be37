#include "scheduler/planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "scheduler/eval/simulator.h"

namespace dcp {
namespace {

TEST(CostModelTest, FromSpecsAgreesWithTheReferenceCluster) {
  for (const char* name : {"llama3-8b", "llama3-70b", "dit-video-1.3b"}) {
    ModelSpec m = *BuiltinModel(name);
    ReferenceCluster ref(ClusterSpec::H200(), m, 32);
    CostModel model = CostModel::FromSpecs(ClusterSpec::H200(), m, 32);
    std::mt19937 rng(7);
    for (int trial = 0; trial < 50; ++trial) {
      const int p = 1 << (rng() % 3);  // 1, 2, 4: divides every head count
      const int first = (rng() % 8) * p;
      std::vector<int> ranks;
      for (int k = 0; k < p; ++k) ranks.push_back(first + k);
      std::vector<int64_t> lengths;
      for (int k = 0, n = 1 + rng() % 5; k < n; ++k) {
        lengths.push_back(1 + rng() % 50000);
      }
      const double r = (rng() % (m.layers + 1)) / static_cast<double>(m.layers);
      const ReferenceCluster::TaskCost truth = ref.Cost(ranks, lengths, r);
      const double predicted =
          model.TaskSeconds(p, ref.IntraNode(ranks), lengths, r);
      EXPECT_NEAR(predicted, truth.total_s, 1e-9 * truth.total_s) << name;
      double tokens = 0;
      for (int64_t s : lengths) tokens += s;
      EXPECT_NEAR(model.MemoryBytes(tokens / p, r), truth.memory_bytes,
                  1e-9 * truth.memory_bytes);
    }
    EXPECT_NEAR(model.SyncSeconds(), ref.SyncSeconds(), 1e-12);
  }
}

TEST(CostModelTest, FromSpecsAgreesWithTheReferenceClusterOnHybridGroups) {
  // Groups of any size on ranks aligned to it, u-way Ulysses (u dividing
  // the heads, the group and a node's 8 GPUs, so no subgroup straddles
  // nodes) inside a ring of p / u: one long sequence (attention hides the
  // ring) or many short ones (the ring shows).
  for (const char* name : {"llama3-8b", "llama3-70b", "dit-video-1.3b"}) {
    ModelSpec m = *BuiltinModel(name);
    ReferenceCluster ref(ClusterSpec::H200(), m, 32);
    CostModel model = CostModel::FromSpecs(ClusterSpec::H200(), m, 32);
    std::mt19937 rng(11);
    int rings = 0, ring_shows = 0;
    for (int trial = 0; trial < 200; ++trial) {
      const int sizes[] = {2, 3, 4, 6, 8, 12, 16, 32};
      const int p = sizes[rng() % 8];
      std::vector<int> us;
      for (int u = 1; u <= p; ++u) {
        if (p % u == 0 && m.heads % u == 0 && 8 % u == 0) us.push_back(u);
      }
      const int u = us[rng() % us.size()];
      const int first = (rng() % (32 / p)) * p;
      std::vector<int> ranks;
      for (int k = 0; k < p; ++k) ranks.push_back(first + k);
      std::vector<int64_t> lengths;
      if (rng() % 2 == 0) {
        lengths.push_back(1 + rng() % 500000);
      } else {
        for (int k = 0, n = 1 + rng() % 40; k < n; ++k) {
          lengths.push_back(1 + rng() % 3000);
        }
      }
      const double r = (rng() % (m.layers + 1)) / static_cast<double>(m.layers);
      const ReferenceCluster::TaskCost truth = ref.Cost(ranks, lengths, r, u);
      const double predicted =
          model.TaskSeconds(p, ref.IntraNode(ranks), lengths, r, u);
      EXPECT_NEAR(predicted, truth.total_s, 1e-9 * truth.total_s)
          << name << " p " << p << " u " << u;
      rings += u < p;
      ring_shows += truth.ring_s > truth.attention_s;
    }
    EXPECT_GT(rings, 50) << name;
    EXPECT_GT(ring_shows, 10) << name;
  }
}

TEST(CostModelTest, RingPassesThatDoNotOverlapAddToAttention) {
  // A cluster whose ring passes do not overlap attention (a CPU host):
  // the planner's model and the simulator both charge attention + ring,
  // and a task that holds a ring costs more than the overlapped model's
  // by exactly the shorter of the two.
  ModelSpec m = *BuiltinModel("llama3-8b");
  ClusterSpec host = ClusterSpec::H200();
  host.ring_overlaps_attention = false;
  ReferenceCluster ref(host, m, 32);
  CostModel model = CostModel::FromSpecs(host, m, 32);
  CostModel overlapped = CostModel::FromSpecs(ClusterSpec::H200(), m, 32);
  EXPECT_FALSE(model.coefficients().ring_overlaps_attention);
  std::mt19937 rng(13);
  for (int trial = 0; trial < 100; ++trial) {
    const int p = 2 << (rng() % 3);               // 2, 4, 8
    const int u = p == 2 ? 1 : 1 << (rng() % 2);  // a ring of p / u > 1
    std::vector<int> ranks;
    for (int k = 0; k < p; ++k) ranks.push_back(k);
    std::vector<int64_t> lengths;
    for (int k = 0, n = 1 + rng() % 20; k < n; ++k) {
      lengths.push_back(1 + rng() % 40000);
    }
    const double r = (rng() % 5) / 4.0;
    const ReferenceCluster::TaskCost truth = ref.Cost(ranks, lengths, r, u);
    const double predicted = model.TaskSeconds(p, true, lengths, r, u);
    EXPECT_NEAR(predicted, truth.total_s, 1e-9 * truth.total_s);
    ASSERT_GT(truth.ring_s, 0);
    const double hidden = std::min(truth.attention_s, truth.ring_s);
    EXPECT_NEAR(predicted - overlapped.TaskSeconds(p, true, lengths, r, u),
                hidden, 1e-9 * truth.total_s);
  }
}

TEST(CostModelTest, MaxTokensPerGpuIsTheMemoryBoundary) {
  ModelSpec m = *BuiltinModel("llama3-8b");
  CostModel model = CostModel::FromSpecs(ClusterSpec::H200(), m, 32);
  for (double r : {0.0, 0.5, 1.0}) {
    const double t = model.MaxTokensPerGpu(r);
    EXPECT_NEAR(model.MemoryBytes(t, r), model.memory_cap(), 1.0);
  }
  EXPECT_LT(model.MaxTokensPerGpu(0.0), model.MaxTokensPerGpu(1.0));
}

// Observations drawn from a "true" cluster that differs from the data sheet.
// With `rings`, half the groups are rings (u = 1), some of packs of short
// sequences, whose ring passes outlast their attention.
std::vector<TaskObservation> Observe(const CostModel& truth, int n,
                                     uint32_t seed, bool rings = false) {
  std::mt19937 rng(seed);
  std::vector<TaskObservation> out;
  for (int i = 0; i < n; ++i) {
    TaskObservation o;
    o.group_size = 1 << (rng() % 4);
    o.intra_node = rng() % 4 != 0 || o.group_size == 1;
    o.recompute = (rng() % 5) / 4.0;
    const bool ring = rings && o.group_size > 1 && rng() % 2 == 0;
    if (ring) o.ulysses = 1;
    const bool short_ones = ring && rng() % 2 == 0;
    for (int k = 0, m = short_ones ? 20 : 1 + rng() % 4; k < m; ++k) {
      o.lengths.push_back(short_ones ? 64 + rng() % 1000 : 256 + rng() % 60000);
    }
    o.seconds = truth.TaskSeconds(o.group_size, o.intra_node, o.lengths,
                                  o.recompute, o.ulysses);
    out.push_back(o);
  }
  return out;
}

TEST(CostModelTest, FitRecoversCoefficientsFromTimings) {
  ModelSpec m = *BuiltinModel("llama3-8b");
  CostModel sheet = CostModel::FromSpecs(ClusterSpec::H200(), m, 32);
  CostModel::Coefficients c = sheet.coefficients();
  c.lin *= 1.3;
  c.attn *= 0.8;
  c.a2a_byte_intra *= 2.0;
  c.a2a_byte_inter *= 1.5;
  c.fixed *= 3.0;
  CostModel truth(c, m, sheet.memory_cap(), 8);
  std::vector<TaskObservation> train = Observe(truth, 400, 1);
  std::vector<TaskObservation> test = Observe(truth, 200, 2);
  const double before = sheet.MeanRelativeError(test);
  absl::StatusOr<CostModel> fitted = sheet.Fit(train, /*prior_weight=*/1e-3);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  const double after = fitted->MeanRelativeError(test);
  EXPECT_GT(before, 0.05);
  EXPECT_LT(after, 0.01) << "before " << before;
  EXPECT_NEAR(fitted->coefficients().lin / c.lin, 1.0, 0.02);
  EXPECT_NEAR(fitted->coefficients().attn / c.attn, 1.0, 0.02);
}

TEST(CostModelTest, FitLearnsTheRingsTermsFromRingTasks) {
  // A ring twice as slow per byte across nodes and with three times the
  // latency inside one as the sheet says: a fit to ring tasks among others
  // predicts fresh ones (rings included) within 1%.
  ModelSpec m = *BuiltinModel("llama3-8b");
  CostModel sheet = CostModel::FromSpecs(ClusterSpec::H200(), m, 32);
  CostModel::Coefficients c = sheet.coefficients();
  c.lin *= 1.2;
  c.ring_byte_inter *= 2.0;
  c.ring_byte_intra *= 1.5;
  c.ring_fixed_intra *= 3.0;
  CostModel truth(c, m, sheet.memory_cap(), 8);
  std::vector<TaskObservation> train = Observe(truth, 600, 3, true);
  std::vector<TaskObservation> test = Observe(truth, 300, 4, true);
  int ring_bound = 0;
  for (const TaskObservation& o : test) {
    double tokens = 0, units = 0;
    for (int64_t s : o.lengths) {
      tokens += s;
      units += truth.AttentionUnits(s);
    }
    double attention = 0, ring = 0;
    truth.AttentionAndRing(o.group_size, o.intra_node, tokens, units,
                           o.recompute, o.ulysses, &attention, &ring);
    ring_bound += ring > attention;
  }
  ASSERT_GT(ring_bound, 20);
  const double before = sheet.MeanRelativeError(test);
  absl::StatusOr<CostModel> fitted = sheet.Fit(train, /*prior_weight=*/1e-3);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_GT(before, 0.05);
  EXPECT_LT(fitted->MeanRelativeError(test), 0.01) << "before " << before;
}

// A truth whose ring passes cost four times what the sheet says, in the
// form `overlaps`: rings observed among other tasks (600 to fit, 300 to
// judge).
struct RingTruth {
  CostModel truth;
  std::vector<TaskObservation> train, test, test_rings;
};
RingTruth RingPassesFourTimesTheSheet(const ModelSpec& m, bool overlaps) {
  ClusterSpec cluster = ClusterSpec::H200();
  cluster.ring_overlaps_attention = overlaps;
  const CostModel sheet = CostModel::FromSpecs(cluster, m, 32);
  CostModel::Coefficients c = sheet.coefficients();
  c.ring_byte_intra *= 4.0;
  c.ring_fixed_intra *= 4.0;
  c.ring_byte_inter *= 4.0;
  c.ring_fixed_inter *= 4.0;
  RingTruth t{CostModel(c, m, sheet.memory_cap(), 8), {}, {}, {}};
  t.train = Observe(t.truth, 600, 7, true);
  t.test = Observe(t.truth, 300, 8, true);
  for (const TaskObservation& o : t.test) {
    if (o.ulysses == 1) t.test_rings.push_back(o);
  }
  return t;
}

TEST(CostModelTest, FitChargesRingPassesThatDoNotOverlap) {
  // Passes that add to attention (a CPU host): said so, the fit predicts
  // fresh rings within 1% and keeps the form.
  ModelSpec m = *BuiltinModel("llama3-8b");
  const RingTruth t = RingPassesFourTimesTheSheet(m, /*overlaps=*/false);
  ASSERT_GT(t.test_rings.size(), 50u);
  ClusterSpec host = ClusterSpec::H200();
  host.ring_overlaps_attention = false;
  const CostModel sheet = CostModel::FromSpecs(host, m, 32);
  absl::StatusOr<CostModel> fitted = sheet.Fit(t.train, /*prior_weight=*/1e-3);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_FALSE(fitted->coefficients().ring_overlaps_attention);
  EXPECT_GT(sheet.MeanRelativeError(t.test_rings), 0.05);
  EXPECT_LT(fitted->MeanRelativeError(t.test_rings), 0.01);
  EXPECT_LT(fitted->MeanRelativeError(t.test), 0.01);
}

TEST(CostModelTest, AnUnseenCollectiveFollowsItsLink) {
  // Inter-node links three times slower than the sheet says, seen only by
  // rings that span nodes (Ulysses groups of 8 inside a node of 8, a ring of
  // two across): the inter-node all-to-all, which no task runs, moves by
  // the factor the ring's terms moved; without such rings it keeps the
  // common scale alone.
  ModelSpec m = *BuiltinModel("llama3-8b");
  ClusterSpec host = ClusterSpec::H200();
  host.ring_overlaps_attention = false;  // every pass counts
  const CostModel sheet = CostModel::FromSpecs(host, m, 32);
  CostModel::Coefficients c = sheet.coefficients();
  for (double* term : {&c.a2a_byte_inter, &c.a2a_fixed_inter,
                       &c.ring_byte_inter, &c.ring_fixed_inter}) {
    *term *= 3.0;
  }
  const CostModel truth(c, m, sheet.memory_cap(), 8);
  std::vector<TaskObservation> obs;
  for (int64_t length : {2048, 16384, 65536, 131072}) {
    for (double r : {0.0, 1.0}) {
      for (const auto& [p, u] : std::vector<std::pair<int, int>>{
               {1, 1}, {8, 8}, {8, 4}, {16, 8}}) {
        TaskObservation& o = obs.emplace_back();
        o.group_size = p;
        o.ulysses = u;
        o.intra_node = p <= 8;
        o.lengths = {length};
        o.recompute = r;
        o.seconds = truth.TaskSeconds(p, o.intra_node, o.lengths, r, u);
      }
    }
  }
  absl::StatusOr<CostModel> fitted = sheet.Fit(obs, /*prior_weight=*/1e-3);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  const CostModel::Coefficients& f = fitted->coefficients();
  const CostModel::Coefficients& s = sheet.coefficients();
  const double ring_byte = f.ring_byte_inter / s.ring_byte_inter;
  const double ring_fixed = f.ring_fixed_inter / s.ring_fixed_inter;
  EXPECT_GT(ring_byte, 2.0);  // learnt from the rings
  EXPECT_NEAR(f.a2a_byte_inter / s.a2a_byte_inter, ring_byte,
              1e-9 * ring_byte);
  EXPECT_NEAR(f.a2a_fixed_inter / s.a2a_fixed_inter, ring_fixed,
              1e-9 * ring_fixed);
  // Without the rings across nodes nothing says how the inter-node links
  // differ from the sheet: both kinds keep one factor, the common scale's.
  std::vector<TaskObservation> inside;
  for (const TaskObservation& o : obs) {
    if (o.intra_node) inside.push_back(o);
  }
  absl::StatusOr<CostModel> local = sheet.Fit(inside, /*prior_weight=*/1e-3);
  ASSERT_TRUE(local.ok()) << local.status();
  const CostModel::Coefficients& l = local->coefficients();
  EXPECT_NEAR(l.a2a_byte_inter / s.a2a_byte_inter,
              l.ring_byte_inter / s.ring_byte_inter, 1e-9);
  EXPECT_LT(l.ring_byte_inter / s.ring_byte_inter, 1.5);
}

TEST(CostModelTest, FitLearnsWhetherRingPassesOverlapFromRingTasks) {
  // The prior in the wrong form, both ways: in its own form a fit cannot
  // charge what the truth does (overlapped, a ring whose attention is the
  // longer is charged nothing for its passes), so the fit takes the other
  // form, and predicts fresh rings within 1-2%.
  ModelSpec m = *BuiltinModel("llama3-8b");
  for (const bool truth_overlaps : {false, true}) {
    SCOPED_TRACE(truth_overlaps ? "truth overlaps" : "truth adds");
    const RingTruth t = RingPassesFourTimesTheSheet(m, truth_overlaps);
    ASSERT_GT(t.test_rings.size(), 50u);
    ClusterSpec prior = ClusterSpec::H200();
    prior.ring_overlaps_attention = !truth_overlaps;
    const CostModel sheet = CostModel::FromSpecs(prior, m, 32);
    absl::StatusOr<CostModel> fitted =
        sheet.Fit(t.train, /*prior_weight=*/1e-3);
    ASSERT_TRUE(fitted.ok()) << fitted.status();
    EXPECT_EQ(fitted->coefficients().ring_overlaps_attention, truth_overlaps);
    // Overlapped, which of the two is longer is decided by the prior's
    // figures, a quarter of the passes' truth: rings near the crossover
    // are fitted less exactly.
    EXPECT_LT(fitted->MeanRelativeError(t.test_rings),
              truth_overlaps ? 0.02 : 0.01);
    EXPECT_LT(fitted->MeanRelativeError(t.test), 0.01);
    EXPECT_GT(sheet.MeanRelativeError(t.test_rings),
              5 * fitted->MeanRelativeError(t.test_rings));
  }
  // Without a ring task the two forms predict alike: the prior's stays.
  ClusterSpec host = ClusterSpec::H200();
  host.ring_overlaps_attention = false;
  const CostModel sheet = CostModel::FromSpecs(host, m, 32);
  const CostModel truth = CostModel::FromSpecs(ClusterSpec::H200(), m, 32);
  absl::StatusOr<CostModel> fitted =
      sheet.Fit(Observe(truth, 200, 9, /*rings=*/false), 1e-3);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_FALSE(fitted->coefficients().ring_overlaps_attention);
}

TEST(CostModelTest, FitLearnsTheAttentionHalfFromRingTasks) {
  // The sheet's half-efficiency attention length is a quarter of the
  // truth's: a ring's chunks cost more attention than it predicts.
  ModelSpec m = *BuiltinModel("llama3-8b");
  CostModel truth = CostModel::FromSpecs(ClusterSpec::H200(), m, 32);
  CostModel::Coefficients c = truth.coefficients();
  ASSERT_GT(c.attn_half, 0);
  c.attn_half /= 4;
  CostModel sheet(c, m, truth.memory_cap(), 8);
  std::vector<TaskObservation> train = Observe(truth, 600, 5, true);
  std::vector<TaskObservation> test = Observe(truth, 300, 6, true);
  absl::StatusOr<CostModel> fitted = sheet.Fit(train, /*prior_weight=*/1e-3);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_NEAR(fitted->coefficients().attn_half / truth.coefficients().attn_half,
              1.0, 0.1);
  EXPECT_LT(fitted->MeanRelativeError(test),
            sheet.MeanRelativeError(test) / 4);
}

TEST(CostModelTest, FitGivesASheetWithoutAnAttentionHalfOne) {
  // A CPU's sheet has no attention half; on tasks without a ring the half
  // is told from the linear term only by the recompute ratio, and the fit
  // still finds one.
  ModelSpec m = *BuiltinModel("llama3-8b");
  CostModel truth = CostModel::FromSpecs(ClusterSpec::H200(), m, 32);
  CostModel::Coefficients c = truth.coefficients();
  c.attn_half = 0;
  CostModel sheet(c, m, truth.memory_cap(), 8);
  std::vector<TaskObservation> train = Observe(truth, 600, 7);
  std::vector<TaskObservation> test = Observe(truth, 300, 8);
  absl::StatusOr<CostModel> fitted = sheet.Fit(train, /*prior_weight=*/1e-3);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_GT(fitted->coefficients().attn_half, 0);
  EXPECT_LT(fitted->MeanRelativeError(test), sheet.MeanRelativeError(test) / 4)
      << "the sheet errs by " << sheet.MeanRelativeError(test);
  EXPECT_LT(fitted->MeanRelativeError(test), 0.02);
}

TEST(CostModelTest, FitRejectsAUlyssesDegreeNotDividingTheGroup) {
  ModelSpec m = *BuiltinModel("llama3-8b");
  CostModel sheet = CostModel::FromSpecs(ClusterSpec::H200(), m, 32);
  TaskObservation o;
  o.group_size = 6;
  o.ulysses = 4;
  o.lengths = {1000};
  o.seconds = 1;
  absl::StatusOr<CostModel> fitted = sheet.Fit({o});
  ASSERT_FALSE(fitted.ok());
  EXPECT_NE(fitted.status().message().find(
                "Ulysses degree 4 must be 0 or divide the group size 6"),
            std::string::npos)
      << fitted.status();
}

/// `Observe(truth, ...)`, each time multiplied by 1 + noise * u with u
/// uniform in [-1, 1], and every `stall_every`-th task `stall` times slower
/// still (a straggler, a pause).
std::vector<TaskObservation> ObserveNoisily(const CostModel& truth, int n,
                                            double noise, int stall_every,
                                            double stall, uint32_t seed) {
  std::vector<TaskObservation> out = Observe(truth, n, seed);
  std::mt19937 rng(seed + 1000);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].seconds *= 1 + noise * u(rng);
    if (i % stall_every == stall_every - 1) out[i].seconds *= stall;
  }
  return out;
}

TEST(CostModelTest, FitIsRobustToNoiseAndStalledTasks) {
  ModelSpec m = *BuiltinModel("llama3-8b");
  CostModel sheet = CostModel::FromSpecs(ClusterSpec::H200(), m, 32);
  CostModel::Coefficients c = sheet.coefficients();
  c.lin *= 1.3;
  c.attn *= 0.8;
  c.fixed *= 3.0;
  CostModel truth(c, m, sheet.memory_cap(), 8);
  // 5% noise, and one task in 20 five times too slow.
  constexpr double kNoise = 0.05;
  constexpr int kTasks = 1000;
  constexpr double kPriorWeight = 1e-3;
  std::vector<TaskObservation> train =
      ObserveNoisily(truth, kTasks, kNoise, 20, 5.0, 11);
  // What the true model itself errs by on them: the injected noise (about
  // kNoise / 2 on a clean task, 0.8 on a stalled one).
  const double noise_level = truth.MeanRelativeError(train);
  absl::StatusOr<CostModel> fitted = sheet.Fit(train, kPriorWeight);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  const double after = fitted->MeanRelativeError(train);
  EXPECT_LE(after, sheet.MeanRelativeError(train));
  // The fit minimises the summed relative error plus kPriorWeight * |delta|
  // a coefficient, which the true model's deltas (all below 3) make at most
  // 7 * 3 * kPriorWeight: the fit's mean can exceed the true model's by no
  // more than that over kTasks.
  EXPECT_LE(after, noise_level + 21 * kPriorWeight / kTasks);
  // The stalled tasks, too few to outvote the rest, do not pull the
  // coefficients that carry most of the time off by more than the noise.
  EXPECT_NEAR(fitted->coefficients().lin / c.lin, 1.0, kNoise);
  EXPECT_NEAR(fitted->coefficients().attn / c.attn, 1.0, kNoise);
  // And the noise averages out over the tasks: unseen ones, noise-free, are
  // predicted well within it.
  EXPECT_LT(fitted->MeanRelativeError(Observe(truth, 200, 12)), kNoise / 4);
}

TEST(CostModelTest, FitNeverPredictsItsObservationsWorse) {
  ModelSpec m = *BuiltinModel("llama3-8b");
  CostModel sheet = CostModel::FromSpecs(ClusterSpec::H200(), m, 32);
  // Observations the model already predicts exactly: nothing to gain.
  std::vector<TaskObservation> exact = Observe(sheet, 50, 21);
  ASSERT_EQ(sheet.MeanRelativeError(exact), 0);
  absl::StatusOr<CostModel> fitted = sheet.Fit(exact);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_EQ(fitted->MeanRelativeError(exact), 0);
  // Adversarial ones: times unrelated to the work, anywhere from 1/100 to
  // 100 times the prediction, few or many, under weak and strong priors.
  std::mt19937 rng(22);
  std::uniform_real_distribution<double> log_factor(-std::log(100.0),
                                                    std::log(100.0));
  for (int n : {1, 3, 50}) {
    for (double prior_weight : {1e-3, 1.0, 1e3}) {
      std::vector<TaskObservation> obs = Observe(sheet, n, rng());
      for (TaskObservation& o : obs) o.seconds *= std::exp(log_factor(rng));
      fitted = sheet.Fit(obs, prior_weight);
      ASSERT_TRUE(fitted.ok()) << fitted.status();
      EXPECT_LE(fitted->MeanRelativeError(obs), sheet.MeanRelativeError(obs))
          << n << " observations, prior weight " << prior_weight;
    }
  }
}

TEST(CostModelTest, FitFollowsHardwareFarFromTheDataSheet) {
  // A CPU standing in for an H200: every task 300x slower. The default prior
  // must not hold the model near the data sheet.
  ModelSpec m = *BuiltinModel("llama3-8b");
  CostModel sheet = CostModel::FromSpecs(ClusterSpec::H200(), m, 32);
  CostModel::Coefficients c = sheet.coefficients();
  for (double* x : {&c.lin, &c.attn, &c.a2a_byte_intra, &c.a2a_fixed_intra,
                    &c.a2a_byte_inter, &c.a2a_fixed_inter, &c.fixed}) {
    *x *= 300;
  }
  c.attn *= 2;
  CostModel truth(c, m, sheet.memory_cap(), 8);
  std::vector<TaskObservation> train = Observe(truth, 200, 4);
  std::vector<TaskObservation> test = Observe(truth, 100, 5);
  absl::StatusOr<CostModel> fitted = sheet.Fit(train);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_GT(sheet.MeanRelativeError(test), 0.99);
  EXPECT_LT(fitted->MeanRelativeError(test), 0.05);
}

TEST(CostModelTest, StrongPriorMovesLittle) {
  ModelSpec m = *BuiltinModel("llama3-8b");
  CostModel sheet = CostModel::FromSpecs(ClusterSpec::H200(), m, 32);
  CostModel::Coefficients c = sheet.coefficients();
  c.lin *= 2;
  CostModel truth(c, m, sheet.memory_cap(), 8);
  std::vector<TaskObservation> obs = Observe(truth, 3, 3);
  absl::StatusOr<CostModel> fitted = sheet.Fit(obs, /*prior_weight=*/1e6);
  ASSERT_TRUE(fitted.ok());
  EXPECT_NEAR(fitted->coefficients().lin / sheet.coefficients().lin, 1.0, 0.01);
}

TEST(CostModelTest, FitRejectsNonsense) {
  CostModel sheet =
      CostModel::FromSpecs(ClusterSpec::H200(), *BuiltinModel("llama3-8b"), 32);
  TaskObservation bad;
  bad.group_size = 1;
  bad.lengths = {100};
  bad.seconds = -1;
  absl::StatusOr<CostModel> fitted = sheet.Fit({bad});
  EXPECT_EQ(fitted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(fitted.status().message().find("observation 0"), std::string::npos);
}

TEST(CostModelTest, FitSyncShrinksTheMedianTowardsThePrior) {
  CostModel sheet =
      CostModel::FromSpecs(ClusterSpec::H200(), *BuiltinModel("llama3-8b"), 32);
  const double prior = sheet.SyncSeconds();
  ASSERT_GT(prior, 0);
  // Steps whose sync took three times the data sheet's, and one that
  // stalled: the median ignores the stall, the prior weighs as one step.
  const double measured = 3 * prior;
  const std::vector<double> syncs = {measured, 1000 * prior, measured,
                                     measured};
  absl::StatusOr<CostModel> fitted = sheet.FitSync(syncs, /*prior_weight=*/1);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  // In log space: the geometric mean, the prior one of five.
  EXPECT_NEAR(fitted->SyncSeconds(),
              std::exp((4 * std::log(measured) + std::log(prior)) / 5),
              1e-12 * prior);
  // Nothing else moves.
  auto all_but_sync = [](const CostModel::Coefficients& c) {
    return std::vector<double>{c.lin,
                               c.gemm_half,
                               c.attn,
                               c.attn_half,
                               c.a2a_byte_intra,
                               c.a2a_fixed_intra,
                               c.a2a_byte_inter,
                               c.a2a_fixed_inter,
                               c.fixed,
                               c.mem_static,
                               c.mem_token,
                               c.mem_token_recompute,
                               c.mem_token_base};
  };
  EXPECT_EQ(all_but_sync(fitted->coefficients()),
            all_but_sync(sheet.coefficients()));
  // An even count takes the middle pair's mean.
  fitted = sheet.FitSync({prior, 2 * prior, 4 * prior, 8 * prior}, 1e-9);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_NEAR(fitted->SyncSeconds(), 3 * prior, 1e-6 * prior);
  // A strong prior barely moves; no measurement moves nothing; zero is a
  // measurement (a sync that took no time).
  fitted = sheet.FitSync(syncs, /*prior_weight=*/1e6);
  ASSERT_TRUE(fitted.ok());
  EXPECT_NEAR(fitted->SyncSeconds(), prior, 1e-5 * prior);
  fitted = sheet.FitSync({});
  ASSERT_TRUE(fitted.ok());
  EXPECT_EQ(fitted->SyncSeconds(), prior);
  fitted = sheet.FitSync({0.0, 0.0, 0.0}, /*prior_weight=*/1);
  ASSERT_TRUE(fitted.ok());
  EXPECT_DOUBLE_EQ(fitted->SyncSeconds(), prior / 4);
}

TEST(CostModelTest, FitSyncFromAFarOffPriorIsCloseAfterAFewSteps) {
  CostModel sheet =
      CostModel::FromSpecs(ClusterSpec::H200(), *BuiltinModel("llama3-8b"), 32);
  const double prior = sheet.SyncSeconds();
  // A cluster whose syncs take 1/100 of the sheet's (another machine's
  // sheet): after 19 steps the fit is within 100^(1/20) of them, where a
  // mean would still be (19 / 100 + 1) / 20 * 100 = 6x off.
  const double measured = prior / 100;
  const std::vector<double> syncs(19, measured);
  absl::StatusOr<CostModel> fitted = sheet.FitSync(syncs, /*prior_weight=*/1);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_NEAR(fitted->SyncSeconds() / measured, std::pow(100.0, 1.0 / 20),
              1e-9);
}

TEST(CostModelTest, FitSyncRejectsNonsense) {
  CostModel sheet =
      CostModel::FromSpecs(ClusterSpec::H200(), *BuiltinModel("llama3-8b"), 32);
  for (double bad : {-1.0, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    absl::StatusOr<CostModel> fitted = sheet.FitSync({0.5, bad});
    EXPECT_EQ(fitted.status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_NE(fitted.status().message().find("sync time 1"), std::string::npos)
        << fitted.status();
  }
  EXPECT_EQ(sheet.FitSync({0.5}, /*prior_weight=*/0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ProfileTableTest, RoundTripsAndFits) {
  ModelSpec m = *BuiltinModel("llama3-8b");
  CostModel sheet = CostModel::FromSpecs(ClusterSpec::H200(), m, 32);
  std::vector<TaskObservation> obs;
  for (int64_t len : {1024, 8192, 65536}) {
    for (int p : {1, 2, 4, 8}) {
      TaskObservation o;
      o.group_size = p;
      o.lengths = {len};
      o.recompute = 0.5;
      o.seconds = 1.1 * sheet.TaskSeconds(p, true, o.lengths, 0.5);
      o.memory_bytes = sheet.MemoryBytes(static_cast<double>(len) / p, 0.5);
      obs.push_back(o);
    }
  }
  const std::string text = FormatProfileTable(obs);
  absl::StatusOr<std::vector<TaskObservation>> parsed =
      ParseProfileTable(text, "profile.csv");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), obs.size());
  EXPECT_EQ((*parsed)[5].lengths, obs[5].lengths);
  EXPECT_EQ((*parsed)[5].group_size, obs[5].group_size);
  EXPECT_NEAR((*parsed)[5].seconds, obs[5].seconds, 1e-6 * obs[5].seconds);
  absl::StatusOr<CostModel> fitted = sheet.Fit(*parsed, 1e-3);
  ASSERT_TRUE(fitted.ok());
  EXPECT_LT(fitted->MeanRelativeError(*parsed), 0.01);
  EXPECT_GT(sheet.MeanRelativeError(*parsed), 0.08);
}

TEST(ProfileTableTest, KeepsTheUlyssesDegreeAndReadsTablesWithout) {
  TaskObservation ring;
  ring.group_size = 4;
  ring.ulysses = 2;
  ring.lengths = {8192};
  ring.seconds = 0.25;
  const absl::StatusOr<std::vector<TaskObservation>> parsed =
      ParseProfileTable(FormatProfileTable({ring}), "ring.csv");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 1u);
  EXPECT_EQ((*parsed)[0].ulysses, 2);
  EXPECT_TRUE((*parsed)[0].HoldsRing());
  // Without the last column every row is plain Ulysses.
  const absl::StatusOr<std::vector<TaskObservation>> plain = ParseProfileTable(
      "length,group_size,recompute,intra_node,seconds,memory_bytes\n"
      "8192,4,0,1,0.25,0\n",
      "plain.csv");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)[0].ulysses, 0);
  EXPECT_FALSE((*plain)[0].HoldsRing());
  // A degree that does not divide the group is named with its line.
  const absl::Status bad =
      ParseProfileTable(absl::StrCat(kProfileHeader, "\n8192,4,0,1,0.25,0,3\n"),
                        "bad.csv")
          .status();
  EXPECT_NE(bad.message().find("bad.csv:2"), std::string::npos) << bad;
  EXPECT_NE(bad.message().find("ulysses"), std::string::npos) << bad;
}

TEST(ProfileTableTest, ErrorsNameTheLine) {
  absl::Status s =
      ParseProfileTable(
          "length,group_size,recompute,intra_node,seconds,memory_bytes\n"
          "1024,2,0.5,1,0.1,100\n"
          "1024,x,0.5,1,0.1,100\n",
          "p.csv")
          .status();
  EXPECT_NE(s.message().find("p.csv:3"), std::string::npos) << s;
  EXPECT_NE(s.message().find("group_size"), std::string::npos) << s;
  EXPECT_NE(
      ParseProfileTable("a,b\n", "q.csv").status().message().find("header"),
      std::string::npos);
  EXPECT_NE(ParseProfileTable(
                "length,group_size,recompute,intra_node,seconds,memory_bytes\n"
                "1024,2,1.5,1,0.1,100\n",
                "r.csv")
                .status()
                .message()
                .find("recompute"),
            std::string::npos);
}

}  // namespace
}  // namespace dcp
