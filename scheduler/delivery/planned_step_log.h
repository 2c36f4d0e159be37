#ifndef DCP_SCHEDULER_DELIVERY_PLANNED_STEP_LOG_H_
#define DCP_SCHEDULER_DELIVERY_PLANNED_STEP_LOG_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "scheduler/control/control_plane.h"

// When the plan-delivery benchmark's steps were planned (t0 of the delivery
// latency), read on the control plane's planning thread.
namespace dcp::plan_delivery {

/// The real clock, remembering on each thread its first `kKept` readings
/// (and the thread's CPU time then) since `TakePlanningReadings` was last
/// called there. On the planning thread two of them are the control plane's
/// start and end of planning a step: the pair whose difference is the
/// reported planning time (`Find`), wherever the control plane reads the
/// clock besides; a step without such a pair shows up as a fallback count,
/// not as wrong numbers. Thread-safe: all state is thread-local.
class PlanningClock final : public Clock {
 public:
  static constexpr int kKept = 8;
  struct Readings {
    absl::Time wall[kKept];
    absl::Duration cpu[kKept];
    int64_t count = 0;

    /// The indices (start, end) of the latest pair of readings `planning_time`
    /// apart, if any.
    std::optional<std::pair<int, int>> Find(absl::Duration planning_time) const;
  };

  absl::Time Now() override;

  /// The calling thread's readings since the previous call, if there were
  /// at least two; resets them.
  static std::optional<Readings> TakePlanningReadings();

 private:
  static thread_local Readings readings_;
};

/// One planned step as the control plane reported it.
struct PlannedStep {
  int64_t step = 0;
  /// End of planning (t0); the callback time when `exact` is false.
  absl::Time planned;
  /// When on_step_planned ran: after every stream was woken.
  absl::Time callback;
  absl::Duration planning_time;
  /// CPU time of the planning thread planning the step, and publishing it
  /// (t0 to the callback); zero when not `exact`.
  absl::Duration planning_cpu;
  absl::Duration fanout_cpu;
  int tasks = 0;
  int groups = 0;
  bool exact = false;
};

/// Collects on_step_planned events. Thread-safe.
class StepLog {
 public:
  /// Records `event`; call from on_step_planned, on the planning thread.
  void Add(const PlannedStepEvent& event);

  /// The steps recorded so far, in planning order.
  std::vector<PlannedStep> Snapshot() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<PlannedStep> steps_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dcp::plan_delivery

#endif  // DCP_SCHEDULER_DELIVERY_PLANNED_STEP_LOG_H_
