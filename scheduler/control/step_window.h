#ifndef DCP_SCHEDULER_CONTROL_STEP_WINDOW_H_
#define DCP_SCHEDULER_CONTROL_STEP_WINDOW_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "google/protobuf/arena.h"
#include "proto/plan.pb.h"
#include "proto/scheduler_service.pb.h"
#include "scheduler/control/control_events.h"
#include "scheduler/control/rank_liveness.h"
#include "scheduler/control/report_validation.h"
#include "scheduler/control/world_membership.h"
#include "scheduler/planner/cost_model.h"

namespace dcp {

/// What a plan stream should do next (`StepWindow::NextForStream`).
struct StreamNext {
  enum class Kind {
    /// Nothing to send yet; the stream's wake callback fires when there is.
    kWait,
    /// Send `update` (the profile request, a step, or the drain marker).
    kSend,
    /// End the stream with `end_status` (OK after the drain marker was
    /// sent; ABORTED when replaced by a newer stream of the rank;
    /// UNAVAILABLE when the control plane shuts down).
    kEnd,
  };
  Kind kind = Kind::kWait;
  /// The message to send (kSend). A step's message is the one the control
  /// plane keeps for the rank, shared rather than copied: a write may hold
  /// it after the step completes.
  std::shared_ptr<const v1::PlanUpdate> update;
  absl::Status end_status;
};

/// A step's plan on an arena of its own, sized for a step's messages: the
/// plan, then its per-rank views (`StepWindow::AddPlannedStep`).
struct StepArena {
  /// An empty plan on a new arena.
  static StepArena New();
  /// `plan` copied onto a new arena.
  static StepArena Of(const v1::StepPlan& plan);

  std::shared_ptr<google::protobuf::Arena> arena;
  /// On `arena`.
  v1::StepPlan* plan = nullptr;
};

/// Configuration of a `StepWindow`, copied from `ControlPlaneOptions`.
/// `ControlPlane` initialises it in field order.
struct StepWindowOptions {
  std::string session_id;
  int world_size = 0;
  int gpus_per_node = 8;
  /// Told to agents at registration.
  std::string model_name;
  int64_t max_message_bytes = 4 << 20;
  /// Steps kept planned ahead of the completed ones; at least 1.
  int lookahead_steps = 4;
  /// Drain after this many planned steps; 0 = unlimited.
  int64_t max_steps = 0;
  /// Reported task and sync times above this are rejected.
  double max_task_seconds = 24 * 3600.0;
  /// Time of registrations and of a rank's last message. Not owned;
  /// required.
  Clock* clock = nullptr;
  /// A rank whose stream is gone and that was not heard from for this long,
  /// or that did not report a step this long after the rest of the step's
  /// world did, is declared failed (`RankLiveness`); zero: never.
  absl::Duration rank_timeout = absl::ZeroDuration();
  /// A rank with an open stream that reported nothing for this long while
  /// owing a step it was sent is declared failed (`RankLiveness`, stalled);
  /// zero: never.
  absl::Duration step_timeout = absl::ZeroDuration();
  /// What a failure does (see `CheckLiveness`).
  RankFailurePolicy on_rank_failure = RankFailurePolicy::kHold;
};

/// What an accepted timing report changed in the window.
struct RecordedTimings {
  /// The report's task observations (one per task, from its first rank).
  std::vector<TaskObservation> observations;
  /// Set when the report was the last of its step.
  std::optional<MeasuredStep> completed;
  /// Steps completed and planned after the report.
  int64_t completed_steps = 0;
  int64_t planned_steps = 0;
  /// The step was abandoned by a shrink, or the report was stale (from an
  /// earlier epoch): it was taken and dropped (nothing else is set).
  bool discarded = false;
};

/// A step a shrink abandoned, whose samples are planned again.
struct ReservedStep {
  int64_t step = 0;
  std::vector<int64_t> samples;
};

/// A change of the world the window makes (a shrink in `CheckLiveness`, a
/// grow with the first step of the new epoch), for the owner to make
/// durable before any plan of the new epoch can leave the process.
struct EpochChange {
  /// The new epoch and its ranks, ascending.
  int64_t epoch = 0;
  std::vector<int> members;
  /// Steps [abandoned_from, abandoned_to) are abandoned (a shrink: the
  /// steps planned and not completed; empty for a grow) and `reserve` holds
  /// their samples, in step order. `abandoned_to` is the steps planned.
  int64_t abandoned_from = 0;
  int64_t abandoned_to = 0;
  std::vector<ReservedStep> reserve;
};

/// What a step window resumes from after a restart (`StepWindow::Restore`).
struct RestoredWindow {
  /// One planned step that is not completed, as planned.
  struct Kept {
    v1::StepPlan plan;
    /// The ranks of its world, ascending.
    std::vector<int> members;
    /// The abandoned step it re-serves, or -1.
    int64_t reserve_of = -1;
  };
  int64_t epoch = 0;
  /// Steps [0, completed_steps) were completed (or abandoned).
  int64_t completed_steps = 0;
  /// The current epoch's ranks, ascending; empty means every rank.
  std::vector<int> members;
  /// The steps after the completed ones, in order.
  std::vector<Kept> steps;
  /// Abandoned steps not re-served yet, in order.
  std::deque<ReservedStep> reserve;
  /// The [from, to) ranges of abandoned steps, ascending.
  std::vector<std::pair<int64_t, int64_t>> abandoned;
  /// Steps planned from the reserve (they do not count for `max_steps`).
  int64_t reserved_planned = 0;
  /// The first step the shrink that began the epoch abandoned, told to the
  /// epoch's steps (`RankStep.abandoned_from`); -1: none.
  int64_t epoch_abandoned_from = -1;
};

/// The next step the planner may plan (`StepWindow::NextStepToPlan`).
struct StepToPlan {
  int64_t step = 0;
  int64_t epoch = 0;
  /// The ranks of the step's world, ascending: every rank until a shrink.
  /// The planner plans for `members.size()` ranks and its rank i is
  /// `members[i]`.
  std::vector<int> members;
  /// A step a shrink abandoned, whose samples this step trains instead of
  /// the step builder's next ones (-1: none), and those samples.
  int64_t reserve_of = -1;
  std::vector<int64_t> samples;
  /// Set when the step is the first of a new world (a grow): the owner
  /// makes `GrowChange()` durable before the plan.
  bool grows = false;

