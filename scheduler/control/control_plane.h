#ifndef DCP_SCHEDULER_CONTROL_CONTROL_PLANE_H_
#define DCP_SCHEDULER_CONTROL_CONTROL_PLANE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/model_spec.h"
#include "proto/plan.pb.h"
#include "proto/scheduler_service.pb.h"
#include "scheduler/control/control_events.h"
#include "scheduler/control/job_journal.h"
#include "scheduler/control/kv_store.h"
#include "scheduler/control/profile_stage.h"
#include "scheduler/control/refit_driver.h"
#include "scheduler/control/report_ledger.h"
#include "scheduler/control/report_validation.h"
#include "scheduler/control/state.pb.h"
#include "scheduler/control/state_store.h"
#include "scheduler/control/step_window.h"
#include "scheduler/planner/cost_model.h"
#include "scheduler/planner/plan.h"
#include "scheduler/planner/planner.h"
#include "scheduler/planner/step_builder.h"

namespace dcp {

/// Configuration of a `ControlPlane`; defaults are what dcp-scheduler uses.
struct ControlPlaneOptions {
  /// The length table, one entry per sample id. Required, non-empty; the
  /// control plane keeps it for its lifetime.
  std::vector<int32_t> lengths;
  /// Context window: longer samples are truncated to it. Required.
  int64_t window = 0;
  /// The model the plans are for. Required.
  ModelSpec model;
  /// The hardware: memory cap, node size (groups within one node are
  /// intra-node) and the data-sheet figures of the initial cost model.
  ClusterSpec cluster = ClusterSpec::H200();
  /// Ranks in the job. Required.
  int world_size = 0;
  /// Token budget of a step. Required.
  int64_t tokens_per_step = 0;
  /// Seed of the sample shuffle.
  uint64_t seed = 0;
  /// Steps planned ahead of the last step every rank has reported: the
  /// planner keeps `completed_steps + lookahead_steps` steps planned, so
  /// agents never wait for planning while reports flow. At least 1.
  int lookahead_steps = 4;
  /// The step builder's own look-ahead for evening out steps
  /// (`StepBuilderOptions::lookahead_steps`); 0 = off.
  int balance_steps = 0;
  /// Stop planning after this many steps and drain; 0 = unlimited.
  int64_t max_steps = 0;
  /// The planner's knobs; `world_size` is taken from above.
  PlannerOptions planner;
  /// The initial cost model (e.g. fitted to a profile); empty means
  /// `CostModel::FromSpecs(cluster, model, world_size)`. It is also the
  /// prior every refit shrinks towards.
  std::optional<CostModel> cost_model;
  /// Refit the cost model after this many new task observations, at most
  /// once per completed step (the first refit may come before any step
  /// completes). At least 1.
  int refit_every = 64;
  /// A refit is also due at every completed step while the observations
  /// since the last one are off by more than this (out of sample; see
  /// `ReportLedgerOptions::refit_error`). 0: off.
  double refit_error = 0.25;
  /// Most recent task observations kept for refits. At least 1.
  int observation_window = 512;
  /// Pseudo-observations pulling each coefficient towards the initial model
  /// (`CostModel::Fit`). Positive.
  double prior_weight = 1.0;
  /// The "data profile" stage: before step 0 is planned, send every rank
  /// one ProfileRequest (the first message of its plan stream) and wait
  /// until every rank answered ReportProfile, or `profile_timeout` after the
  /// first registration, then refit from the profile and start planning.
  bool profile_at_start = false;
  absl::Duration profile_timeout = absl::Seconds(60);
  /// The profile grid: sequence lengths (agents divide them by their own
  /// token scale), recompute ratios and repetitions per point. Group sizes
  /// are every p <= min(world_size, gpus_per_node) dividing both the
  /// model's heads and the world; groups are the aligned blocks
  /// [k*p, (k+1)*p).
  /// Empty lengths: `DefaultProfileLengths(window)`; a length is measured
  /// only on groups whose GPUs hold it (`CompleteProfileGrid`).
  std::vector<int64_t> profile_lengths;
  std::vector<double> profile_recompute = {0.0, 1.0};
  int profile_repetitions = 2;
  /// Completed steps whose predicted-vs-measured error is averaged.
  int step_error_window = 64;
  /// Most recent completed steps whose measured gradient sync the refits
  /// learn the sync term from (`CostModel::FitSync`, with `prior_weight`).
  /// At least 1.
  int sync_window = 64;
  /// Reported task (and sync) times above this are rejected as nonsense.
  double max_task_seconds = 24 * 3600.0;
  /// Rendezvous store limits.
  int64_t store_max_key_bytes = 256;
  int64_t store_max_value_bytes = 64 << 10;
  int64_t store_max_keys = 100000;
  int64_t store_max_total_bytes = int64_t{256} << 20;
  /// Largest message the server accepts; told to agents at registration.
  int64_t max_message_bytes = 4 << 20;
  /// Session id; empty draws 16 random hex digits. Must not contain '/'.
  std::string session_id;
  /// Plan (and refit) on a dedicated thread (the daemon). With false,
  /// nothing is planned or refitted until the owner calls
  /// `PlanAvailableSteps()` (deterministic tests).
  bool start_planner_thread = true;
  /// Time source for idle times and planning durations; null = real time.
  /// Not owned; must outlive the control plane.
  Clock* clock = nullptr;
  /// The planning thread's CPU time, read around each planning step
  /// (`PlannedStepEvent::planning_cpu_time`); null = `ThreadCpuClock`. Not
  /// owned; must outlive the control plane.
  Clock* planning_cpu_clock = nullptr;
  /// Called after each planned step, on the planning thread, without locks
  /// held. Must be thread-safe and quick (it delays planning).
  std::function<void(const PlannedStepEvent&)> on_step_planned;
  /// Called when an accepted timing report completes its step (the last
  /// rank reported it), on the reporting thread (a gRPC thread), without
  /// locks held; not for the reports a resumed job records again. Must be
  /// thread-safe and must not block.
  std::function<void(const StepCompletedEvent&)> on_step_completed;
  /// Called after each refit, on the planner thread (or the caller of
  /// `PlanAvailableSteps`), never on a reporting thread, without locks
  /// held. Must be thread-safe and quick (it delays planning).
  std::function<void(const RefitEvent&)> on_refit;
  /// Called once when the start-up profile ends (all answered or timed
  /// out), on the planner thread (or the caller of `PlanAvailableSteps`),
  /// without locks held. Must be thread-safe and quick.
  std::function<void(const ProfileDoneEvent&)> on_profile_done;
  /// Where the job's state goes so that a restart loses nothing, and what
  /// `Start` resumes from (see the class comment); null: every start is a
  /// new job. Not owned; must outlive the control plane.
  StateStoreInterface* state_store = nullptr;
  /// Called once by `Start`, on its caller's thread, when it resumed a job
  /// from `state_store`.
  std::function<void(const ResumeEvent&)> on_resumed;
  /// A registered rank whose plan stream is gone and that was not heard
  /// from for this long (by `clock`), or that did not report a step for
  /// this long after the rest of the step's world did (hung, its stream
  /// open: the stream is then ended), is declared failed; checked by the
  /// planner thread every tenth of it (10 ms to 1 s). Zero: never (the
  /// default here; dcp-scheduler's --rank_timeout defaults to 60 s).
  absl::Duration rank_timeout = absl::ZeroDuration();
  /// A rank whose plan stream is open but that reported nothing for this
  /// long while owing a step it was sent is declared failed too (its
  /// stream is ended), even when no other rank reported the step either
  /// (a whole world stuck in a collective). Zero: never (the default here
  /// and dcp-scheduler's --step_timeout); set it above the longest step.
  absl::Duration step_timeout = absl::ZeroDuration();
  /// What a failure does: hold the job until the rank returns, or shrink
  /// the world (see `StepWindow::CheckLiveness`). With `state_store`, each
  /// shrink and grow is made durable before any plan of its epoch (see the
  /// class comment).
  RankFailurePolicy on_rank_failure = RankFailurePolicy::kHold;
  /// Called when ranks are declared failed (on the planner thread) and
  /// when a failed rank registers again (on the registering thread),
  /// without locks held. Must be thread-safe and quick.
  std::function<void(const RankFailureEvent&)> on_rank_event;
};

/// The core of dcp-scheduler: plans steps ahead of the agents, hands each
/// rank its part of every step, learns task times from their reports and
/// keeps the rendezvous store. No gRPC: the service class translates RPCs
/// into these calls (and `absl::Status` into `grpc::Status`).
///
/// A facade in the manner of Ray's GCS server: it owns one part per concern
/// and wires them together; planning itself (the step builder and the
/// planner, under `plan_mu_`) stays here.
///   - `StepWindow`: registration, plan streams and their cursors, the
///     planned steps kept until every rank reported them, drain and stop.
///   - `ValidateTimingReport` / `ValidateProfileReport`: what a report must
///     be, checked before anything changes (pure functions).
///   - `ReportLedger`: the current cost model, the observation, step-error
///     and sync windows, the counters, and when a refit is due.
///   - `RefitDriver`: the least-squares refit from the prior.
///   - `ProfileStage`: the start-up profile's request, answers and deadline.
///   - `KvStore`: the communicators' key-value store.
///
/// Planning runs on a dedicated thread (never on the caller's), which keeps
/// `completed_steps + lookahead_steps` steps planned; completed means every
/// rank has reported its timings. Refits run on that thread too, before the
/// next step is planned: a report only validates and records (cheap work,
/// fit for gRPC reactions) and, when it makes a refit due or completes a
/// step, wakes the planner thread.
///
/// Plan streams: `OpenStream` registers a wake callback; the control plane
/// calls it (from any thread, never under a lock of its own) whenever
/// `NextForStream` may have something new, and the stream then asks
/// `NextForStream` until it answers kWait. A stream is sent every step from
/// its `from_step` on exactly once, in order, then the drain marker, and
/// never a stale step.
///
/// Start-up profile (`profile_at_start`): while it is pending, each stream
/// first sends the ProfileRequest (unless its rank already answered) and
/// nothing is planned; the first ReportProfile of every rank counts (later
/// ones, and all after the profile ended, only add observations). When the
/// last rank answers, or `profile_timeout` after the first registration
/// (by the injected clock, checked whenever planning is attempted), the
/// planner thread refits the cost model from the observations so far, then
/// starts planning.
///
/// Timing reports are validated in full before any state changes: a
/// rejected report leaves everything as it was. One `TaskObservation` per
/// task (from its first rank) joins a window; every `refit_every` new
/// observations, but no more than once per completed step, a refit is due:
/// the cost model is refitted from the initial model with the window, and
/// later plans use it. Refits due before the planner thread takes one are
/// taken as one, fitted to the windows as they are then.
///
/// The gradient sync is learnt with the same refits. A plan predicts its
/// step as the planner's makespan plus the model's `grad_sync`; the step's
/// measured time is its slowest rank's task seconds plus sync seconds.
/// When the last rank reports a step, the measured time beyond the largest
/// task-seconds total of a rank is the step's sync: the slowest rank enters
/// the sync last and waits for nobody, so this is the sync itself, not the
/// faster ranks' wait for it. It joins a window of `sync_window` steps
/// that each refit passes to `CostModel::FitSync` after the task fit. A
/// step where no rank reports a sync time (every `sync_seconds` 0, which
/// proto3 cannot tell from "not measured": execute-mode agents have no
/// gradient; client_lib reports 0 unless the trainer passes its sync time)
/// teaches nothing about it.
///
/// Durable state (`state_store`): every effect that leaves the process is
/// made durable first, so a restarted control plane on the same store
/// serves what it served before and loses nothing it acknowledged:
///   - a planned step, before `NextForStream` can hand it to any stream
///     (written on the planner thread, before the window keeps it);
///   - an accepted timing report, before `ReportTimings` returns (checked,
///     written, then recorded: an ack, or an ALREADY_EXISTS for a retry,
///     implies the report is durable);
///   - a rendezvous key, before `StoreSet` returns and any `StoreGet` sees
///     it;
///   - the cost model after each refit, before the next step is planned;
///   - a change of the world under shrink (its epoch, ranks, the abandoned
///     steps and their samples), before a late report of an abandoned step
///     is answered `discarded` and before any plan of the new epoch.
/// `Start` on a store holding a job checks that it is this job
/// (`CheckSameJob`: the lengths, window, batch, seed, world and model; and
/// a world a shrink left smaller is refused under `on_rank_failure` hold,
/// which would never grow it back) and
/// resumes it: the same session id; the step builder replayed to where it
/// was (checked against the kept plans' samples); the steps planned but not
/// completed kept exactly as planned and their reports recorded again, so
/// `Register` tells each rank the first step it has not reported; the
/// epoch and its ranks (ranks a shrink left out count as failed until they
/// register, which grows the world again), the abandoned steps (their late
/// reports still `discarded`) and those still to re-serve; the cost
/// model and the rendezvous keys restored; no start-up profile once steps
/// were planned; `max_steps` counting the job's steps. What is not kept:
/// registrations (agents register again), the observation, step-error
/// and sync windows beyond the kept steps' reports, the counters, a drain.
/// A write that fails stops planning with the error (as a planning error
/// does) or fails the report or key it was for.
///
/// Thread-safe: every method may be called from any thread. Only
/// `WaitForStop`, `AwaitPlanned`, `PlanAvailableSteps` and the destructor
/// block or take long; everything else is short work under a part's lock.
/// Lock order: `plan_mu_` (planning), then `StepWindow`'s, then
/// `ProfileStage`'s (`NextForStream` asks the stage under the window's
/// lock); `ReportLedger`'s, `KvStore`'s, the state store's (written under
/// `plan_mu_` for plans and refits, under no lock for reports and keys) and
/// `wake_mu_` are leaves, taken alone or last. No part calls another: only
/// this class does, and it calls callbacks and wakes with no lock held.
/// `Status()` reads each part under its own lock, so it is a snapshot of
/// each, not of all at once.
///
///   ASSIGN_OR_RETURN(std::unique_ptr<ControlPlane> cp,
///                    ControlPlane::Start(std::move(options)));
///   ASSIGN_OR_RETURN(v1::RegisterResponse hello, cp->Register(request));
///   ASSIGN_OR_RETURN(int64_t stream,
///                    cp->OpenStream(rank, hello.session_id(), 0, wake));
///   StreamNext next = cp->NextForStream(stream);  // on every wake
class ControlPlane {
 public:
  /// Validates `options` (INVALID_ARGUMENT names the field), builds the
  /// step builder and planner, resumes the job in `state_store` if it holds
  /// one (FAILED_PRECONDITION naming the field when it is another job's) or
  /// writes this job's identity there, and starts the planning thread.
  static absl::StatusOr<std::unique_ptr<ControlPlane>> Start(
      ControlPlaneOptions options);

