#ifndef DCP_SCHEDULER_EVAL_SIMULATED_PROFILE_H_
#define DCP_SCHEDULER_EVAL_SIMULATED_PROFILE_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "scheduler/eval/simulator.h"
#include "scheduler/planner/cost_model.h"
#include "scheduler/planner/plan.h"

namespace dcp {

/// What `SimulateProfile` measures and how noisily.
struct SimulatedProfileOptions {
  /// Multiplicative noise: every time is the reference cluster's times
  /// exp(noise * z), z standard normal (a log-normal error with that
  /// standard deviation of its log; 0 = exact).
  double noise = 0;
  uint64_t seed = 0;
  /// The scenario's context window: the grid's lengths default to the
  /// control plane's for it (`CompleteProfileGrid`).
  int64_t window = 0;
  /// Other lengths instead of the default (e.g. {256, 1024, 4096}).
  std::vector<int64_t> lengths;
};

/// The start-up profile the agents would report if they ran on the
/// reference cluster: the grid of the scheduler's ProfileRequest
/// (`ProfileStage::MakeRequest` completed by `CompleteProfileGrid` with the
/// planner's initial model `planner`, so the per-GPU token cap is the one
/// the scheduler would send), one observation per rank of every group,
/// fitting length, recompute ratio and repetition, each time drawn with
/// its own `TimingNoise(noise, seed)` factor. Memory is the reference
/// cluster's, exact. Deterministic for a seed.
std::vector<TaskObservation> SimulateProfile(
    const ReferenceCluster& cluster, const CostModel& planner,
    const SimulatedProfileOptions& options);

/// What the same profile costs: the seconds one rank spends measuring its
/// points on the reference cluster (every rank is in one group of each
/// size, so all take this long), noiseless.
double SimulatedProfileSeconds(const ReferenceCluster& cluster,
                               const CostModel& planner,
                               const SimulatedProfileOptions& options);

/// Multiplicative timing noise: each `Factor()` is exp(sigma * z), z
/// standard normal (splitmix64 and Box-Muller, so that a seed gives the same
/// draws with any standard library). Value type; not thread-safe.
class TimingNoise {
 public:
  TimingNoise(double sigma, uint64_t seed) : sigma_(sigma), state_(seed) {}
  double Factor();

 private:
  double Uniform();  // in (0, 1)
  double sigma_;
  uint64_t state_;
};

/// What agents would report after running `plan` on the reference cluster:
/// one observation per task, its time the replay's times a `noise` factor.
/// The plan must be one `ReplayStep` accepts.
std::vector<TaskObservation> SimulateTaskTimings(
    const ReferenceCluster& cluster, const StepPlan& plan,
    const LengthView& lengths, TimingNoise& noise);

}  // namespace dcp

#endif  // DCP_SCHEDULER_EVAL_SIMULATED_PROFILE_H_
