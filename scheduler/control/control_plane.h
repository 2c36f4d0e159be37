#ifndef DCP_SCHEDULER_CONTROL_CONTROL_PLANE_H_
#define DCP_SCHEDULER_CONTROL_CONTROL_PLANE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/model_spec.h"
#include "proto/plan.pb.h"
#include "proto/scheduler_service.pb.h"
#include "scheduler/planner/cost_model.h"
#include "scheduler/planner/plan.h"
#include "scheduler/planner/planner.h"
#include "scheduler/planner/step_builder.h"

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
};

/// What the control plane tells its owner after refitting its cost model.
struct RefitEvent {
  /// Refits so far, this one included.
  int64_t refits = 0;
  /// Observations the model was fitted to.
  int64_t observations = 0;
  /// Mean relative task-time error on those observations of the model
  /// before and after the refit.
  double error_before = 0;
  double error_after = 0;
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
  std::vector<int64_t> profile_lengths = {256, 1024, 4096};
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
  /// Plan on a dedicated thread (the daemon). With false, nothing is planned
  /// until the owner calls `PlanAvailableSteps()` (deterministic tests).
  bool start_planner_thread = true;
  /// Time source for idle times and planning durations; null = real time.
  /// Not owned; must outlive the control plane.
  Clock* clock = nullptr;
  /// Called after each planned step, on the planning thread, without locks
  /// held. Must be thread-safe and quick (it delays planning).
  std::function<void(const PlannedStepEvent&)> on_step_planned;
  /// Called after each refit, on the thread of the report that triggered
  /// it, without locks held. Must be thread-safe and quick.
  std::function<void(const RefitEvent&)> on_refit;
  /// Called once when the start-up profile ends (all answered or timed
  /// out), without locks held. Must be thread-safe and quick.
  std::function<void(const ProfileDoneEvent&)> on_profile_done;
};

/// What a plan stream should do next (`ControlPlane::NextForStream`).
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