  /// Shuts down (see `Shutdown`) and joins the planning thread.
  ~ControlPlane();
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  /// Registers (or re-registers) an agent as `request.rank()`.
  /// INVALID_ARGUMENT for a rank outside the world or a world size other
  /// than the scheduler's. Re-registration replaces the old entry and ends
  /// the rank's open stream with ABORTED.
  absl::StatusOr<v1::RegisterResponse> Register(
      const v1::RegisterRequest& request);

  /// Opens a plan stream for a registered `rank` starting at `from_step`;
  /// returns its id. `wake` is called whenever `NextForStream` may have
  /// something new; it runs on any thread, never under the control plane's
  /// lock, may be called after `CloseStream`, and must not block.
  /// INVALID_ARGUMENT for a bad rank or step, FAILED_PRECONDITION for an
  /// unregistered rank or another session's id. A rank's older open stream
  /// ends with ABORTED.
  absl::StatusOr<int64_t> OpenStream(int rank, absl::string_view session_id,
                                     int64_t from_step,
                                     std::function<void()> wake);

  /// What stream `stream_id` should do next. A returned step counts as sent
  /// (the stream's cursor moves past it). Never blocks.
  StreamNext NextForStream(int64_t stream_id);

  /// Forgets a stream (its RPC is over). The rank shows as disconnected
  /// unless a newer stream is open. Unknown ids are ignored.
  void CloseStream(int64_t stream_id);

