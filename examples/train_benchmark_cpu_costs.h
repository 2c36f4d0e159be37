#ifndef DCP_EXAMPLES_TRAIN_BENCHMARK_CPU_COSTS_H_
#define DCP_EXAMPLES_TRAIN_BENCHMARK_CPU_COSTS_H_

// The costs dcp-train-bench plans with: the analytic model of
// docs/COST_MODEL.md with the constants of this CPU instead of an H200's,
// calibrated at start-up by timing a few one-rank tasks of the model.

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
  /// What Gloo's collectives are assumed to cost (not measured: that needs
  /// the rank processes, which need the plans first): bytes per second and
  /// seconds per collective.
  double gloo_bytes_per_s = 0;
  double gloo_latency_s = 0;
  std::vector<CpuTiming> timings;
  /// What the planner's CostModel::FromSpecs and the baselines'
  /// ReferenceCluster are built from: peak FLOP/s, attention efficiency and
  /// the per-layer overhead from the fit (GEMM efficiency 1 and no
  /// half-efficiency sizes: the fit already holds them); the all-to-all
  /// and gradient-sync bandwidths and latencies of Gloo over loopback are
  /// assumed (`kGloo*` in the .cc), not measured; one node; memory per rank
  /// the machine's physical memory over the world size.
  ClusterSpec cluster;
};

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
