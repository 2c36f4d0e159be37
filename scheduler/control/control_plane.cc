#include "scheduler/control/control_plane.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "scheduler/control/control_plane_options.h"
#include "scheduler/control/job_journal.h"
#include "scheduler/control/step_stats.h"
#include "scheduler/planner/plan_proto.h"

namespace dcp {
namespace {

using control_plane_internal::CheckOptions;
using control_plane_internal::InitialModel;
using control_plane_internal::LedgerOptions;
using control_plane_internal::LivenessPoll;
using control_plane_internal::ProfileOptions;
using control_plane_internal::StoreOptions;
using control_plane_internal::WindowOptions;

/// How often the planner thread looks at the clock while the start-up
/// profile waits for its deadline (the clock is injected: nothing wakes the
/// thread when it passes).
constexpr absl::Duration kProfilePoll = absl::Milliseconds(100);

/// Renames the planner's ranks 0..n-1 of a world of `members` to theirs.
void MapRanks(const std::vector<int>& members, v1::StepPlan& plan) {
  for (v1::Task& task : *plan.mutable_tasks()) {
    for (int i = 0; i < task.ranks_size(); ++i) {
      task.set_ranks(i, members[task.ranks(i)]);
    }
  }
  for (v1::CommGroup& group : *plan.mutable_groups()) {
    for (int i = 0; i < group.ranks_size(); ++i) {
      group.set_ranks(i, members[group.ranks(i)]);
    }
  }
}

std::string RandomSessionId() {
  absl::BitGen gen;
  return absl::StrFormat("%016x", absl::Uniform<uint64_t>(gen));
}

/// The identity of the job `o` describes, as a state store keeps it
/// (`session_id` as given, possibly empty).
state::JobIdentity JobIdentityOf(const ControlPlaneOptions& o) {
  state::JobIdentity job;
  job.set_session_id(o.session_id);
  job.set_samples(static_cast<int64_t>(o.lengths.size()));
  job.set_lengths_digest(LengthsDigest(o.lengths));
  job.set_window(o.window);
  job.set_tokens_per_step(o.tokens_per_step);
  job.set_seed(o.seed);
  job.set_balance_steps(o.balance_steps);
  job.set_world_size(o.world_size);
  job.set_gpus_per_node(o.cluster.gpus_per_node);
  job.set_model(ModelText(o.model));
  return job;
}

/// A world that a shrink left smaller grows back only under shrink (a
/// returning rank joins a new epoch); under hold its ranks left out would
/// stay out for good, silently. FAILED_PRECONDITION naming both.
absl::Status CheckPolicyResumes(const DurableState& durable,
                                const ControlPlaneOptions& options) {
  const int members = durable.members.empty()
                          ? options.world_size
                          : static_cast<int>(durable.members.size());
  if (options.on_rank_failure != RankFailurePolicy::kHold ||
      members >= options.world_size) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the state holds a job that --on_rank_failure=shrink left on ", members,
      " of its ", options.world_size, " ranks (epoch ", durable.epoch,
      ": ranks [", absl::StrJoin(durable.members, ","),
      "]), and this scheduler's --on_rank_failure is hold, which never takes "
      "the ranks left out back; restart with --on_rank_failure=shrink, or "
      "use a new --state_dir"));
}

/// Checks that a resumed job is `options`' and fixes what a resume keeps:
/// the stored session, and no start-up profile once steps were planned.
absl::Status PrepareResume(const DurableState& durable,
                           ControlPlaneOptions& options) {
  RETURN_IF_ERROR(CheckSameJob(*durable.job, JobIdentityOf(options)));
  RETURN_IF_ERROR(CheckPolicyResumes(durable, options));
  options.session_id = durable.job->session_id();
  if (durable.planned_steps() > 0) options.profile_at_start = false;
  return absl::OkStatus();
}

