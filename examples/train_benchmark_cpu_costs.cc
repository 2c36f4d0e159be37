#include "examples/train_benchmark_cpu_costs.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "scheduler/planner/cost_model.h"
#include "train/rank_plan.h"
#include "train/trainer.h"

namespace dcp::train_benchmark {
namespace {

// The task shapes timed, as fractions of the window: whole sequences of
// several lengths; a pack of the same tokens as the longest in four
// sequences, which separates attention (quadratic in each sequence) from
// the linear layers (linear in the task's tokens); and a task so short that
// its fixed cost shows.
std::vector<std::vector<int64_t>> TaskShapes(int64_t w) {
  return {{w}, {w / 2}, {w / 4, w / 4, w / 4, w / 4}, {w / 8}, {w / 32}};
}

double Tokens(const std::vector<int64_t>& lengths) {
  double t = 0;
  for (int64_t s : lengths) t += s;
  return t;
}

double SquaredTokens(const std::vector<int64_t>& lengths) {
  double t = 0;
  for (int64_t s : lengths) t += static_cast<double>(s) * s;
  return t;
}

// The fastest of `repeats` CPU times of each shape's forward+backward.
absl::StatusOr<std::vector<CpuTiming>> TimeTasks(const Job& job, int64_t window,
                                                 int repeats) {
  ProcessCpuClock clock;
  ASSIGN_OR_RETURN(
      std::unique_ptr<train::RankTrainer> trainer,
      train::RankTrainer::Create(
          TrainerOptions(job, /*world=*/1, /*rank=*/0, &clock), nullptr));
  int64_t step = 0;
  auto run =
      [&](const std::vector<int64_t>& lengths) -> absl::StatusOr<double> {
    ASSIGN_OR_RETURN(RankPlan plan,
                     RankPlanFromStep(SingleRankPlan(step++, lengths, 0), 0));
    ASSIGN_OR_RETURN(train::StepStats stats, trainer->Step(plan));
    if (stats.task_seconds.size() != 1) {
      return absl::InternalError("the trainer timed no task");
    }
    return stats.task_seconds[0];
  };
  RETURN_IF_ERROR(run({window / 8}).status());  // Warm-up.
  std::vector<CpuTiming> out;
  for (const std::vector<int64_t>& lengths : TaskShapes(window)) {
    CpuTiming timing{lengths, std::numeric_limits<double>::infinity()};
    for (int i = 0; i < repeats; ++i) {
      ASSIGN_OR_RETURN(double s, run(lengths));
      timing.seconds = std::min(timing.seconds, s);
    }
    out.push_back(timing);
  }
  return out;
}

// Least squares of relative errors over the coefficients in `use` (the
// others held at 0): minimises sum_i (x_i . c / y_i - 1)^2, x_i = (T, S2, 1).
std::array<double, 3> SolveRelative(const std::vector<CpuTiming>& timings,
                                    const std::array<bool, 3>& use) {
  double a[3][4] = {};
  for (const CpuTiming& t : timings) {
    const double x[3] = {Tokens(t.lengths) / t.seconds,
                         SquaredTokens(t.lengths) / t.seconds, 1 / t.seconds};
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) a[i][j] += use[i] && use[j] ? x[i] * x[j] : 0;
      a[i][3] += use[i] ? x[i] : 0;
    }
  }
  for (int i = 0; i < 3; ++i) {
    if (!use[i]) a[i][i] = 1;  // Pins the unused coefficient at 0.
  }
  for (int col = 0; col < 3; ++col) {  // Gauss-Jordan with partial pivoting.
    int pivot = col;
    for (int r = col + 1; r < 3; ++r) {
      if (std::abs(a[r][col]) > std::abs(a[pivot][col])) pivot = r;
    }
    std::swap(a[col], a[pivot]);
    for (int r = 0; r < 3; ++r) {
      if (r == col || a[col][col] == 0) continue;
      const double f = a[r][col] / a[col][col];
      for (int k = col; k < 4; ++k) a[r][k] -= f * a[col][k];
    }
  }
  std::array<double, 3> c{};
  for (int i = 0; i < 3; ++i) c[i] = a[i][i] == 0 ? 0 : a[i][3] / a[i][i];
  return c;
}

// Non-negative coefficients: the most negative is dropped and the rest
// refitted until none is (a cost that cannot be negative is 0 at worst).
std::array<double, 3> FitNonNegative(const std::vector<CpuTiming>& timings) {
  std::array<bool, 3> use = {true, true, true};
  while (true) {
    const std::array<double, 3> c = SolveRelative(timings, use);
    const auto worst = std::min_element(c.begin(), c.end());
    if (*worst >= 0) return c;
    use[worst - c.begin()] = false;
  }
}

}  // namespace