  /// Takes one rank's timings for one step; see the class comment. Only
  /// validates and records (a refit it makes due runs on the planner
  /// thread), so gRPC reactions may call it. Errors:
  /// INVALID_ARGUMENT (rank outside the world, step not planned, task index
  /// that does not exist or does not name the rank, tasks missing or
  /// repeated, bad seconds, group size or tokens that differ from the plan),
  /// FAILED_PRECONDITION (unregistered rank, stale epoch), ALREADY_EXISTS
  /// (this rank already reported the step).
  absl::StatusOr<v1::ReportAck> ReportTimings(const v1::TimingReport& report);

  /// Takes a profile: every entry becomes a single-sequence observation
  /// (intra-node when the group fits a node). Validated like timings; all
  /// entries or none are taken. Like `ReportTimings`, never refits itself.
  absl::StatusOr<v1::ReportAck> ReportProfile(const v1::ProfileReport& report);

  /// Rendezvous store. Keys must start with "<session_id>/"; sizes and key
  /// count are bounded by the options (INVALID_ARGUMENT, RESOURCE_EXHAUSTED
  /// naming the limit). FAILED_PRECONDITION for another session's id.
  /// Setting a key again replaces its value.
  absl::Status StoreSet(absl::string_view session_id, absl::string_view key,
                        absl::string_view value);
  /// The values of `keys`, in order; NOT_FOUND naming the first missing key
  /// (callers poll).
  absl::StatusOr<std::vector<std::string>> StoreGet(
      absl::string_view session_id, const std::vector<std::string>& keys);
  /// Removes the store entries of epochs before `epoch` (keys under
  /// "<session>/e<k>/" with k < epoch); returns how many.
  int64_t PurgeStoreBefore(int64_t epoch);