// What `on_step_planned` is told of `proto`, planned for `next` in
// `planning_time`; the busy seconds of the step's members only (ranks a
// shrink left out are not idle in it).
PlannedStepEvent PlannedEventOf(const v1::StepPlan& proto,
                                const StepToPlan& next,
                                absl::Duration planning_time,
                                const CostModel& model, int world_size) {
  PlannedStepEvent event;
  event.epoch = next.epoch;
  event.step = next.step;
  event.samples = proto.samples_size();
  event.tokens = proto.total_tokens();
  event.tasks = proto.tasks_size();
  event.groups = proto.groups_size();
  event.predicted_seconds = proto.predicted_makespan_s();
  event.planning_time = planning_time;
  for (const v1::Task& task : proto.tasks()) {
    event.task_group_sizes.push_back(task.ranks_size());
    event.task_recompute.push_back(task.recompute());
    event.task_ulysses.push_back(task.ulysses() > 0 ? task.ulysses()
                                                    : task.ranks_size());
  }
  const std::vector<double> busy =
      PredictedRankBusySeconds(proto, model, world_size);
  for (int r : next.members) {
    event.predicted_rank_busy_seconds.push_back(busy[r]);
  }
  return event;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ControlPlane>> ControlPlane::Start(
    ControlPlaneOptions options) {
  RETURN_IF_ERROR(CheckOptions(options));
  const DurableState* durable = options.state_store != nullptr
                                    ? &options.state_store->recovered()
                                    : nullptr;
  const bool resume = durable != nullptr && durable->job.has_value();
  if (resume) {
    RETURN_IF_ERROR(PrepareResume(*durable, options));
  } else if (options.session_id.empty()) {
    options.session_id = RandomSessionId();
  }
  auto cp = absl::WrapUnique(new ControlPlane(std::move(options)));
  RETURN_IF_ERROR(cp->BuildPlanner());
  if (resume) {
    RETURN_IF_ERROR(cp->Resume(*durable));
  } else {
    RETURN_IF_ERROR(cp->journal_.WriteJob(JobIdentityOf(cp->options_)));
  }
  if (cp->options_.start_planner_thread) {
    cp->planner_thread_ = std::thread([raw = cp.get()] { raw->PlannerLoop(); });
  }
  return cp;
}

absl::Status ControlPlane::BuildPlanner() {
  absl::MutexLock lock(&plan_mu_);
  StepBuilderOptions steps;
  steps.tokens_per_step = options_.tokens_per_step;
  steps.seed = options_.seed;
  steps.lookahead_steps = options_.balance_steps;
  ASSIGN_OR_RETURN(StepBuilder builder,
                   StepBuilder::Create(lengths_, std::move(steps)));
  builder_.emplace(std::move(builder));
  PlannerOptions planner_options = options_.planner;
  planner_options.world_size = options_.world_size;
  ASSIGN_OR_RETURN(Planner planner,
                   Planner::Create(InitialModel(options_), planner_options));
  planner_.emplace(std::move(planner));
  planner_world_ = options_.world_size;
  return absl::OkStatus();
}

absl::Status ControlPlane::ReplacePlanner(int ranks) {
  PlannerOptions planner_options = options_.planner;
  planner_options.world_size = ranks;
  int64_t version = -1;
  std::optional<CostModel> model = ledger_.ModelIfNewer(&version);
  ASSIGN_OR_RETURN(Planner planner,
                   Planner::Create(*std::move(model), planner_options));
  planner_.emplace(std::move(planner));
  planner_model_version_ = version;
  planner_world_ = ranks;
  return absl::OkStatus();
}

void ControlPlane::CheckRanks() {
  std::optional<RankFailureEvent> event;
  {
    // Under plan_mu_: a shrink never lands between planning a step and
    // keeping it.
    absl::MutexLock lock(&plan_mu_);
    event = window_.CheckLiveness([this](const EpochChange& change) {
      return journal_.WriteWorldChange(change);
    });
  }
  if (event.has_value() && options_.on_rank_event) {
    options_.on_rank_event(*event);
  }
}

absl::Status ControlPlane::Resume(const DurableState& durable) {
  {
    absl::MutexLock lock(&plan_mu_);
    RETURN_IF_ERROR(ReplayStepBuilder(durable, *builder_));
  }
  if (durable.model.has_value()) {
    ledger_.RestoreModel(ModelFromState(*durable.model, InitialModel(options_)),
                         durable.model->refits());
  }
  {
    // What was resumed is what the store holds: not written again.
    absl::MutexLock lock(&plan_mu_);
    ledger_.ModelIfNewer(&persisted_model_version_);
  }
  RETURN_IF_ERROR(window_.Restore(WindowStateOf(durable)));
  ResumeEvent event;
  RETURN_IF_ERROR(ReplayReports(durable, event.reports));
  for (const auto& [key, value] : durable.store) store_.Restore(key, value);
  event.session_id = session_id_;
  event.epoch = durable.epoch;
  event.members = durable.members;
  event.completed_steps = durable.completed_steps;
  event.planned_steps = durable.planned_steps();
  event.refits = durable.model.has_value() ? durable.model->refits() : 0;
  event.store_keys = static_cast<int64_t>(durable.store.size());
  if (options_.on_resumed) options_.on_resumed(event);
  return absl::OkStatus();
}

absl::Status ControlPlane::ReplayReports(const DurableState& durable,
                                         int64_t& replayed) {
  for (const DurableState::Step& step : durable.steps) {
    for (const v1::TimingReport& report : step.reports) {
      absl::StatusOr<RecordedTimings> recorded = window_.ReplayTimings(report);
      if (!recorded.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the kept report of rank ", report.rank(), " for step ",
            report.step(),
            " does not fit its plan: ", recorded.status().message()));
      }
      TakeRecorded(*std::move(recorded));
      ++replayed;
    }
  }
  return absl::OkStatus();
}

