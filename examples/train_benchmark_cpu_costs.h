#ifndef DCP_EXAMPLES_TRAIN_BENCHMARK_CPU_COSTS_H_
#define DCP_EXAMPLES_TRAIN_BENCHMARK_CPU_COSTS_H_

// The costs dcp-train-bench plans with: the analytic model of
// docs/COST_MODEL.md with the constants of this CPU instead of an H200's,
// calibrated at start-up by timing a few one-rank tasks of the model, and
// Gloo's costs as the rank processes measured them (the Gloo probe).

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model_spec.h"
#include "examples/train_benchmark_job.h"

namespace dcp::train_benchmark {

/// One timed task: the sequences packed, and its forward+backward CPU time.
struct CpuTiming {
  std::vector<int64_t> lengths;
  double seconds = 0;
};

/// A one-rank task's CPU time as t(T, S2) = linear_s * T + attention_s * S2
/// + task_s, with T the task's tokens and S2 the sum of its sequences'
/// squared lengths (recompute 0), and the reference-model constants that
/// give exactly that.
struct CpuCalibration {
  double linear_s = 0;     ///< per token
  double attention_s = 0;  ///< per squared token of a sequence
  double task_s = 0;       ///< per task
  /// Mean |fit - measured| / measured over `timings`.
  double mean_relative_error = 0;
  std::vector<CpuTiming> timings;
};

/// Gloo's costs over loopback, fitted to the probe's records.
struct GlooCosts {
  /// Bytes a rank sends its peers a second in an all-to-all (float32, as
  /// the trainer sends), and the seconds of one all-to-all besides: from
  /// the two sizes timed (the line through both).
  double a2a_bytes_per_s = 0;
  double a2a_latency_s = 0;
  /// The all-reduce of the model's gradient (float32), in seconds.
  double all_reduce_s = 0;
  std::vector<GlooRecord> records;
};

/// The costs of `records` (`RunGlooProbe`'s) over a world of `world`
/// ranks. INVALID_ARGUMENT naming what is missing when they lack an
/// all-reduce or two all-to-all sizes; FAILED_PRECONDITION when the larger
/// all-to-all was not slower than the smaller (the timings are noise: a
/// busy machine).
absl::StatusOr<GlooCosts> FitGlooCosts(const std::vector<GlooRecord>& records,
                                       int world);

/// What the planner's CostModel::FromSpecs and the baselines'
/// ReferenceCluster are built from: peak FLOP/s, attention efficiency and
/// the per-layer overhead from `fit` (GEMM efficiency 1 and no
/// half-efficiency sizes: the fit already holds them); the all-to-all, ring
/// and gradient-sync costs from `gloo` (the cost model counts 2-byte
/// elements, the trainer sends float32: half the bytes a second); one node;
/// a ring's passes adding to its attention (`ring_overlaps_attention`
/// false: one core does both).
/// Memory per rank: with `memory_cap_tokens` > 0, exactly what the cost
/// model says a rank needs to hold that many tokens at recompute 0
/// (`CostModel::MaxTokensPerGpu(0)` of the result is that figure: the cap
/// binds the plans, in the model's units); else the machine's physical
/// memory over the world.
ClusterSpec CpuCluster(const ModelSpec& model, int world,
                       const CpuCalibration& fit, const GlooCosts& gloo,
                       int64_t memory_cap_tokens);

/// Times one-rank tasks over sequences up to `window` tokens (each the
/// fastest of `repeats` runs, after one warm-up) with a world-of-one
/// RankTrainer on this process's CPU clock, and fits `CpuCalibration`.
/// Run it with torch at the rank processes' thread count, on an idle
/// machine. INVALID_ARGUMENT when the window is under 64 tokens; errors of
/// the trainer as they are.
absl::StatusOr<CpuCalibration> CalibrateCpuCosts(const Job& job, int64_t window,
                                                 int repeats = 2);

}  // namespace dcp::train_benchmark

#endif  // DCP_EXAMPLES_TRAIN_BENCHMARK_CPU_COSTS_H_
