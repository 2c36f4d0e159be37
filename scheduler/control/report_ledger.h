#ifndef DCP_SCHEDULER_CONTROL_REPORT_LEDGER_H_
#define DCP_SCHEDULER_CONTROL_REPORT_LEDGER_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "proto/scheduler_service.pb.h"
#include "scheduler/control/control_events.h"
#include "scheduler/control/report_validation.h"
#include "scheduler/planner/cost_model.h"

namespace dcp {

/// Windows and refit cadence of a `ReportLedger`; all at least 1.
/// `ControlPlane` initialises it in field order.
struct ReportLedgerOptions {
  /// The model the ledger starts with (and measures errors against until
  /// the first refit).
  CostModel initial_model;
  /// Most recent task observations kept for refits.
  int observation_window = 512;
  /// New observations that make a refit due (at most one per completed
  /// step).
  int refit_every = 64;
  /// Completed steps whose predicted-vs-measured error is averaged.
  int step_error_window = 64;
  /// Completed steps with a measured sync kept for refits.
  int sync_window = 64;
  /// While the observations added since the last due refit are, as the
  /// current model predicted them, off by more than this on average, a
  /// refit is due at each completed step (once one has completed: a
  /// start-up profile refits at its own end) however few they are: a model far
  /// from the cluster (a data-sheet prior of other hardware) learns from
  /// every step, not every `refit_every` observations. 0: off.
  double refit_error = 0.25;
};

/// What a refit fits: both windows, and the model it would replace (the
/// ledger's current one when the input was taken) with its version.
struct RefitInput {
  std::vector<TaskObservation> observations;
  /// The measured gradient syncs, and parallel to them the measured times
  /// of their steps.
  std::vector<double> syncs;
  std::vector<double> sync_step_seconds;
  CostModel model;
  int64_t version = 0;
};

/// What a refit installs: a model whose parts each come from the fit or
/// from the input's model, whichever did better on the input's windows.
struct RefitResult {
  CostModel model;
  /// Its mean relative task error on the input's observations.
  double error_after = 0;
  /// Whether the task coefficients, and the gradient sync, are the input
  /// model's.
  bool kept_current = false;
  bool kept_current_sync = false;
};

/// The report ledger: the current cost model and what the reports taught
/// about it. It keeps the window of task observations (with each one's
/// error under the current model, so the model error costs O(1) a report),
/// the windows of step-time errors and of measured gradient syncs, the
/// counters GetStatus shows, and when a refit is due. It fits nothing
/// itself (`RefitDriver` does, off its lock).
///
/// A step's sync is its measured time beyond the largest task-seconds total
/// of a rank: the slowest rank enters the sync last and waits for nobody, so
/// that is the sync itself. A step where no rank reported a sync time
/// teaches nothing about it.
///
/// Thread-safe; one lock of its own, never held while calling out. Cheap
/// enough for gRPC threads: adding is O(observations added), taking a refit
/// O(window).
///
///   if (ledger.AddObservations(std::move(obs), completed_steps)) Wake();
///   if (std::optional<RefitInput> in = ledger.TakeDueRefit()) {
///     ... fit, compare with in->model ...;  ledger.Install(result, *in);
///   }
class ReportLedger {
 public:
  explicit ReportLedger(ReportLedgerOptions options);
  ReportLedger(const ReportLedger&) = delete;
  ReportLedger& operator=(const ReportLedger&) = delete;

  /// Adds one accepted timing report to the count.
  void CountTimingReport() ABSL_LOCKS_EXCLUDED(mu_);

  /// Adds a completed step's error and, when it measured one, its sync.
  void AddCompletedStep(const MeasuredStep& step) ABSL_LOCKS_EXCLUDED(mu_);

  /// Adds observations (the oldest beyond the window leave). Returns true
  /// when this made a refit due: `refit_every` new observations, or new
  /// ones off by more than `refit_error`, and a completed-step count
  /// (`completed_steps`, the highest seen) no refit was due at yet. The
  /// first refit may come before any step completes.
  bool AddObservations(std::vector<TaskObservation> observations,
                       int64_t completed_steps) ABSL_LOCKS_EXCLUDED(mu_);

  /// The due refit's input, once (the due mark is cleared); nullopt when
  /// none is due. Two refits due before one is taken are taken as one.
  std::optional<RefitInput> TakeDueRefit() ABSL_LOCKS_EXCLUDED(mu_);