absl::Status ControlPlane::PersistModelIfNewer() {
  if (!journal_.durable()) return absl::OkStatus();
  absl::MutexLock lock(&plan_mu_);
  std::optional<CostModel> model =
      ledger_.ModelIfNewer(&persisted_model_version_);
  if (!model.has_value()) return absl::OkStatus();
  absl::Status written = journal_.WriteModel(*model, ledger_.refits());
  if (!written.ok()) window_.FailPlanning(written);
  return written;
}

ControlPlane::ControlPlane(ControlPlaneOptions options)
    : options_(std::move(options)),
      lengths_(options_.lengths, options_.window),
      session_id_(options_.session_id.empty() ? RandomSessionId()
                                              : options_.session_id),
      limits_{options_.world_size, options_.cluster.gpus_per_node,
              options_.max_task_seconds},
      clock_(options_.clock != nullptr ? options_.clock : &real_clock_),
      planning_cpu_clock_(options_.planning_cpu_clock != nullptr
                              ? options_.planning_cpu_clock
                              : &thread_cpu_clock_),
      journal_(options_.state_store),
      ledger_(LedgerOptions(options_)),
      refits_(InitialModel(options_), options_.prior_weight, &ledger_,
              options_.on_refit),
      profile_(ProfileOptions(options_, session_id_)),
      window_(WindowOptions(options_, session_id_, clock_)),
      store_(StoreOptions(options_, session_id_)) {}

ControlPlane::~ControlPlane() {
  Shutdown();
  if (planner_thread_.joinable()) planner_thread_.join();
}

// ---------------------------------------------------------------- planning

void ControlPlane::WakePlanner() {
  absl::MutexLock lock(&wake_mu_);
  ++wake_generation_;
}

int64_t ControlPlane::WakeGeneration() const {
  absl::MutexLock lock(&wake_mu_);
  return wake_generation_;
}

void ControlPlane::AwaitWake(int64_t seen, absl::Duration timeout) const {
  const auto woken = [this, seen]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return wake_generation_ != seen;
  };
  absl::MutexLock lock(&wake_mu_);
  wake_mu_.AwaitWithTimeout(absl::Condition(&woken), timeout);
}

void ControlPlane::PlannerLoop() {
  while (true) {
    // Read before looking for work, so a wake after the look is not lost.
    const int64_t seen = WakeGeneration();
    if (window_.shut_down()) return;
    // Errors are kept by the window (and end the streams); the loop then
    // waits for shutdown.
    absl::StatusOr<bool> planned = PlanOneStep();
    if (planned.ok() && *planned) continue;
    absl::Duration wait = absl::InfiniteDuration();
    if (window_.detects_failures())
      wait = LivenessPoll(options_.rank_timeout, options_.step_timeout);
    if (profile_.pending()) wait = std::min(wait, kProfilePoll);
    AwaitWake(seen, wait);
  }
}

absl::StatusOr<int> ControlPlane::PlanAvailableSteps() {
  int planned = 0;
  while (true) {
    ASSIGN_OR_RETURN(bool more, PlanOneStep());
    if (!more) return planned;
    ++planned;
  }
}

void ControlPlane::EndProfileIfDue() {
  const std::optional<bool> timed_out = profile_.BeginEnd(clock_->Now());
  if (!timed_out.has_value()) return;
  // The callbacks run before planning may start, so logs read in order.
  refits_.RunNow();
  if (options_.on_profile_done) {
    options_.on_profile_done(
        profile_.Outcome(*timed_out, ledger_.observations()));
  }
  profile_.End();
  window_.WakeAll();
}

absl::StatusOr<bool> ControlPlane::PlanOneStep() {
  CheckRanks();
  EndProfileIfDue();
  // Before planning, so the step is planned with the refitted model.
  refits_.RunDue();
  if (absl::Status kept = PersistModelIfNewer(); !kept.ok()) {
    window_.WakeAll();
    return kept;
  }
  if (profile_.pending()) return false;
  absl::StatusOr<std::optional<PlannedStepEvent>> event;
  {
    absl::MutexLock plan_lock(&plan_mu_);
    event = PlanLocked();
  }
  // A new step, or a planning error that drains: the streams have news.
  if (!event.ok() || event->has_value()) window_.WakeAll();
  RETURN_IF_ERROR(event.status());
  if (!event->has_value()) return false;
  if (options_.on_step_planned) options_.on_step_planned(**event);
  return true;
}