  /// The change a grow makes (`grows`).
  EpochChange GrowChange() const {
    return EpochChange{epoch, members, step, step, {}};
  }
};

/// The step window: the planned steps kept until every member reported
/// them, the plan streams and their cursors, what a shrink abandons and
/// re-serves, and the drain, stop and shutdown states that end the
/// streams. Who registered (and from where), who is alive and which ranks
/// the epoch trains on is its `WorldMembership`, kept under the same lock
/// since a registration, a report or a step sent changes both. Each plan
/// is kept as per-rank RankSteps (every CommGroup's `rendezvous_prefix` set
/// to "<session>/e<epoch>/g<r0>-<r1>-...") until its step completes.
///
/// A stream is sent every step from its `from_step` on exactly once, in
/// order, then the drain marker, and never a stale step. Wake callbacks run
/// without the lock held, from any thread.
///
/// Thread-safe; one lock of its own. `NextForStream` calls its profile
/// check under that lock, so whatever the check locks comes after it.
///
///   StepWindow window(options);
///   ASSIGN_OR_RETURN(v1::RegisterResponse hello, window.Register(request));
///   ASSIGN_OR_RETURN(int64_t id, window.OpenStream(rank, session, 0, wake));
///   if (std::optional<StepToPlan> next = window.NextStepToPlan()) ...
///   window.AddPlannedStep(plan, next->step, next->epoch);
class StepWindow {
 public:
  explicit StepWindow(StepWindowOptions options);
  StepWindow(const StepWindow&) = delete;
  StepWindow& operator=(const StepWindow&) = delete;

  /// See `ControlPlane::Register`. Also FAILED_PRECONDITION for a
  /// `fixed_world` agent when failures shrink the world. When the rank was
  /// failed, `*returned` (if given) says what its return does.
  absl::StatusOr<v1::RegisterResponse> Register(
      const v1::RegisterRequest& request,
      std::optional<RankFailureEvent>* returned = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);