  /// A snapshot of the whole state for GetStatus and dcp-ctl.
  v1::StatusResponse Status() const;

  /// The whole plan of `step` while it is kept (planned, not yet completed);
  /// NOT_FOUND otherwise.
  absl::StatusOr<v1::StepPlan> PlannedStep(int64_t step) const;

  /// Stops planning new steps; every stream ends with the drain marker after
  /// the last planned step, whose number is returned (-1 when none). With
  /// `stop`, `WaitForStop` returns once every open stream has ended.
  /// Idempotent; a later call may add `stop`.
  int64_t Drain(bool stop);

  /// Whether a stop was requested and every plan stream has ended.
  bool stopped() const;

  /// Blocks until a stop is requested (or `Shutdown`), then at most `grace`
  /// for the open streams to end. Returns whether they all did.
  bool WaitForStop(absl::Duration grace);

  /// Blocks until at least `steps` steps have been planned, or planning can
  /// no longer get there (drain, error, shutdown) or `timeout` passed.
  /// Returns whether `steps` were planned.
  bool AwaitPlanned(int64_t steps, absl::Duration timeout) const;

  /// Does the planner thread's work on the calling thread: ends the
  /// start-up profile when due, runs a due refit before each step and plans
  /// every step the look-ahead allows now; returns how many. For owners
  /// that set `start_planner_thread = false` (with the thread running it
  /// competes with it harmlessly).
  absl::StatusOr<int> PlanAvailableSteps();