  /// A refit of everything held, due or not (the end of the profile stage);
  /// clears the due mark and the new-observation count. Nullopt when there
  /// are no observations.
  std::optional<RefitInput> TakeRefit() ABSL_LOCKS_EXCLUDED(mu_);

  /// Installs `result`, chosen for `input`, unless another refit installed
  /// a model since `input` was taken (then nullopt: `result` was chosen
  /// against a model that is no longer current). A result that kept the
  /// current model whole is installed all the same: the refit counts, and
  /// inputs taken before it become stale. Returns the refit's event.
  std::optional<RefitEvent> Install(RefitResult result, const RefitInput& input)
      ABSL_LOCKS_EXCLUDED(mu_);

  /// The current model when its version differs from `*version` (then
  /// `*version` is updated); nullopt when the caller has it.
  std::optional<CostModel> ModelIfNewer(int64_t* version) const
      ABSL_LOCKS_EXCLUDED(mu_);

  /// Makes `model` current as the result of `refits` refits (a restart
  /// resuming the model it had); planners see a new version.
  void RestoreModel(CostModel model, int64_t refits) ABSL_LOCKS_EXCLUDED(mu_);

  /// Refits installed so far.
  int64_t refits() const ABSL_LOCKS_EXCLUDED(mu_);

  /// Mean relative error of the current model on the observation window:
  /// in sample once a refit fitted that window.
  double ModelError() const ABSL_LOCKS_EXCLUDED(mu_);
  /// Out of sample: mean relative error of each of the last
  /// `observation_window` observations under the model that was current
  /// when it arrived, which no fit had seen it.
  double UnseenError() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t observations() const ABSL_LOCKS_EXCLUDED(mu_);

  /// Fills the model and error fields of a GetStatus answer: model_error,
  /// timing_reports, refits, coefficients, step_error, sync_error,
  /// refit_error_before/after, observations, unseen_task_error,
  /// refit_error_since, observations_since_refit.
  void FillStatus(v1::StatusResponse* out) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  /// One completed step's measured sync and step time.
  struct SyncObservation {
    double seconds = 0;
    double step_seconds = 0;
  };

  RefitInput MakeInput() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double RelativeError(const TaskObservation& o) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double ModelErrorLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double UnseenErrorLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Mean over the observations since the current model was installed.
  double SinceRefitErrorLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double StepError() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Mean |grad_sync - measured sync| / measured step time over the sync
  /// window (0 when empty).
  double SyncError() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ReportLedgerOptions options_;

  mutable absl::Mutex mu_;
  CostModel model_ ABSL_GUARDED_BY(mu_);
  int64_t model_version_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<TaskObservation> observations_ ABSL_GUARDED_BY(mu_);
  /// Parallel to `observations_`: each one's relative error under `model_`,
  /// and their sum.
  std::deque<double> observation_errors_ ABSL_GUARDED_BY(mu_);
  double observation_error_sum_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t new_observations_ ABSL_GUARDED_BY(mu_) = 0;
  /// Their errors under the model current when each arrived, summed.
  double new_error_sum_ ABSL_GUARDED_BY(mu_) = 0;
  /// The highest completed-step count reported, and the one the last due
  /// refit was marked at (-1 before any).
  int64_t completed_steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t refit_completed_steps_ ABSL_GUARDED_BY(mu_) = -1;
  bool refit_due_ ABSL_GUARDED_BY(mu_) = false;
  int64_t refits_ ABSL_GUARDED_BY(mu_) = 0;
  double refit_error_before_ ABSL_GUARDED_BY(mu_) = 0;
  double refit_error_after_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t timing_reports_ ABSL_GUARDED_BY(mu_) = 0;
  /// Each recent observation's error under the model current when it
  /// arrived (the last `observation_window`), and their sum.
  std::deque<double> unseen_errors_ ABSL_GUARDED_BY(mu_);
  double unseen_error_sum_ ABSL_GUARDED_BY(mu_) = 0;
  /// The same summed over every observation since the last refit (or
  /// restore) installed the current model: that refit judged on what came
  /// after it.
  double since_refit_error_sum_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t since_refit_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<double> step_errors_ ABSL_GUARDED_BY(mu_);
  /// The last `sync_window` completed steps with a measured sync.
  std::deque<SyncObservation> syncs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_CONTROL_REPORT_LEDGER_H_