  /// Declares failed (by the clock, now) the ranks whose stream is gone and
  /// that were silent for `rank_timeout`, and those that did not report a
  /// step for `rank_timeout` after the rest of its world did (hung), or
  /// reported nothing for `step_timeout` while owing a step it was sent
  /// (stalled: see `RankLiveness`); ends their plan streams with UNAVAILABLE (a
  /// rank that wakes up registers again and returns) and acts on the policy:
  ///   - hold: nothing new is planned while a rank is failed (the steps
  ///     planned are still served); a failed rank's registration ends it.
  ///   - shrink: a new epoch for the ranks not failed; the steps not
  ///     completed are abandoned (their reports from now on are taken and
  ///     dropped) and their samples are the next steps' (`StepToPlan`),
  ///     one abandoned step each, in order. A failed rank that registers
  ///     again is in the world from the next step planned (a new epoch:
  ///     a grow is planned like a shrink, without abandoning anything).
  /// Steps complete when every rank of their world reported. Ranks report
  /// their steps in order, so no step after an incomplete one is complete.
  /// What was decided, or nullopt when no rank failed. A shrink calls
  /// `persist` with its change under the window's lock, before anything
  /// changes (so whatever it locks comes after the window's lock); when it
  /// fails, the window keeps the world as it was, keeps the error as a
  /// planning error and drains.
  std::optional<RankFailureEvent> CheckLiveness(
      absl::FunctionRef<absl::Status(const EpochChange&)> persist)
      ABSL_LOCKS_EXCLUDED(mu_);
  /// As above, keeping nothing durable.
  std::optional<RankFailureEvent> CheckLiveness() ABSL_LOCKS_EXCLUDED(mu_);
  /// Whether failures are detected, and how often to check.
  bool detects_failures() const { return membership_.DetectsFailures(); }

  /// See `ControlPlane::OpenStream`; also UNAVAILABLE after `Shutdown`.
  absl::StatusOr<int64_t> OpenStream(int rank, absl::string_view session_id,
                                     int64_t from_step,
                                     std::function<void()> wake)
      ABSL_LOCKS_EXCLUDED(mu_);

  /// What stream `stream_id` should do next; a returned step counts as sent.
  /// A stream whose `ask_profile(rank)` is true sends `profile_request`
  /// first, once. Never blocks.
  StreamNext NextForStream(
      int64_t stream_id, absl::FunctionRef<bool(int rank)> ask_profile,
      const std::shared_ptr<const v1::PlanUpdate>& profile_request)
      ABSL_LOCKS_EXCLUDED(mu_);

  /// Forgets a stream; unknown ids are ignored.
  void CloseStream(int64_t stream_id) ABSL_LOCKS_EXCLUDED(mu_);

  /// Wakes every open stream (something they send changed elsewhere).
  void WakeAll() const ABSL_LOCKS_EXCLUDED(mu_);

  /// Validates a timing report against the kept step (see
  /// `ValidateTimingReport`) and, when valid, records it; a rejected report
  /// changes nothing.
  absl::StatusOr<RecordedTimings> RecordTimings(const v1::TimingReport& report)
      ABSL_LOCKS_EXCLUDED(mu_);

  /// What `RecordTimings` would answer, without recording anything (the
  /// control plane makes a report durable between the two): its error, or
  /// whether it would be recorded (false: taken and dropped, `discarded`).
  absl::StatusOr<bool> CheckTimings(const v1::TimingReport& report) const
      ABSL_LOCKS_EXCLUDED(mu_);

  /// Resumes from a durable state, before any registration: its epoch and
  /// world current, steps [0, completed_steps) completed, its kept steps
  /// the steps after them, in order (as planned: prefixes are filled here),
  /// its abandoned steps still abandoned and to re-serve. Ranks outside the
  /// world count as failed until they register (then a grow takes them
  /// in); with failure detection, the world's ranks of a job that had
  /// planned steps must register within the rank timeout of the restore,
  /// and the replayed reports count as made at it (`RankLiveness`, "after
  /// a scheduler restart"). Drains at once when the plans reach
  /// `max_steps`.
  /// FAILED_PRECONDITION once anything was planned or a stream opened, or
  /// for a kept step out of order or a rank outside the world.
  absl::Status Restore(RestoredWindow restored) ABSL_LOCKS_EXCLUDED(mu_);