absl::StatusOr<std::optional<PlannedStepEvent>> ControlPlane::PlanLocked() {
  const std::optional<StepToPlan> next = window_.NextStepToPlan();
  if (!next.has_value()) return std::nullopt;
  const int world = static_cast<int>(next->members.size());
  if (world != planner_world_) {
    if (absl::Status built = ReplacePlanner(world); !built.ok()) {
      window_.FailPlanning(built);
      return built;
    }
  }
  if (std::optional<CostModel> model =
          ledger_.ModelIfNewer(&planner_model_version_)) {
    planner_->set_cost_model(*std::move(model));
  }
  // A new world is durable before any plan of it.
  if (next->grows) {
    if (absl::Status kept = journal_.WriteWorldChange(next->GrowChange());
        !kept.ok()) {
      window_.FailPlanning(kept);
      return kept;
    }
  }
  const absl::Time start = clock_->Now();
  const absl::Time cpu_start = planning_cpu_clock_->Now();
  // A step a shrink abandoned is trained again before new samples.
  absl::StatusOr<std::vector<int64_t>> samples =
      next->reserve_of >= 0 ? next->samples : builder_->NextStep();
  absl::StatusOr<StepPlan> plan =
      samples.ok() ? planner_->PlanStep(next->step, *samples, lengths_)
                   : absl::StatusOr<StepPlan>(samples.status());
  if (!plan.ok()) {
    absl::Status failure(plan.status().code(),
                         absl::StrCat("planning step ", next->step,
                                      " failed: ", plan.status().message()));
    window_.FailPlanning(failure);
    return failure;
  }
  // On the arena the step's per-rank views will share.
  StepArena step = StepArena::New();
  v1::StepPlan& proto = *step.plan;
  ToProto(*plan, lengths_, next->epoch, &proto);
  if (world != options_.world_size) MapRanks(next->members, proto);
  const absl::Duration planning_time = clock_->Now() - start;
  const absl::Duration planning_cpu_time =
      planning_cpu_clock_->Now() - cpu_start;
  proto.set_planned_at_unix_micros(absl::ToUnixMicros(clock_->Now()));
  // Durable before any stream can see it.
  if (absl::Status kept = journal_.WritePlan(proto); !kept.ok()) {
    window_.FailPlanning(kept);
    return kept;
  }
  PlannedStepEvent event = PlannedEventOf(
      proto, *next, planning_time, planner_->cost_model(), options_.world_size);
  event.planning_cpu_time = planning_cpu_time;
  // A drain or shutdown while planning discards the step.
  if (!window_.AddPlannedStep(std::move(step), *next)) {
    return std::nullopt;
  }
  return event;
}

bool ControlPlane::AwaitPlanned(int64_t steps, absl::Duration timeout) const {
  return window_.AwaitPlanned(steps, timeout);
}

// ------------------------------------------------- registration, streams

absl::StatusOr<v1::RegisterResponse> ControlPlane::Register(
    const v1::RegisterRequest& request) {
  std::optional<RankFailureEvent> returned;
  ASSIGN_OR_RETURN(v1::RegisterResponse response,
                   window_.Register(request, &returned));
  profile_.OnRegistration(clock_->Now());
  if (returned.has_value()) {
    // Hold ends, or a grow is due: the planner has work.
    if (options_.on_rank_event) options_.on_rank_event(*returned);
    WakePlanner();
  }
  return response;
}

absl::StatusOr<int64_t> ControlPlane::OpenStream(int rank,
                                                 absl::string_view session_id,
                                                 int64_t from_step,
                                                 std::function<void()> wake) {
  return window_.OpenStream(rank, session_id, from_step, std::move(wake));
}

StreamNext ControlPlane::NextForStream(int64_t stream_id) {
  return window_.NextForStream(
      stream_id, [this](int rank) { return profile_.ShouldAsk(rank); },
      profile_.request());
}

void ControlPlane::CloseStream(int64_t stream_id) {
  window_.CloseStream(stream_id);
}

// ------------------------------------------------------------------ reports

v1::ReportAck ControlPlane::Ack(int64_t planned_steps) const {
  v1::ReportAck ack;
  ack.set_planned_through_step(planned_steps - 1);
  ack.set_model_error(ledger_.ModelError());
  return ack;
}