/// The core of dcp-scheduler: plans steps ahead of the agents, hands each
/// rank its part of every step, learns task times from their reports and
/// keeps the rendezvous store. No gRPC: the service class translates RPCs
/// into these calls (and `absl::Status` into `grpc::Status`).
///
/// Planning runs on a dedicated thread (never on the caller's), which keeps
/// `completed_steps + lookahead_steps` steps planned; completed means every
/// rank has reported its timings. Each plan is stored as per-rank RankSteps
/// (with every CommGroup's `rendezvous_prefix` set to
/// "<session>/e<epoch>/g<r0>-<r1>-...") until the step completes.
///
/// Plan streams: `OpenStream` registers a wake callback; the control plane
/// calls it (from any thread, never under its lock) whenever
/// `NextForStream` may have something new, and the stream then asks
/// `NextForStream` until it answers kWait. The control plane keeps each
/// stream's cursor, so a stream is sent every step from its `from_step` on
/// exactly once, in order, then the drain marker, and never a stale step.
///
/// Start-up profile (`profile_at_start`): while it is pending, each stream
/// first sends the ProfileRequest (unless its rank already answered) and
/// nothing is planned; the first ReportProfile of every rank counts (later
/// ones, and all after the profile ended, only add observations). When the
/// last rank answers, or `profile_timeout` after the first registration
/// (by the injected clock, checked whenever planning is attempted), the
/// cost model is refitted from the observations so far and planning starts.
///
/// Timing reports are validated in full before any state changes: a
/// rejected report leaves everything as it was. One `TaskObservation` per
/// task (from its first rank) joins a window; every `refit_every` new
/// observations, but no more than once per completed step, the cost model
/// is refitted from the initial model with the window, and later plans use
/// it.
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
/// Thread-safe: every method may be called from any thread. Only
/// `WaitForStop`, `AwaitPlanned`, `PlanAvailableSteps` and the destructor
/// block or take long; everything else is short work under a lock, fit for
/// gRPC reactions (a refit is a 7x7 solve over the observation window).
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
  /// step builder and planner and starts the planning thread.
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

  /// Takes one rank's timings for one step; see the class comment. Errors:
  /// INVALID_ARGUMENT (rank outside the world, step not planned, task index
  /// that does not exist or does not name the rank, tasks missing or
  /// repeated, bad seconds, group size or tokens that differ from the plan),
  /// FAILED_PRECONDITION (unregistered rank, stale epoch), ALREADY_EXISTS
  /// (this rank already reported the step).
  absl::StatusOr<v1::ReportAck> ReportTimings(const v1::TimingReport& report);

  /// Takes a profile: every entry becomes a single-sequence observation
  /// (intra-node when the group fits a node). Validated like timings; all
  /// entries or none are taken.
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

  /// Plans, on the calling thread, every step the look-ahead allows now;
  /// returns how many. For owners that set `start_planner_thread = false`
  /// (with the thread running it competes with it harmlessly).
  absl::StatusOr<int> PlanAvailableSteps();

  /// Ends every stream with UNAVAILABLE, stops planning and wakes every
  /// waiter. Idempotent.
  void Shutdown();

  const std::string& session_id() const { return session_id_; }
  int world_size() const { return options_.world_size; }

 private:
  /// One planned step, kept until every rank reported it.
  struct StepRecord {
    v1::StepPlan plan;
    /// Per-rank views as the messages that carry them, indexed by rank.
    std::vector<std::shared_ptr<const v1::PlanUpdate>> updates;
    /// Per rank: whether it reported, and its task seconds + sync.
    std::vector<bool> reported;
    std::vector<double> rank_seconds;
    int reports = 0;
    /// The largest task-seconds total a rank reported, and whether a rank
    /// reported a sync time (> 0): what the step's sync is learnt from.
    double max_busy = 0;
    bool sync_reported = false;
  };
  struct RankState {
    bool registered = false;
    std::string host;
    int gpu = 0;
    int64_t pid = 0;
    /// The open stream of the rank (0 when none).
    int64_t stream = 0;
    int64_t last_reported_step = -1;
    int64_t last_sent_step = -1;
    int64_t reported_steps = 0;
    absl::Time last_seen = absl::InfinitePast();
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

  explicit ControlPlane(ControlPlaneOptions options);

  /// Plans the next step if the look-ahead allows; false when it did not.
  absl::StatusOr<bool> PlanOneStep() ABSL_LOCKS_EXCLUDED(mu_, plan_mu_);
  void PlannerLoop();
  bool PlannerHasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool PlannerShouldRun() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// The stored form of a plan: prefixes filled and per-rank views cut.
  StepRecord MakeRecord(const StepPlan& plan, int64_t epoch) const;
  /// The wakes of every open stream, to be called after unlocking.
  std::vector<std::shared_ptr<std::function<void()>>> AllWakes() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Ends the open stream of `rank`, if any; returns its wake.
  std::shared_ptr<std::function<void()>> CloseRankStream(
      int rank, const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckRank(int rank) const;
  absl::Status CheckSession(absl::string_view session_id) const;
  /// A refit that is due: the observation window to fit, and the model
  /// version it starts from.
  struct PendingRefit {
    std::vector<TaskObservation> window;
    int64_t version = 0;
    /// The sync window's seconds.
    std::vector<double> syncs;
  };
  /// One completed step's measured sync and step time.
  struct SyncObservation {
    double seconds = 0;
    double step_seconds = 0;
  };
  /// What a refit started now fits: both windows and the model version.
  PendingRefit MakePendingRefit() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Adds observations; when a refit is due, returns what to fit.
  std::optional<PendingRefit> AddObservations(
      std::vector<TaskObservation> observations)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// The ProfileRequest of the current epoch (see the options).
  v1::ProfileRequest MakeProfileRequest() const;
  /// Ends the profile stage; only for the caller that set
  /// `profile_ending_`. Refits from every observation, then lets planning
  /// start (so step 0 is planned with the refitted model) and calls the
  /// callbacks.
  void FinishProfile(bool timed_out) ABSL_LOCKS_EXCLUDED(mu_);
  /// Ends the profile stage if its deadline passed; then refits and calls
  /// the callbacks. Returns whether the profile is still pending.
  bool ExpireProfileIfDue() ABSL_LOCKS_EXCLUDED(mu_);
  /// Fits the window without holding `mu_` (a fit over the whole window is
  /// the most expensive thing a report triggers), then installs the model
  /// unless another refit got there first. Returns the refit event, if any.
  std::optional<RefitEvent> Refit(PendingRefit pending)
      ABSL_LOCKS_EXCLUDED(mu_);
  v1::ReportAck Ack() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double ModelError() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// |predicted - measured| / measured of `o` under `model_`.
  double RelativeError(const TaskObservation& o) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  double StepError() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Mean |grad_sync of `model_` - measured sync| / measured step time over
  /// the sync window (0 when empty).
  double SyncError() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Drops completed steps from the front of the window.
  void AdvanceCompleted() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t NextUnreported(int rank) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool StreamsEnded() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ControlPlaneOptions options_;
  /// Views `options_.lengths`, which never moves.
  const LengthView lengths_;
  const std::string session_id_;
  const CostModel initial_model_;
  RealClock real_clock_;
  Clock* const clock_;

  /// Serialises planning; owns the step builder and the planner. Taken
  /// before `mu_`, never while holding it.
  mutable absl::Mutex plan_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::optional<StepBuilder> builder_ ABSL_GUARDED_BY(plan_mu_);
  std::optional<Planner> planner_ ABSL_GUARDED_BY(plan_mu_);
  /// The version of `model_` the planner has.
  int64_t planner_model_version_ ABSL_GUARDED_BY(plan_mu_) = 0;

  mutable absl::Mutex mu_;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  /// Steps planned so far: the next step to plan.
  int64_t planned_steps_ ABSL_GUARDED_BY(mu_) = 0;
  /// Steps in [0, completed_steps_) have been reported by every rank and
  /// dropped; `window_` holds steps [completed_steps_, planned_steps_).
  int64_t completed_steps_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<StepRecord> window_ ABSL_GUARDED_BY(mu_);
  std::vector<RankState> ranks_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, StreamState> streams_ ABSL_GUARDED_BY(mu_);
  int64_t next_stream_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status planner_error_ ABSL_GUARDED_BY(mu_);
  /// The start-up profile: pending until every rank answered or the
  /// deadline (set at the first registration) passed.
  const v1::ProfileRequest profile_request_;
  bool profile_pending_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<bool> profile_answered_ ABSL_GUARDED_BY(mu_);
  absl::Time profile_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  /// Set by the one caller that ends the profile (`FinishProfile`).
  bool profile_ending_ ABSL_GUARDED_BY(mu_) = false;

  CostModel model_ ABSL_GUARDED_BY(mu_);
  int64_t model_version_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<TaskObservation> observations_ ABSL_GUARDED_BY(mu_);
  /// Parallel to `observations_`: each one's relative error under `model_`,
  /// and their sum, so the model error costs O(1) per report.
  std::deque<double> observation_errors_ ABSL_GUARDED_BY(mu_);
  double observation_error_sum_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t new_observations_ ABSL_GUARDED_BY(mu_) = 0;
  /// `completed_steps_` when the last refit was started from
  /// `AddObservations` (-1 before any).
  int64_t refit_completed_steps_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t refits_ ABSL_GUARDED_BY(mu_) = 0;
  double refit_error_before_ ABSL_GUARDED_BY(mu_) = 0;
  double refit_error_after_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t timing_reports_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<double> step_errors_ ABSL_GUARDED_BY(mu_);
  /// The last `sync_window` completed steps with a measured sync.
  std::deque<SyncObservation> syncs_ ABSL_GUARDED_BY(mu_);

  /// The rendezvous store has its own lock: it is hot while groups form.
  mutable absl::Mutex store_mu_;
  std::map<std::string, std::string, std::less<>> store_
      ABSL_GUARDED_BY(store_mu_);
  int64_t store_bytes_ ABSL_GUARDED_BY(store_mu_) = 0;

  std::thread planner_thread_;
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_CONTROL_CONTROL_PLANE_H_