  /// Records a report accepted before a restart (`Restore` first): as
  /// `RecordTimings`, but the sender need not have registered; for the
  /// liveness clocks it came now.
  absl::StatusOr<RecordedTimings> ReplayTimings(const v1::TimingReport& report)
      ABSL_LOCKS_EXCLUDED(mu_);

  /// FAILED_PRECONDITION unless `rank` registered and `epoch` is current;
  /// then notes that the rank was seen. For profile reports.
  absl::Status CheckProfileSender(int rank, int64_t epoch)
      ABSL_LOCKS_EXCLUDED(mu_);

  /// Steps planned so far.
  int64_t planned_steps() const ABSL_LOCKS_EXCLUDED(mu_);

  /// The next step to plan when the look-ahead, `max_steps`, a drain, a
  /// planning error or a shutdown allow one; nullopt otherwise.
  std::optional<StepToPlan> NextStepToPlan() const ABSL_LOCKS_EXCLUDED(mu_);

  /// Keeps a copy of `plan` as step `step` of `epoch`. Returns false,
  /// discarding it, when planning stopped meanwhile (drain, shutdown) or the
  /// step is no longer the next: the step number `Drain` returned stays the
  /// last one.
  /// The caller wakes the streams (`WakeAll`) once its own locks are
  /// released.
  bool AddPlannedStep(const v1::StepPlan& plan, int64_t step, int64_t epoch)
      ABSL_LOCKS_EXCLUDED(mu_);
  /// As above for the step `NextStepToPlan` answered: its world becomes
  /// current (a new epoch when it is another), and a re-served step
  /// leaves the queue of abandoned ones.
  bool AddPlannedStep(const v1::StepPlan& plan, const StepToPlan& planned)
      ABSL_LOCKS_EXCLUDED(mu_);
  /// As above for a plan made on its own arena (the planner's way: the
  /// step's per-rank views go on the same arena, and the step's messages
  /// are freed in one go, not one by one, when it is done).
  bool AddPlannedStep(StepArena plan, const StepToPlan& planned)
      ABSL_LOCKS_EXCLUDED(mu_);

  /// Planning failed: keeps `error` (GetStatus shows it) and drains. The
  /// caller wakes the streams, as after `AddPlannedStep`.
  void FailPlanning(absl::Status error) ABSL_LOCKS_EXCLUDED(mu_);

  /// See `ControlPlane::PlannedStep`.
  absl::StatusOr<v1::StepPlan> PlannedStep(int64_t step) const
      ABSL_LOCKS_EXCLUDED(mu_);

  /// See `ControlPlane::AwaitPlanned`.
  bool AwaitPlanned(int64_t steps, absl::Duration timeout) const
      ABSL_LOCKS_EXCLUDED(mu_);

  /// See `ControlPlane::Drain`, `stopped` and `WaitForStop`.
  int64_t Drain(bool stop) ABSL_LOCKS_EXCLUDED(mu_);
  bool stopped() const ABSL_LOCKS_EXCLUDED(mu_);
  bool WaitForStop(absl::Duration grace) ABSL_LOCKS_EXCLUDED(mu_);

  /// Ends every stream with UNAVAILABLE and stops planning. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);
  bool shut_down() const ABSL_LOCKS_EXCLUDED(mu_);

  /// Fills the session, step and rank fields of a GetStatus answer.
  void FillStatus(v1::StatusResponse* out) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  /// One planned step, kept until every rank reported it.
  struct StepRecord {
    /// Owns `plan` and the messages of `updates`.
    std::shared_ptr<google::protobuf::Arena> arena;
    v1::StepPlan* plan = nullptr;
    /// Per-rank views as the messages that carry them, indexed by rank.
    std::vector<std::shared_ptr<const v1::PlanUpdate>> updates;
    /// Per rank: whether it reported, and its task seconds + sync.
    std::vector<bool> reported;
    std::vector<double> rank_seconds;
    /// Per rank: its task seconds alone (for the step's imbalance).
    std::vector<double> rank_busy;
    int reports = 0;
    /// The largest task-seconds total a rank reported, and whether a rank
    /// reported a sync time (> 0): what the step's sync is learnt from.
    double max_busy = 0;
    bool sync_reported = false;
    /// The ranks of its world (indexed by rank) and how many they are.
    std::vector<bool> members;
    int member_count = 0;
  };
  struct StreamState {
    int rank = 0;
    int64_t cursor = 0;
    bool drain_sent = false;
    bool profile_sent = false;
    /// Set when the stream must end (replaced, shutdown).
    std::optional<absl::Status> closed;
    std::shared_ptr<std::function<void()>> wake;
  };
  using WakeList = std::vector<std::shared_ptr<std::function<void()>>>;
  /// Calls each non-empty wake (outside `mu_`).
  static void CallAll(const WakeList& wakes);