bool ControlPlane::TakeRecorded(RecordedTimings recorded) {
  ledger_.CountTimingReport();
  if (recorded.completed.has_value()) {
    ledger_.AddCompletedStep(*recorded.completed);
  }
  const bool refit_due = ledger_.AddObservations(
      std::move(recorded.observations), recorded.completed_steps);
  return refit_due || recorded.completed.has_value();
}

absl::StatusOr<v1::ReportAck> ControlPlane::ReportTimings(
    const v1::TimingReport& report) {
  if (journal_.durable()) {
    // Durable before it counts. A retry racing this call may be written
    // too; the state keeps one report a rank.
    ASSIGN_OR_RETURN(const bool recorded, window_.CheckTimings(report));
    // A report taken and dropped changes no state.
    if (recorded) RETURN_IF_ERROR(journal_.WriteReport(report));
  }
  ASSIGN_OR_RETURN(RecordedTimings recorded, window_.RecordTimings(report));
  const int64_t planned_steps = recorded.planned_steps;
  if (recorded.discarded) {
    v1::ReportAck ack = Ack(planned_steps);
    ack.set_discarded(true);
    return ack;
  }
  // Under shrink the streams end only once the last step completed.
  if (recorded.completed.has_value() && window_.detects_failures()) {
    window_.WakeAll();
  }
  std::optional<StepCompletedEvent> completed;
  if (recorded.completed.has_value() && options_.on_step_completed) {
    const MeasuredStep& m = *recorded.completed;
    completed = StepCompletedEvent{m.epoch,
                                   m.step,
                                   m.tokens,
                                   m.predicted_seconds,
                                   m.measured_seconds,
                                   m.rank_busy_seconds};
  }
  // A completed step opens the look-ahead; a due refit is the planner's.
  if (TakeRecorded(std::move(recorded))) WakePlanner();
  if (completed.has_value()) options_.on_step_completed(*completed);
  return Ack(planned_steps);
}

absl::StatusOr<v1::ReportAck> ControlPlane::ReportProfile(
    const v1::ProfileReport& report) {
  ASSIGN_OR_RETURN(std::vector<TaskObservation> observations,
                   ValidateProfileReport(report, limits_));
  RETURN_IF_ERROR(window_.CheckProfileSender(report.rank(), report.epoch()));
  // The highest completed-step count counts; the ledger has it already.
  bool wake = ledger_.AddObservations(std::move(observations),
                                      /*completed_steps=*/0);
  // The last answer ends the stage; the planner thread refits from it.
  wake = profile_.Answer(report.rank()) || wake;
  if (wake) WakePlanner();
  return Ack(window_.planned_steps());
}

// -------------------------------------------------------------------- store

absl::Status ControlPlane::StoreSet(absl::string_view session_id,
                                    absl::string_view key,
                                    absl::string_view value) {
  if (journal_.durable()) {
    // Durable before any StoreGet sees it.
    RETURN_IF_ERROR(store_.Check(session_id, key, value));
    RETURN_IF_ERROR(journal_.WriteStoreSet(key, value));
  }
  return store_.Set(session_id, key, value);
}

absl::StatusOr<std::vector<std::string>> ControlPlane::StoreGet(
    absl::string_view session_id, const std::vector<std::string>& keys) {
  return store_.Get(session_id, keys);
}

int64_t ControlPlane::PurgeStoreBefore(int64_t epoch) {
  const int64_t purged = store_.PurgeBefore(epoch);
  // Lost, it only brings stale keys back after a restart.
  journal_.WriteStorePurge(epoch).IgnoreError();
  return purged;
}

// ------------------------------------------------------------ status, drain

v1::StatusResponse ControlPlane::Status() const {
  v1::StatusResponse out;
  const KvStore::Usage usage = store_.usage();
  out.set_store_keys(usage.keys);
  out.set_store_bytes(usage.bytes);
  window_.FillStatus(&out);
  ledger_.FillStatus(&out);
  return out;
}

absl::StatusOr<v1::StepPlan> ControlPlane::PlannedStep(int64_t step) const {
  return window_.PlannedStep(step);
}

int64_t ControlPlane::Drain(bool stop) { return window_.Drain(stop); }

bool ControlPlane::stopped() const { return window_.stopped(); }

bool ControlPlane::WaitForStop(absl::Duration grace) {
  return window_.WaitForStop(grace);
}

void ControlPlane::Shutdown() {
  window_.Shutdown();
  WakePlanner();
}

}  // namespace dcp