absl::StatusOr<CpuCalibration> CalibrateCpuCosts(const Job& job, int64_t window,
                                                 int repeats) {
  if (window < 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibration needs a window of at least 64 tokens, not ", window));
  }
  CpuCalibration out;
  ASSIGN_OR_RETURN(out.timings, TimeTasks(job, window, std::max(repeats, 1)));
  const std::array<double, 3> c = FitNonNegative(out.timings);
  out.linear_s = c[0];
  out.attention_s = c[1];
  out.task_s = c[2];
  if (out.linear_s <= 0) {
    return absl::InternalError(
        "calibration found no per-token cost: the timings are not credible");
  }
  double error = 0;
  for (const CpuTiming& t : out.timings) {
    const double fit = out.linear_s * Tokens(t.lengths) +
                       out.attention_s * SquaredTokens(t.lengths) + out.task_s;
    error += std::abs(fit - t.seconds) / t.seconds;
  }
  out.mean_relative_error = error / out.timings.size();
  return out;
}

absl::StatusOr<GlooCosts> FitGlooCosts(const std::vector<GlooRecord>& records,
                                       int world) {
  const GlooRecord* small = nullptr;
  const GlooRecord* large = nullptr;
  GlooCosts out;
  out.records = records;
  for (const GlooRecord& r : records) {
    if (r.collective == "all_reduce") {
      out.all_reduce_s = r.seconds;
    } else if (r.collective == "all_to_all") {
      if (small == nullptr || r.floats < small->floats) small = &r;
      if (large == nullptr || r.floats > large->floats) large = &r;
    }
  }
  if (small == nullptr || small == large || out.all_reduce_s <= 0) {
    return absl::InvalidArgumentError(
        "the Gloo probe's records need all-to-alls of two sizes and an "
        "all-reduce");
  }
  // What one rank sends its peers: all but its own share.
  auto sent = [world](const GlooRecord& r) {
    return 4.0 * r.floats * (world - 1.0) / world;
  };
  if (large->seconds <= small->seconds) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the Gloo probe's all-to-all of ", large->floats, " floats took ",
        large->seconds, " s, not more than the one of ", small->floats,
        " floats (", small->seconds, " s): the timings are noise"));
  }
  out.a2a_bytes_per_s =
      (sent(*large) - sent(*small)) / (large->seconds - small->seconds);
  out.a2a_latency_s =
      std::max(0.0, small->seconds - sent(*small) / out.a2a_bytes_per_s);
  return out;
}

ClusterSpec CpuCluster(const ModelSpec& m, int world,
                       const CpuCalibration& fit, const GlooCosts& gloo,
                       int64_t memory_cap_tokens) {
  ClusterSpec c;
  const double layers = m.layers;
  // Linear layers: 2 * Pl * L FLOPs a token forward, 3x that with backward.
  c.peak_flops = 6.0 * m.ParamsPerLayer() * layers / fit.linear_s;
  c.gemm_eff_max = 1.0;
  c.gemm_eff_half_tokens = 0;
  // Attention: 3.5 * 4 * s^2 * d * L * c FLOPs a sequence.
  const double attention_s = std::max(fit.attention_s, 1e-18);
  c.attn_eff_max = 14.0 * m.hidden * layers * m.AttentionFactor() /
                   (c.peak_flops * attention_s);
  c.attn_eff_half_tokens = 0;
  c.overhead_per_layer_s = fit.task_s / layers;
  c.gpus_per_node = world;  // Every rank on this machine.
  // The model counts 2-byte elements; the trainer sends float32.
  c.intra_node_bw = c.inter_node_bw = gloo.a2a_bytes_per_s / 2;
  c.intra_node_latency_s = c.inter_node_latency_s = gloo.a2a_latency_s;
  // The ranks' cores compute and copy Gloo's messages alike: a ring's passes
  // add to its attention. With them overlapped (a GPU's model) the fit can
  // never charge a ring whose attention is the longer for its passes; the
  // fitted model then predicted plain rings of 2 ranks 10-30% fast, and
  // dcp planned them (docs/RESULTS.md).
  c.ring_overlaps_attention = false;
  // CostModel::FromSpecs's sync, 2 (W - 1) / W * 2 P / grad_sync_bw, made
  // the measured all-reduce.
  c.grad_sync_bw = world > 1 ? 4.0 * (world - 1.0) / world * m.TotalParams() /
                                   gloo.all_reduce_s
                             : 1e18;
  if (memory_cap_tokens > 0) {
    const CostModel::Coefficients k =
        CostModel::FromSpecs(c, m, world).coefficients();
    c.usable_fraction = 1.0;
    c.hbm_bytes = k.mem_static + static_cast<double>(memory_cap_tokens) *
                                     (k.mem_token + k.mem_token_base);
  } else {
    c.hbm_bytes = static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
                  static_cast<double>(sysconf(_SC_PAGE_SIZE)) / world;
  }
  return c;
}

}  // namespace dcp::train_benchmark