  /// The stored form of a plan: prefixes filled and per-rank views cut.
  StepRecord MakeRecord(StepArena plan, int64_t epoch,
                        const std::vector<bool>& members) const;
  /// Under shrink: abandons the window's steps for a new epoch of the
  /// ranks not failed, once `persist` kept the change; fills `event`.
  void ShrinkLocked(RankFailureEvent& event,
                    absl::FunctionRef<absl::Status(const EpochChange&)> persist)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Tells the ranks of `record` (a step of the current epoch) the first
  /// step the shrink that began the epoch abandoned, if any.
  void MarkAbandonedFrom(StepRecord& record) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Whether `step` is one a shrink abandoned.
  bool AbandonedLocked(int64_t step) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Whether `report` is taken and dropped: its step was abandoned, or it
  /// is stale (from an epoch before its step's, or a completed step's
  /// report from an epoch before the current one).
  bool DiscardsLocked(const v1::TimingReport& report) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Every step of the job is planned (`max_steps`, nothing to re-serve).
  bool PlannedAll() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Whether streams end after the last planned step.
  bool StreamsDrain() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  WakeList AllWakes() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Ends the open stream of `rank`, if any; returns its wake.
  std::shared_ptr<std::function<void()>> CloseRankStream(
      int rank, const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// `report` checked against the window (`record` its kept step, or
  /// null); a replayed report's sender counts as registered.
  absl::StatusOr<AcceptedTimings> ValidateLocked(const v1::TimingReport& report,
                                                 const StepRecord* record,
                                                 bool replay) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// The kept step `step`, or null.
  StepRecord* KeptLocked(int64_t step) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const StepRecord* KeptLocked(int64_t step) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<RecordedTimings> Record(const v1::TimingReport& report,
                                         bool replay) ABSL_LOCKS_EXCLUDED(mu_);
  /// Takes `record`'s rank `rank` report, accepted as `accepted`.
  void Accept(StepRecord& record, int rank, int64_t step,
              const AcceptedTimings& accepted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// The members of `record`'s world that did not report it, ascending.
  std::vector<int> MissingRanks(const StepRecord& record) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Drops completed steps from the front of the window.
  void AdvanceCompleted() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t NextUnreported(int rank) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool StreamsEnded() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const StepWindowOptions options_;
  const ReportLimits limits_;
  Clock* const clock_;
  /// What `world_` was made with: read without the lock (it never changes).
  const WorldMembershipOptions membership_;

  mutable absl::Mutex mu_;
  /// The ranks, their liveness and the epoch's world: the membership half.
  WorldMembership world_ ABSL_GUARDED_BY(mu_);
  /// Steps planned so far: the next step to plan.
  int64_t planned_steps_ ABSL_GUARDED_BY(mu_) = 0;
  /// Steps in [0, completed_steps_) have been reported by every rank and
  /// dropped; `window_` holds steps [completed_steps_, planned_steps_).
  int64_t completed_steps_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<StepRecord> window_ ABSL_GUARDED_BY(mu_);
  /// The open stream of each rank (0 when none).
  std::vector<int64_t> rank_streams_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, StreamState> streams_ ABSL_GUARDED_BY(mu_);
  int64_t next_stream_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status planner_error_ ABSL_GUARDED_BY(mu_);
  /// Abandoned steps not planned again yet, in order; the ranges of step
  /// numbers abandoned; how many steps were, and how many were planned
  /// from `reserve_` (not drawn from the step builder).
  std::deque<ReservedStep> reserve_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int64_t, int64_t>> abandoned_ranges_
      ABSL_GUARDED_BY(mu_);
  // The first step the shrink that began the current epoch abandoned, told
  // to its ranks in `RankStep.abandoned_from`; -1: none.
  int64_t epoch_abandoned_from_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t abandoned_steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reserved_planned_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_CONTROL_STEP_WINDOW_H_