  /// Ends every stream with UNAVAILABLE, stops planning and wakes every
  /// waiter. Idempotent.
  void Shutdown();

  const std::string& session_id() const { return session_id_; }
  int world_size() const { return options_.world_size; }

 private:
  explicit ControlPlane(ControlPlaneOptions options);

  /// The planner thread: plans (and refits) until shutdown, waiting for a
  /// wake when there is nothing to do.
  void PlannerLoop();
  /// Ends the profile stage if due, runs a due refit, then plans the next
  /// step if the look-ahead allows; false when it planned none.
  absl::StatusOr<bool> PlanOneStep() ABSL_LOCKS_EXCLUDED(plan_mu_);
  /// Plans the next step under `plan_mu_`; the event, or nullopt when the
  /// look-ahead allows none (or the step was discarded).
  absl::StatusOr<std::optional<PlannedStepEvent>> PlanLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(plan_mu_);
  /// Ends the profile stage if every rank answered or its deadline passed:
  /// refits from every observation, calls the callbacks, then lets
  /// planning start (so step 0 is planned with the refitted model).
  void EndProfileIfDue();
  /// Tells the planner thread that there may be work (a refit due, a step
  /// completed, the profile answered, shutdown).
  void WakePlanner() ABSL_LOCKS_EXCLUDED(wake_mu_);
  int64_t WakeGeneration() const ABSL_LOCKS_EXCLUDED(wake_mu_);
  /// Waits until `WakePlanner` was called after `WakeGeneration` returned
  /// `seen`, or `timeout` passed.
  void AwaitWake(int64_t seen, absl::Duration timeout) const
      ABSL_LOCKS_EXCLUDED(wake_mu_);
  v1::ReportAck Ack(int64_t planned_steps) const;
  /// Passes what an accepted report recorded to the ledger; returns whether
  /// the planner has work now (a refit due, a step completed).
  bool TakeRecorded(RecordedTimings recorded);

