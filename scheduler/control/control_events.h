#ifndef DCP_SCHEDULER_CONTROL_CONTROL_EVENTS_H_
#define DCP_SCHEDULER_CONTROL_CONTROL_EVENTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dcp {

/// What the control plane tells its owner after planning a step (for logs).
struct PlannedStepEvent {
  int64_t epoch = 0;
  int64_t step = 0;
  int64_t samples = 0;
  int64_t tokens = 0;
  int tasks = 0;
  int groups = 0;
  /// The planner's prediction of the step time, seconds.
  double predicted_seconds = 0;
  /// How long planning took, by the injected clock.
  absl::Duration planning_time;
  /// The planning thread's CPU time over the same span, by the control
  /// plane's CPU clock (`ControlPlaneOptions::planning_cpu_clock`).
  absl::Duration planning_cpu_time;
  /// Per task, in execution order: its sequence-parallel group size,
  /// recompute ratio and Ulysses degree (`Task.ulysses`, 0 read as the
  /// group size: u < p is u-way Ulysses inside a ring of p / u).
  std::vector<int> task_group_sizes;
  std::vector<double> task_recompute;
  std::vector<int> task_ulysses;
  /// Each member rank's predicted busy seconds, ascending by rank (ranks a
  /// shrink left out of the step are not in it): the planner's cost model's
  /// times of the rank's tasks, summed (`PredictedRankBusySeconds`).
  std::vector<double> predicted_rank_busy_seconds;
};

/// What the control plane tells its owner when the last rank reported a
/// step (the step completed), for the metrics.
struct StepCompletedEvent {
  int64_t epoch = 0;
  int64_t step = 0;
  /// The step's tokens (StepPlan.total_tokens).
  int64_t tokens = 0;
  /// The plan's predicted step time and the measured one: the slowest
  /// rank's task seconds plus its sync seconds, as reported.
  double predicted_seconds = 0;
  double measured_seconds = 0;
  /// Each member rank's reported task seconds, ascending by rank, sync
  /// excluded.
  std::vector<double> rank_busy_seconds;
};

/// What the control plane tells its owner after refitting its cost model.
struct RefitEvent {
  /// Refits so far, this one included.
  int64_t refits = 0;
  /// Observations the model was fitted to.
  int64_t observations = 0;
  /// Mean relative task-time error on those observations of the model
  /// before and after the refit; never more after than before, since a
  /// refit keeps the current model's task coefficients unless the fit's
  /// are better there.
  double error_before = 0;
  double error_after = 0;
  /// Whether the refit kept the current model's task coefficients (then
  /// `error_after == error_before`), and its gradient sync (the fitted one
  /// was no closer to the measured syncs).
  bool kept_current = false;
  bool kept_current_sync = false;
  /// The model this refit replaced, judged out of sample: its mean
  /// relative task error on the observations reported after it was
  /// installed (before any fit saw them), and their count (0: none).
  double replaced_error_since = 0;
  int64_t replaced_observations_since = 0;
  /// Mean relative error of the predicted step times so far (0 when no step
  /// has completed).
  double step_error = 0;
  /// The part of the step error the new model's gradient sync accounts for:
  /// mean |grad_sync - measured sync| / measured step time over the steps
  /// whose sync it learnt from (0 when none; see `ControlPlane`).
  double sync_error = 0;
};

/// What the control plane tells its owner when the start-up profile ends.
struct ProfileDoneEvent {
  /// Ranks that answered the ProfileRequest, ascending.
  std::vector<int> answered;
  /// Ranks that did not answer before `profile_timeout`, ascending (empty
  /// unless `timed_out`).
  std::vector<int> missing;
  bool timed_out = false;
  /// Observations held when planning starts (profile entries included).
  int64_t observations = 0;
};

/// What the control plane tells its owner when it resumed a job from its
/// durable state (`ControlPlaneOptions::state_store`).
struct ResumeEvent {
  /// The job's session, kept across the restart.
  std::string session_id;
  int64_t epoch = 0;
  /// The epoch's ranks (every rank unless a shrink left some out).
  std::vector<int> members;
  /// Steps every rank reported before the restart.
  int64_t completed_steps = 0;
  /// Steps planned before the restart; those from `completed_steps` on are
  /// served again exactly as planned.
  int64_t planned_steps = 0;
  /// Timing reports of the kept steps, recorded again.
  int64_t reports = 0;
  /// Refits behind the cost model resumed (0: the initial model).
  int64_t refits = 0;
  /// Rendezvous keys restored.
  int64_t store_keys = 0;
};

/// What the control plane tells its owner when ranks are declared failed
/// (`rank_timeout`) or return, for the logs: what was decided.
struct RankFailureEvent {
  /// The ranks declared failed (empty for a return), and why, one line
  /// each in the same order (`RankLiveness::FailureReason`).
  std::vector<int> failed;
  std::vector<std::string> reasons;
  /// The rank that registered again (-1 for a failure).
  int returned = -1;
  /// "hold" or "shrink".
  std::string policy;
  /// Under hold: whether planning now waits (a rank is failed).
  bool holding = false;
  /// Under shrink: the epoch of the new world and its ranks; steps
  /// [abandoned_from, abandoned_to) were abandoned and their
  /// `reserved_samples` samples are planned again from step
  /// `abandoned_to` on. For a return under shrink, `epoch` is the current
  /// one: the rank joins with the next epoch, at the next step planned.
  int64_t epoch = 0;
  std::vector<int> members;
  int64_t abandoned_from = 0;
  int64_t abandoned_to = 0;
  int64_t reserved_samples = 0;
  /// Ranks registered and not failed, after the event.
  int live_ranks = 0;
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_CONTROL_CONTROL_EVENTS_H_
