#ifndef DCP_SCHEDULER_CONTROL_REPORT_VALIDATION_H_
#define DCP_SCHEDULER_CONTROL_REPORT_VALIDATION_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/plan.pb.h"
#include "proto/scheduler_service.pb.h"
#include "scheduler/planner/cost_model.h"

namespace dcp {

// What agents send is checked here, against what the control plane knows,
// before anything changes: pure functions, no locks, no state. Every error
// names the report and what is wrong with it, so a person can act on it.

/// The bounds every report is checked against.
struct ReportLimits {
  /// Ranks in the job; a rank must be in [0, world_size).
  int world_size = 0;
  /// GPUs per node: a task (or profile group) within one node is intra-node.
  int gpus_per_node = 8;
  /// Reported task, sync and profile times above this are nonsense.
  double max_seconds = 24 * 3600.0;
  /// Task and profile times below this are nonsense too: the relative error
  /// of a prediction for one can overflow to infinity, after which no refit
  /// could improve on the model (see `kMinTaskSeconds`).
  double min_task_seconds = kMinTaskSeconds;
};

/// What the step window knows of a timing report's step and sender.
struct KnownStep {
  /// Whether the sender registered.
  bool registered = false;
  /// The current epoch.
  int64_t epoch = 0;
  /// Steps [0, planned_steps) were planned; [0, completed_steps) completed.
  int64_t planned_steps = 0;
  int64_t completed_steps = 0;
  /// The plan of the report's step while it is kept (null otherwise).
  const v1::StepPlan* plan = nullptr;
  /// Tasks the plan gives the sender (its RankStep's tasks).
  int rank_tasks = 0;
  /// Whether the sender already reported the step.
  bool already_reported = false;
};

/// What a valid timing report says.
struct AcceptedTimings {
  /// The sum of the rank's task seconds, and its sync seconds.
  double busy_seconds = 0;
  double sync_seconds = 0;
  /// One observation per task whose first rank is the sender, so a task of
  /// p ranks is observed once, not p times.
  std::vector<TaskObservation> observations;
};

/// A completed step's times, from the reports of all its ranks.
struct MeasuredStep {
  /// The plan's prediction and the slowest rank's task plus sync seconds.
  double predicted_seconds = 0;
  double measured_seconds = 0;
  /// The largest task-seconds total of a rank.
  double max_busy_seconds = 0;
  /// Whether a rank reported a sync time (> 0; 0 means "not measured").
  bool sync_reported = false;
  /// The step, its tokens and each member rank's task seconds (ascending
  /// by rank; ranks a shrink left out of the step are not in it).
  int64_t epoch = 0;
  int64_t step = 0;
  int64_t tokens = 0;
  std::vector<double> rank_busy_seconds;
};

/// INVALID_ARGUMENT naming the world when `rank` is outside it.
absl::Status CheckRank(int rank, int world_size);

/// INVALID_ARGUMENT when a timing report's rank is outside the world or its
/// epoch is negative: what is checked before the report is matched to a
/// step (and perhaps taken and dropped as stale).
absl::Status CheckReportAddress(const v1::TimingReport& report,
                                int world_size);

/// FAILED_PRECONDITION when `session_id` is not `expected` (the scheduler
/// restarted, or the id is wrong).
absl::Status CheckSession(absl::string_view session_id,
                          absl::string_view expected);

/// FAILED_PRECONDITION, prefixed by `who`, for an unregistered sender or an
/// epoch other than `current_epoch`.
absl::Status CheckSender(absl::string_view who, int rank, bool registered,
                         int64_t epoch, int64_t current_epoch);

/// Checks one rank's timings of one step against `known`: INVALID_ARGUMENT
/// (rank outside the world, step not planned, a task index that does not
/// exist or does not name the rank, tasks missing or repeated, bad seconds,
/// a group size or token count that differs from the plan),
/// FAILED_PRECONDITION (unregistered sender, stale epoch), ALREADY_EXISTS
/// (the step completed, or the rank already reported it).
absl::StatusOr<AcceptedTimings> ValidateTimingReport(
    const v1::TimingReport& report, const KnownStep& known,
    const ReportLimits& limits);

/// Checks a profile's entries and turns each into a single-sequence
/// observation (intra-node when its group fits a node): INVALID_ARGUMENT
/// naming the entry for a bad length, group size, recompute ratio, seconds
/// or memory, or for no entries at all. The sender is checked apart
/// (`CheckSender`): entries are checked without a lock.
absl::StatusOr<std::vector<TaskObservation>> ValidateProfileReport(
    const v1::ProfileReport& report, const ReportLimits& limits);

}  // namespace dcp

#endif  // DCP_SCHEDULER_CONTROL_REPORT_VALIDATION_H_