  /// Builds the step builder and the planner.
  absl::Status BuildPlanner();
  /// A planner for a world of `ranks` with the ledger's current model.
  absl::Status ReplacePlanner(int ranks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(plan_mu_);
  /// Declares failed ranks and tells the owner (`on_rank_event`).
  void CheckRanks();
  /// Resumes the job `durable` holds (see the class comment).
  absl::Status Resume(const DurableState& durable);
  /// Records the kept steps' reports again; adds their count to
  /// `replayed`.
  absl::Status ReplayReports(const DurableState& durable, int64_t& replayed);
  /// Writes the ledger's model if it changed since last written; a failure
  /// stops planning.
  absl::Status PersistModelIfNewer() ABSL_LOCKS_EXCLUDED(plan_mu_);

  const ControlPlaneOptions options_;
  /// Views `options_.lengths`, which never moves.
  const LengthView lengths_;
  const std::string session_id_;
  const ReportLimits limits_;
  RealClock real_clock_;
  Clock* const clock_;
  ThreadCpuClock thread_cpu_clock_;
  Clock* const planning_cpu_clock_;
  /// Makes effects durable before they leave (keeps nothing without a
  /// state store).
  const JobJournal journal_;

  // The parts; each has its own lock (see the class comment).
  ReportLedger ledger_;
  RefitDriver refits_;
  ProfileStage profile_;
  StepWindow window_;
  KvStore store_;

  /// Serialises planning; owns the step builder and the planner.
  mutable absl::Mutex plan_mu_;
  std::optional<StepBuilder> builder_ ABSL_GUARDED_BY(plan_mu_);
  std::optional<Planner> planner_ ABSL_GUARDED_BY(plan_mu_);
  /// Ranks the planner plans for (the current world's size).
  int planner_world_ ABSL_GUARDED_BY(plan_mu_) = 0;
  /// The version of the ledger's model the planner has, and the one last
  /// written to the state store.
  int64_t planner_model_version_ ABSL_GUARDED_BY(plan_mu_) = 0;
  int64_t persisted_model_version_ ABSL_GUARDED_BY(plan_mu_) = 0;

  /// Bumped by `WakePlanner`; the planner thread waits for a change.
  mutable absl::Mutex wake_mu_;
  int64_t wake_generation_ ABSL_GUARDED_BY(wake_mu_) = 0;

  std::thread planner_thread_;
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_CONTROL_CONTROL_PLANE_H_
