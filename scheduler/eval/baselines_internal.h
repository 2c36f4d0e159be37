#ifndef DCP_SCHEDULER_EVAL_BASELINES_INTERNAL_H_
#define DCP_SCHEDULER_EVAL_BASELINES_INTERNAL_H_

// What the static and the dynamic CP baselines share (baselines.cc,
// dynamic_cp_baseline.cc): packing, a task's cost, input checks and the
// recompute grid their tuners try. Not part of baselines.h's interface.

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "scheduler/eval/baselines.h"
#include "scheduler/eval/simulator.h"
#include "scheduler/planner/plan.h"

namespace dcp::baselines_internal {

/// Ranks [block * p, (block + 1) * p): the aligned block `block` of size p.
std::vector<int> BlockRanks(int block, int p);

struct Pack {
  std::vector<int64_t> samples;
  int64_t tokens = 0;
};

/// Longest first; ties: smaller id first. A total order: input sorted once
/// stays as it is.
void SortLongestFirst(const LengthView& lengths, std::vector<int64_t>& ids);

/// First-fit decreasing by length into packs of at most `capacity` tokens.
std::vector<Pack> FirstFitDecreasing(const LengthView& lengths,
                                     std::vector<int64_t> samples,
                                     int64_t capacity);

/// The reference cluster's time of one task of `samples` on `ranks`.
double TaskSeconds(const ReferenceCluster& cluster, const LengthView& lengths,
                   absl::Span<const int> ranks,
                   absl::Span<const int64_t> samples, double recompute,
                   int ulysses);

/// INVALID_ARGUMENT naming the first sample outside the length table.
absl::Status CheckSamples(const LengthView& lengths,
                          absl::Span<const int64_t> samples);
/// INVALID_ARGUMENT unless 0 <= recompute <= 1.
absl::Status CheckRecompute(double recompute);

/// The recompute grid indices a tuner tries: the smallest feasible one, a
/// few above it, and the top (all layers recomputed).
std::vector<int> GridCandidates(int smallest, int layers);
/// Grid index k as a recompute ratio: k of `layers` layers.
double GridRatio(int k, int layers);

/// The sum over `steps` of the makespan of `plan_step`'s plans: `judge`'s
/// where given, else replayed on `cluster` without the step bounds.
absl::StatusOr<double> TotalMakespan(
    const ReferenceCluster& cluster, const LengthView& lengths,
    absl::Span<const std::vector<int64_t>> steps,
    const std::function<absl::StatusOr<StepPlan>(
        int64_t, absl::Span<const int64_t>)>& plan_step,
    const StepJudge& judge = nullptr);

}  // namespace dcp::baselines_internal

#endif  // DCP_SCHEDULER_EVAL_BASELINES_INTERNAL_H_
