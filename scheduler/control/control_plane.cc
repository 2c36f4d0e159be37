#include "scheduler/control/control_plane.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "scheduler/planner/plan_proto.h"

namespace dcp {
namespace {

using WakeList = std::vector<std::shared_ptr<std::function<void()>>>;

void CallAll(const WakeList& wakes) {
  for (const auto& wake : wakes) {
    if (wake != nullptr && *wake) (*wake)();
  }
}

std::string RandomSessionId() {
  absl::BitGen gen;
  return absl::StrFormat("%016x", absl::Uniform<uint64_t>(gen));
}

CostModel InitialModel(const ControlPlaneOptions& options) {
  if (options.cost_model.has_value()) return *options.cost_model;
  return CostModel::FromSpecs(options.cluster, options.model,
                              options.world_size);
}

/// A key for error messages: short keys as they are, long ones cut.
std::string Printable(absl::string_view key) {
  constexpr size_t kShown = 80;
  if (key.size() <= kShown) return absl::StrCat("'", key, "'");
  return absl::StrCat("'", key.substr(0, kShown), "...' (", key.size(),
                      " bytes)");
}

bool SaneSeconds(double s, double max) {
  return std::isfinite(s) && s >= 0 && s <= max;
}

absl::Status CheckOptions(const ControlPlaneOptions& o) {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("control plane options: ", what));
  };
  if (o.lengths.empty()) return bad("the length table is empty");
  if (o.window <= 0) return bad("window must be positive");
  if (o.world_size <= 0) return bad("world_size must be positive");
  if (o.tokens_per_step <= 0) return bad("tokens_per_step must be positive");
  if (o.lookahead_steps < 1) return bad("lookahead_steps must be at least 1");
  if (o.balance_steps < 0) return bad("balance_steps must be >= 0");
  if (o.max_steps < 0) return bad("max_steps must be >= 0 (0 = unlimited)");
  if (o.refit_every < 1) return bad("refit_every must be at least 1");
  if (o.observation_window < 1) {
    return bad("observation_window must be at least 1");
  }
  if (!(o.prior_weight > 0) || !std::isfinite(o.prior_weight)) {
    return bad("prior_weight must be positive and finite");
  }
  if (o.step_error_window < 1) return bad("step_error_window must be >= 1");
  if (o.sync_window < 1) return bad("sync_window must be at least 1");
  if (!(o.max_task_seconds > 0)) return bad("max_task_seconds must be > 0");
  if (o.store_max_key_bytes <= 0 || o.store_max_value_bytes <= 0 ||
      o.store_max_keys <= 0 || o.store_max_total_bytes <= 0) {
    return bad("store limits must be positive");
  }
  if (o.max_message_bytes <= 0) return bad("max_message_bytes must be > 0");
  if (o.cluster.gpus_per_node <= 0) return bad("gpus_per_node must be > 0");
  if (o.profile_at_start) {
    if (o.profile_timeout <= absl::ZeroDuration()) {
      return bad("profile_timeout must be positive");
    }
    if (o.profile_lengths.empty() || o.profile_recompute.empty()) {
      return bad("profile_lengths and profile_recompute must not be empty");
    }
    for (int64_t length : o.profile_lengths) {
      if (length <= 0) return bad("profile_lengths must be positive");
    }
    for (double r : o.profile_recompute) {
      if (!(r >= 0 && r <= 1))
        return bad("profile_recompute must be in [0, 1]");
    }
    if (o.profile_repetitions < 1) {
      return bad("profile_repetitions must be at least 1");
    }
  }
  if (absl::StrContains(o.session_id, '/')) {
    return bad(
        absl::StrCat("session_id '", o.session_id, "' must not contain '/'"));
  }
  return ValidateModelSpec(o.model);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ControlPlane>> ControlPlane::Start(
    ControlPlaneOptions options) {
  RETURN_IF_ERROR(CheckOptions(options));
  auto cp = absl::WrapUnique(new ControlPlane(std::move(options)));
  {
    absl::MutexLock lock(&cp->plan_mu_);
    StepBuilderOptions steps;
    steps.tokens_per_step = cp->options_.tokens_per_step;
    steps.seed = cp->options_.seed;
    steps.lookahead_steps = cp->options_.balance_steps;
    ASSIGN_OR_RETURN(StepBuilder builder,
                     StepBuilder::Create(cp->lengths_, std::move(steps)));
    cp->builder_.emplace(std::move(builder));
    PlannerOptions planner_options = cp->options_.planner;
    planner_options.world_size = cp->options_.world_size;
    ASSIGN_OR_RETURN(Planner planner,
                     Planner::Create(cp->initial_model_, planner_options));
    cp->planner_.emplace(std::move(planner));
  }
  if (cp->options_.start_planner_thread) {
    cp->planner_thread_ = std::thread([raw = cp.get()] { raw->PlannerLoop(); });
  }
  return cp;
}

ControlPlane::ControlPlane(ControlPlaneOptions options)
    : options_(std::move(options)),
      lengths_(options_.lengths, options_.window),
      session_id_(options_.session_id.empty() ? RandomSessionId()
                                              : options_.session_id),
      initial_model_(InitialModel(options_)),
      clock_(options_.clock != nullptr ? options_.clock : &real_clock_),
      ranks_(options_.world_size),
      profile_request_(MakeProfileRequest()),
      profile_pending_(options_.profile_at_start),
      profile_answered_(options_.world_size, false),
      model_(initial_model_) {}

v1::ProfileRequest ControlPlane::MakeProfileRequest() const {
  v1::ProfileRequest request;
  request.set_epoch(0);
  for (int64_t length : options_.profile_lengths) request.add_lengths(length);
  for (double r : options_.profile_recompute) request.add_recompute(r);
  request.set_repetitions(options_.profile_repetitions);
  const int world = options_.world_size;
  const int largest = std::min(world, options_.cluster.gpus_per_node);
  int group_id = 1;
  for (int p = 1; p <= largest; ++p) {
    if (world % p != 0 || options_.model.heads % p != 0) continue;
    request.add_group_sizes(p);
    if (p == 1) continue;
    for (int first = 0; first < world; first += p) {
      v1::CommGroup& group = *request.add_groups();
      group.set_id(group_id++);
      for (int r = first; r < first + p; ++r) group.add_ranks(r);
      group.set_rendezvous_prefix(
          absl::StrCat(session_id_, "/e", request.epoch(), "/profile/g",
                       absl::StrJoin(group.ranks(), "-")));
    }
  }
  return request;
}

ControlPlane::~ControlPlane() {
  Shutdown();
  if (planner_thread_.joinable()) planner_thread_.join();
}

// ---------------------------------------------------------------- planning

bool ControlPlane::PlannerHasWork() const {
  return !shutdown_ && !draining_ && planner_error_.ok() && !profile_pending_ &&
         planned_steps_ < completed_steps_ + options_.lookahead_steps &&
         (options_.max_steps == 0 || planned_steps_ < options_.max_steps);
}

bool ControlPlane::PlannerShouldRun() const {
  return shutdown_ || PlannerHasWork();
}

void ControlPlane::PlannerLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      const absl::Condition run(this, &ControlPlane::PlannerShouldRun);
      if (profile_pending_) {
        // The profile deadline is by the injected clock: poll it.
        mu_.AwaitWithTimeout(run, absl::Milliseconds(100));
      } else {
        mu_.Await(run);
      }
      if (shutdown_) return;
    }
    // Errors are kept in planner_error_ (and end the streams); the loop then
    // waits for shutdown.
    PlanOneStep().IgnoreError();
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

ControlPlane::StepRecord ControlPlane::MakeRecord(const StepPlan& plan,
                                                  int64_t epoch) const {
  StepRecord record;
  record.plan = ToProto(plan, lengths_, epoch);
  for (v1::CommGroup& group : *record.plan.mutable_groups()) {
    group.set_rendezvous_prefix(absl::StrCat(
        session_id_, "/e", epoch, "/g", absl::StrJoin(group.ranks(), "-")));
  }
  std::vector<v1::RankStep> views =
      AllRankViews(record.plan, options_.world_size);
  record.updates.reserve(views.size());
  for (v1::RankStep& view : views) {
    auto update = std::make_shared<v1::PlanUpdate>();
    update->mutable_step()->Swap(&view);
    record.updates.push_back(std::move(update));
  }
  record.reported.assign(options_.world_size, false);
  record.rank_seconds.assign(options_.world_size, 0.0);
  return record;
}

bool ControlPlane::ExpireProfileIfDue() {
  {
    absl::MutexLock lock(&mu_);
    if (!profile_pending_) return false;
    if (profile_ending_ || clock_->Now() < profile_deadline_) return true;
    profile_ending_ = true;
  }
  FinishProfile(/*timed_out=*/true);
  return false;
}

void ControlPlane::FinishProfile(bool timed_out) {
  std::optional<PendingRefit> pending;
  {
    absl::MutexLock lock(&mu_);
    if (!observations_.empty()) {
      new_observations_ = 0;
      pending = MakePendingRefit();
    }
  }
  std::optional<RefitEvent> refit;
  if (pending.has_value()) refit = Refit(*std::move(pending));
  ProfileDoneEvent done;
  {
    absl::MutexLock lock(&mu_);
    done.timed_out = timed_out;
    for (int r = 0; r < options_.world_size; ++r) {
      (profile_answered_[r] ? done.answered : done.missing).push_back(r);
    }
    done.observations = static_cast<int64_t>(observations_.size());
  }
  // The callbacks run before planning may start, so logs read in order.
  if (refit.has_value() && options_.on_refit) options_.on_refit(*refit);
  if (options_.on_profile_done) options_.on_profile_done(done);
  WakeList wakes;
  {
    absl::MutexLock lock(&mu_);
    profile_pending_ = false;
    wakes = AllWakes();
  }
  CallAll(wakes);
}

absl::StatusOr<bool> ControlPlane::PlanOneStep() {
  if (ExpireProfileIfDue()) return false;
  WakeList wakes;
  PlannedStepEvent event;
  absl::Status failure;
  {
    absl::MutexLock plan_lock(&plan_mu_);
    int64_t step = 0;
    int64_t epoch = 0;
    {
      absl::MutexLock lock(&mu_);
      if (!PlannerHasWork()) return false;
      step = planned_steps_;
      epoch = epoch_;
      if (planner_model_version_ != model_version_) {
        planner_->set_cost_model(model_);
        planner_model_version_ = model_version_;
      }
    }
    const absl::Time start = clock_->Now();
    absl::StatusOr<std::vector<int64_t>> samples = builder_->NextStep();
    absl::StatusOr<StepPlan> plan =
        samples.ok() ? planner_->PlanStep(step, *samples, lengths_)
                     : absl::StatusOr<StepPlan>(samples.status());
    if (plan.ok()) {
      StepRecord record = MakeRecord(*plan, epoch);
      event.epoch = epoch;
      event.step = step;
      event.samples = record.plan.samples_size();
      event.tokens = record.plan.total_tokens();
      event.tasks = record.plan.tasks_size();
      event.groups = record.plan.groups_size();
      event.predicted_seconds = record.plan.predicted_makespan_s();
      event.planning_time = clock_->Now() - start;

      absl::MutexLock lock(&mu_);
      // A drain or shutdown while planning discards the step: the step
      // number Drain returned stays the last one.
      if (!PlannerHasWork() || epoch != epoch_) return false;
      window_.push_back(std::move(record));
      ++planned_steps_;
      if (options_.max_steps > 0 && planned_steps_ >= options_.max_steps) {
        draining_ = true;
      }
      wakes = AllWakes();
    } else {
      failure =
          absl::Status(plan.status().code(),
                       absl::StrCat("planning step ", step,
                                    " failed: ", plan.status().message()));
      absl::MutexLock lock(&mu_);
      planner_error_ = failure;
      draining_ = true;
      wakes = AllWakes();
    }
  }
  CallAll(wakes);
  if (!failure.ok()) return failure;
  if (options_.on_step_planned) options_.on_step_planned(event);
  return true;
}

bool ControlPlane::AwaitPlanned(int64_t steps, absl::Duration timeout) const {
  struct Wanted {
    const ControlPlane* cp;
    int64_t steps;
  } wanted{this, steps};
  auto done = [](Wanted* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const ControlPlane& cp = *w->cp;
    return cp.planned_steps_ >= w->steps || cp.draining_ || cp.shutdown_ ||
           !cp.planner_error_.ok();
  };
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(+done, &wanted), timeout);
  return planned_steps_ >= steps;
}

// ----------------------------------------------------------- registration

absl::Status ControlPlane::CheckRank(int rank) const {
  if (rank < 0 || rank >= options_.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is outside the world of ", options_.world_size,
        " ranks (0..", options_.world_size - 1, ")"));
  }
  return absl::OkStatus();
}

absl::Status ControlPlane::CheckSession(absl::string_view session_id) const {
  if (session_id != session_id_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session '", session_id, "' is not this scheduler's ('", session_id_,
        "'): the scheduler restarted or the id is wrong; "
        "register again"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::RegisterResponse> ControlPlane::Register(
    const v1::RegisterRequest& request) {
  RETURN_IF_ERROR(CheckRank(request.rank()));
  if (request.world_size() != 0 &&
      request.world_size() != options_.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", request.rank(), " was started for a world of ",
        request.world_size(), " ranks but this scheduler plans for ",
        options_.world_size));
  }
  std::shared_ptr<std::function<void()>> old_wake;
  v1::RegisterResponse response;
  {
    absl::MutexLock lock(&mu_);
    RankState& rank = ranks_[request.rank()];
    if (rank.registered) {
      old_wake = CloseRankStream(
          request.rank(),
          absl::AbortedError(absl::StrCat(
              "rank ", request.rank(), " registered again (pid ", request.pid(),
              " on '", request.host(), "'); this plan stream is replaced")));
    }
    rank.registered = true;
    rank.host = request.host();
    rank.gpu = request.gpu();
    rank.pid = request.pid();
    rank.last_seen = clock_->Now();
    if (profile_pending_ && profile_deadline_ == absl::InfiniteFuture()) {
      profile_deadline_ = rank.last_seen + options_.profile_timeout;
    }

    response.set_session_id(session_id_);
    response.set_epoch(epoch_);
    response.set_world_size(options_.world_size);
    response.set_gpus_per_node(options_.cluster.gpus_per_node);
    response.set_model(options_.model.name);
    response.set_next_step(NextUnreported(request.rank()));
    response.set_max_message_bytes(options_.max_message_bytes);
  }
  if (old_wake != nullptr && *old_wake) (*old_wake)();
  return response;
}

int64_t ControlPlane::NextUnreported(int rank) const {
  for (size_t i = 0; i < window_.size(); ++i) {
    if (!window_[i].reported[rank]) {
      return completed_steps_ + static_cast<int64_t>(i);
    }
  }
  return planned_steps_;
}

// ------------------------------------------------------------------ streams

std::shared_ptr<std::function<void()>> ControlPlane::CloseRankStream(
    int rank, const absl::Status& why) {
  const int64_t id = ranks_[rank].stream;
  if (id == 0) return nullptr;
  ranks_[rank].stream = 0;
  auto it = streams_.find(id);
  if (it == streams_.end()) return nullptr;
  if (!it->second.closed.has_value()) it->second.closed = why;
  return it->second.wake;
}

WakeList ControlPlane::AllWakes() const {
  WakeList wakes;
  wakes.reserve(streams_.size());
  for (const auto& [id, stream] : streams_) wakes.push_back(stream.wake);
  return wakes;
}

absl::StatusOr<int64_t> ControlPlane::OpenStream(int rank,
                                                 absl::string_view session_id,
                                                 int64_t from_step,
                                                 std::function<void()> wake) {
  RETURN_IF_ERROR(CheckRank(rank));
  RETURN_IF_ERROR(CheckSession(session_id));
  if (from_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("from_step must be >= 0, not ", from_step));
  }
  std::shared_ptr<std::function<void()>> old_wake;
  int64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) {
      return absl::UnavailableError("the scheduler is shutting down");
    }
    if (!ranks_[rank].registered) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank, " has not registered; call Register first"));
    }
    old_wake = CloseRankStream(
        rank, absl::AbortedError(absl::StrCat("a newer plan stream of rank ",
                                              rank, " replaced this one")));
    id = next_stream_id_++;
    StreamState& stream = streams_[id];
    stream.rank = rank;
    stream.cursor = from_step;
    stream.wake = std::make_shared<std::function<void()>>(std::move(wake));
    ranks_[rank].stream = id;
    ranks_[rank].last_seen = clock_->Now();
  }
  if (old_wake != nullptr && *old_wake) (*old_wake)();
  return id;
}

StreamNext ControlPlane::NextForStream(int64_t stream_id) {
  StreamNext next;
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) {
    next.kind = StreamNext::Kind::kEnd;
    next.end_status = absl::CancelledError("the plan stream is closed");
    return next;
  }
  StreamState& stream = it->second;
  if (stream.closed.has_value()) {
    next.kind = StreamNext::Kind::kEnd;
    next.end_status = *stream.closed;
    return next;
  }
  if (stream.drain_sent) {
    next.kind = StreamNext::Kind::kEnd;
    next.end_status = absl::OkStatus();
    return next;
  }
  if (profile_pending_ && !stream.profile_sent &&
      !profile_answered_[stream.rank]) {
    next.kind = StreamNext::Kind::kSend;
    auto update = std::make_shared<v1::PlanUpdate>();
    *update->mutable_profile() = profile_request_;
    next.update = std::move(update);
    stream.profile_sent = true;
    ranks_[stream.rank].last_seen = clock_->Now();
    return next;
  }
  const int64_t step = std::max(stream.cursor, completed_steps_);
  if (step < planned_steps_) {
    next.kind = StreamNext::Kind::kSend;
    next.update = window_[step - completed_steps_].updates[stream.rank];
    stream.cursor = step + 1;
    RankState& rank = ranks_[stream.rank];
    rank.last_sent_step = std::max(rank.last_sent_step, step);
    rank.last_seen = clock_->Now();
    return next;
  }
  if (draining_) {
    next.kind = StreamNext::Kind::kSend;
    auto update = std::make_shared<v1::PlanUpdate>();
    update->mutable_drain()->set_last_step(planned_steps_ - 1);
    next.update = std::move(update);
    stream.drain_sent = true;
    return next;
  }
  return next;  // kWait
}

void ControlPlane::CloseStream(int64_t stream_id) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) return;
  RankState& rank = ranks_[it->second.rank];
  if (rank.stream == stream_id) rank.stream = 0;
  streams_.erase(it);
}

// ------------------------------------------------------------------ reports

absl::StatusOr<v1::ReportAck> ControlPlane::ReportTimings(
    const v1::TimingReport& report) {
  RETURN_IF_ERROR(CheckRank(report.rank()));
  const int rank = report.rank();
  const std::string who =
      absl::StrCat("timing report of rank ", rank, " for step ", report.step());
  auto invalid = [&who](auto&&... args) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", args...));
  };

  std::optional<PendingRefit> pending;
  v1::ReportAck ack;
  {
    absl::MutexLock lock(&mu_);
    // Validate everything before changing anything.
    if (!ranks_[rank].registered) {
      return absl::FailedPreconditionError(
          absl::StrCat(who, ": rank ", rank, " has not registered"));
    }
    if (report.epoch() != epoch_) {
      return absl::FailedPreconditionError(
          absl::StrCat(who, ": epoch ", report.epoch(),
                       " is not the current epoch ", epoch_));
    }
    if (report.step() < 0 || report.step() >= planned_steps_) {
      return invalid("the step has not been planned (planned: ",
                     planned_steps_ == 0
                         ? std::string("none")
                         : absl::StrCat("0..", planned_steps_ - 1),
                     ")");
    }
    if (report.step() < completed_steps_) {
      return absl::AlreadyExistsError(
          absl::StrCat(who, ": every rank has already reported the step"));
    }
    StepRecord& record = window_[report.step() - completed_steps_];
    if (record.reported[rank]) {
      return absl::AlreadyExistsError(
          absl::StrCat(who, ": rank ", rank, " already reported the step"));
    }
    if (!SaneSeconds(report.sync_seconds(), options_.max_task_seconds)) {
      return invalid("sync_seconds ", report.sync_seconds(),
                     " is not finite in [0, ", options_.max_task_seconds, "]");
    }
    const v1::StepPlan& plan = record.plan;
    std::vector<bool> seen(plan.tasks_size(), false);
    double busy = 0;
    for (const v1::TaskTiming& timing : report.tasks()) {
      const int index = timing.task_index();
      if (index < 0 || index >= plan.tasks_size()) {
        return invalid("task_index ", index, " does not exist (the step has ",
                       plan.tasks_size(), " tasks)");
      }
      const v1::Task& task = plan.tasks(index);
      if (std::find(task.ranks().begin(), task.ranks().end(), rank) ==
          task.ranks().end()) {
        return invalid("task ", index, " runs on ranks [",
                       absl::StrJoin(task.ranks(), ","), "], not on rank ",
                       rank);
      }
      if (seen[index]) return invalid("task ", index, " is reported twice");
      seen[index] = true;
      if (!(timing.seconds() > 0) ||
          !SaneSeconds(timing.seconds(), options_.max_task_seconds)) {
        return invalid("task ", index, ": seconds ", timing.seconds(),
                       " is not finite in (0, ", options_.max_task_seconds,
                       "]");
      }
      if (timing.group_size() != 0 &&
          timing.group_size() != task.ranks_size()) {
        return invalid("task ", index, " ran with group size ",
                       timing.group_size(), " but the plan has ",
                       task.ranks_size());
      }
      int64_t tokens = 0;
      for (int64_t length : task.lengths()) tokens += length;
      if (timing.tokens() != 0 && timing.tokens() != tokens) {
        return invalid("task ", index, " ran ", timing.tokens(),
                       " tokens but the plan has ", tokens);
      }
      busy += timing.seconds();
    }
    const int expected = record.updates[rank]->step().tasks_size();
    if (report.tasks_size() != expected) {
      return invalid("rank ", rank, " runs ", expected,
                     " tasks in the step but reported ", report.tasks_size());
    }

    // Accept.
    record.reported[rank] = true;
    record.rank_seconds[rank] = busy + report.sync_seconds();
    record.max_busy = std::max(record.max_busy, busy);
    record.sync_reported = record.sync_reported || report.sync_seconds() > 0;
    ++record.reports;
    RankState& state = ranks_[rank];
    state.last_reported_step =
        std::max(state.last_reported_step, report.step());
    ++state.reported_steps;
    state.last_seen = clock_->Now();
    ++timing_reports_;

    // One observation per task, from its first rank, so a task of p ranks
    // is not counted p times.
    std::vector<TaskObservation> observations;
    const int node = options_.cluster.gpus_per_node;
    for (const v1::TaskTiming& timing : report.tasks()) {
      const v1::Task& task = plan.tasks(timing.task_index());
      if (task.ranks(0) != rank) continue;
      TaskObservation& o = observations.emplace_back();
      o.group_size = task.ranks_size();
      o.intra_node =
          task.ranks(0) / node == task.ranks(task.ranks_size() - 1) / node;
      o.recompute = task.recompute();
      o.lengths.assign(task.lengths().begin(), task.lengths().end());
      o.seconds = timing.seconds();
      o.memory_bytes = static_cast<double>(timing.peak_memory_bytes());
    }

    if (record.reports == options_.world_size) {
      const double measured = *std::max_element(record.rank_seconds.begin(),
                                                record.rank_seconds.end());
      const double predicted = plan.predicted_makespan_s();
      if (measured > 0 && predicted > 0) {
        step_errors_.push_back(std::abs(predicted - measured) / measured);
        while (static_cast<int>(step_errors_.size()) >
               options_.step_error_window) {
          step_errors_.pop_front();
        }
      }
      // The step's sync: its time beyond the slowest rank's tasks (see the
      // class comment).
      if (record.sync_reported && measured > 0) {
        syncs_.push_back(SyncObservation{
            std::max(0.0, measured - record.max_busy), measured});
        while (static_cast<int>(syncs_.size()) > options_.sync_window) {
          syncs_.pop_front();
        }
      }
      AdvanceCompleted();
    }
    pending = AddObservations(std::move(observations));
    ack = Ack();
  }
  if (pending.has_value()) {
    std::optional<RefitEvent> refit = Refit(*std::move(pending));
    if (refit.has_value() && options_.on_refit) options_.on_refit(*refit);
  }
  return ack;
}

absl::StatusOr<v1::ReportAck> ControlPlane::ReportProfile(
    const v1::ProfileReport& report) {
  RETURN_IF_ERROR(CheckRank(report.rank()));
  const std::string who = absl::StrCat("profile of rank ", report.rank());
  if (report.profile().entries_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, " has no entries"));
  }
  std::vector<TaskObservation> observations;
  observations.reserve(report.profile().entries_size());
  for (int i = 0; i < report.profile().entries_size(); ++i) {
    const v1::ProfileEntry& e = report.profile().entries(i);
    auto invalid = [&](auto&&... args) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ", entry ", i, ": ", args...));
    };
    if (e.length() <= 0) return invalid("length ", e.length(), " is not > 0");
    if (e.group_size() < 1 || e.group_size() > options_.world_size) {
      return invalid("group_size ", e.group_size(), " is not in [1, ",
                     options_.world_size, "]");
    }
    if (!(e.recompute() >= 0 && e.recompute() <= 1)) {
      return invalid("recompute ", e.recompute(), " is not in [0, 1]");
    }
    if (!(e.seconds() > 0) ||
        !SaneSeconds(e.seconds(), options_.max_task_seconds)) {
      return invalid("seconds ", e.seconds(), " is not finite in (0, ",
                     options_.max_task_seconds, "]");
    }
    if (e.memory_bytes() < 0) {
      return invalid("memory_bytes ", e.memory_bytes(), " is negative");
    }
    TaskObservation& o = observations.emplace_back();
    o.group_size = e.group_size();
    o.intra_node = e.group_size() <= options_.cluster.gpus_per_node;
    o.recompute = e.recompute();
    o.lengths = {e.length()};
    o.seconds = e.seconds();
    o.memory_bytes = static_cast<double>(e.memory_bytes());
  }
  std::optional<PendingRefit> pending;
  bool finish_profile = false;
  v1::ReportAck ack;
  {
    absl::MutexLock lock(&mu_);
    if (!ranks_[report.rank()].registered) {
      return absl::FailedPreconditionError(
          absl::StrCat(who, ": rank ", report.rank(), " has not registered"));
    }
    if (report.epoch() != epoch_) {
      return absl::FailedPreconditionError(
          absl::StrCat(who, ": epoch ", report.epoch(),
                       " is not the current epoch ", epoch_));
    }
    ranks_[report.rank()].last_seen = clock_->Now();
    pending = AddObservations(std::move(observations));
    if (profile_pending_ && !profile_ending_) {
      profile_answered_[report.rank()] = true;
      if (std::all_of(profile_answered_.begin(), profile_answered_.end(),
                      [](bool answered) { return answered; })) {
        // FinishProfile refits from everything, this report included.
        profile_ending_ = true;
        finish_profile = true;
        pending.reset();
      }
    }
    ack = Ack();
  }
  if (pending.has_value()) {
    std::optional<RefitEvent> refit = Refit(*std::move(pending));
    if (refit.has_value() && options_.on_refit) options_.on_refit(*refit);
  }
  if (finish_profile) FinishProfile(/*timed_out=*/false);
  return ack;
}

void ControlPlane::AdvanceCompleted() {
  while (!window_.empty() && window_.front().reports == options_.world_size) {
    window_.pop_front();
    ++completed_steps_;
  }
}

std::optional<ControlPlane::PendingRefit> ControlPlane::AddObservations(
    std::vector<TaskObservation> observations) {
  new_observations_ += static_cast<int64_t>(observations.size());
  for (TaskObservation& o : observations) {
    const double error = RelativeError(o);
    observation_errors_.push_back(error);
    observation_error_sum_ += error;
    observations_.push_back(std::move(o));
  }
  while (static_cast<int>(observations_.size()) > options_.observation_window) {
    observation_error_sum_ -= observation_errors_.front();
    observation_errors_.pop_front();
    observations_.pop_front();
  }
  if (new_observations_ < options_.refit_every || observations_.empty()) {
    return std::nullopt;
  }
  // At most one refit per completed step: at a thousand ranks a step brings
  // thousands of observations, and a refit per `refit_every` of them would
  // fit dozens of times a step to change the plans of the next one once.
  if (completed_steps_ == refit_completed_steps_) return std::nullopt;
  refit_completed_steps_ = completed_steps_;
  new_observations_ = 0;
  return MakePendingRefit();
}

ControlPlane::PendingRefit ControlPlane::MakePendingRefit() const {
  PendingRefit pending;
  pending.window.assign(observations_.begin(), observations_.end());
  pending.version = model_version_;
  pending.syncs.reserve(syncs_.size());
  for (const SyncObservation& sync : syncs_) {
    pending.syncs.push_back(sync.seconds);
  }
  return pending;
}

std::optional<RefitEvent> ControlPlane::Refit(PendingRefit pending) {
  // Always from the initial model: it is the prior, and the window alone
  // decides how far the fit moves from it (no drift from refit to refit).
  // `initial_model_` is immutable, so no lock is needed for the fit.
  absl::StatusOr<CostModel> fitted =
      initial_model_.Fit(pending.window, options_.prior_weight);
  // The task fit keeps the initial model's sync, so the sync is shrunk
  // towards that prior too.
  if (fitted.ok()) {
    fitted = fitted->FitSync(pending.syncs, options_.prior_weight);
  }
  if (!fitted.ok()) return std::nullopt;  // Validated input: cannot happen.
  RefitEvent event;
  event.observations = static_cast<int64_t>(pending.window.size());
  event.error_after = fitted->MeanRelativeError(pending.window);
  absl::MutexLock lock(&mu_);
  // Another refit installed its model while this one was fitting: keep
  // that one (the next refit is at most `refit_every` observations away).
  if (model_version_ != pending.version) return std::nullopt;
  event.error_before = model_.MeanRelativeError(pending.window);
  model_ = *std::move(fitted);
  ++model_version_;
  observation_error_sum_ = 0;
  for (size_t i = 0; i < observations_.size(); ++i) {
    observation_errors_[i] = RelativeError(observations_[i]);
    observation_error_sum_ += observation_errors_[i];
  }
  event.refits = ++refits_;
  event.step_error = StepError();
  event.sync_error = SyncError();
  refit_error_before_ = event.error_before;
  refit_error_after_ = event.error_after;
  return event;
}

double ControlPlane::RelativeError(const TaskObservation& o) const {
  const double predicted =
      model_.TaskSeconds(o.group_size, o.intra_node, o.lengths, o.recompute);
  return std::abs(predicted - o.seconds) / o.seconds;
}

double ControlPlane::ModelError() const {
  if (observations_.empty()) return 0;
  return std::max(0.0, observation_error_sum_) /
         static_cast<double>(observations_.size());
}

double ControlPlane::StepError() const {
  if (step_errors_.empty()) return 0;
  double sum = 0;
  for (double e : step_errors_) sum += e;
  return sum / static_cast<double>(step_errors_.size());
}

double ControlPlane::SyncError() const {
  if (syncs_.empty()) return 0;
  double sum = 0;
  for (const SyncObservation& sync : syncs_) {
    sum += std::abs(model_.SyncSeconds() - sync.seconds) / sync.step_seconds;
  }
  return sum / static_cast<double>(syncs_.size());
}

v1::ReportAck ControlPlane::Ack() const {
  v1::ReportAck ack;
  ack.set_planned_through_step(planned_steps_ - 1);
  ack.set_model_error(ModelError());
  return ack;
}

// -------------------------------------------------------------------- store

absl::Status ControlPlane::StoreSet(absl::string_view session_id,
                                    absl::string_view key,
                                    absl::string_view value) {
  RETURN_IF_ERROR(CheckSession(session_id));
  if (static_cast<int64_t>(key.size()) > options_.store_max_key_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("store key ", Printable(key), " has ", key.size(),
                     " bytes; the limit is ", options_.store_max_key_bytes));
  }
  const std::string prefix = absl::StrCat(session_id_, "/");
  if (!absl::StartsWith(key, prefix) || key.size() == prefix.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("store key ", Printable(key), " must start with '", prefix,
                     "' (a CommGroup.rendezvous_prefix does)"));
  }
  if (static_cast<int64_t>(value.size()) > options_.store_max_value_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "value of store key ", Printable(key), " has ", value.size(),
        " bytes; the limit is ", options_.store_max_value_bytes));
  }
  absl::MutexLock lock(&store_mu_);
  auto it = store_.find(key);
  const int64_t old_bytes =
      it == store_.end()
          ? 0
          : static_cast<int64_t>(it->first.size() + it->second.size());
  const int64_t new_bytes = static_cast<int64_t>(key.size() + value.size());
  if (it == store_.end() &&
      static_cast<int64_t>(store_.size()) >= options_.store_max_keys) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the store holds ", store_.size(),
                     " keys, its limit; cannot add ", Printable(key)));
  }
  if (store_bytes_ - old_bytes + new_bytes > options_.store_max_total_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the store holds ", store_bytes_, " bytes; adding ", Printable(key),
        " would pass its limit of ", options_.store_max_total_bytes));
  }
  store_bytes_ += new_bytes - old_bytes;
  if (it == store_.end()) {
    store_.emplace(std::string(key), std::string(value));
  } else {
    it->second.assign(value.data(), value.size());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ControlPlane::StoreGet(
    absl::string_view session_id, const std::vector<std::string>& keys) {
  RETURN_IF_ERROR(CheckSession(session_id));
  std::vector<std::string> values;
  values.reserve(keys.size());
  absl::MutexLock lock(&store_mu_);
  for (const std::string& key : keys) {
    auto it = store_.find(key);
    if (it == store_.end()) {
      return absl::NotFoundError(
          absl::StrCat("store key ", Printable(key), " is not set (yet)"));
    }
    values.push_back(it->second);
  }
  return values;
}

int64_t ControlPlane::PurgeStoreBefore(int64_t epoch) {
  const std::string prefix = absl::StrCat(session_id_, "/e");
  int64_t purged = 0;
  absl::MutexLock lock(&store_mu_);
  for (auto it = store_.lower_bound(prefix);
       it != store_.end() && absl::StartsWith(it->first, prefix);) {
    absl::string_view rest = absl::string_view(it->first).substr(prefix.size());
    int64_t key_epoch = 0;
    const size_t slash = rest.find('/');
    if (slash != absl::string_view::npos &&
        absl::SimpleAtoi(rest.substr(0, slash), &key_epoch) &&
        key_epoch < epoch) {
      store_bytes_ -=
          static_cast<int64_t>(it->first.size() + it->second.size());
      it = store_.erase(it);
      ++purged;
    } else {
      ++it;
    }
  }
  return purged;
}

// ------------------------------------------------------------ status, drain

v1::StatusResponse ControlPlane::Status() const {
  v1::StatusResponse out;
  {
    // Not under mu_: the store has its own lock, never nested with it.
    absl::MutexLock store_lock(&store_mu_);
    out.set_store_keys(static_cast<int64_t>(store_.size()));
    out.set_store_bytes(store_bytes_);
  }
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  out.set_session_id(session_id_);
  out.set_epoch(epoch_);
  out.set_world_size(options_.world_size);
  out.set_model(options_.model.name);
  out.set_planned_steps(planned_steps_);
  out.set_completed_steps(completed_steps_);
  out.set_draining(draining_);
  for (int r = 0; r < options_.world_size; ++r) {
    const RankState& state = ranks_[r];
    v1::RankStatus* rank = out.add_ranks();
    rank->set_rank(r);
    rank->set_host(state.host);
    rank->set_connected(state.stream != 0);
    rank->set_last_reported_step(state.last_reported_step);
    rank->set_last_sent_step(state.last_sent_step);
    rank->set_lag_steps(planned_steps_ - state.reported_steps);
    rank->set_gpu(state.gpu);
    rank->set_pid(state.pid);
    rank->set_registered(state.registered);
    if (state.registered) {
      rank->set_idle_seconds(absl::ToDoubleSeconds(now - state.last_seen));
    }
  }
  out.set_model_error(ModelError());
  out.set_timing_reports(timing_reports_);
  out.set_refits(refits_);
  const CostModel::Coefficients& c = model_.coefficients();
  auto& coefficients = *out.mutable_coefficients();
  coefficients["lin"] = c.lin;
  coefficients["gemm_half"] = c.gemm_half;
  coefficients["attn"] = c.attn;
  coefficients["attn_half"] = c.attn_half;
  coefficients["a2a_byte_intra"] = c.a2a_byte_intra;
  coefficients["a2a_fixed_intra"] = c.a2a_fixed_intra;
  coefficients["a2a_byte_inter"] = c.a2a_byte_inter;
  coefficients["a2a_fixed_inter"] = c.a2a_fixed_inter;
  coefficients["fixed"] = c.fixed;
  coefficients["grad_sync"] = c.grad_sync;
  coefficients["mem_static"] = c.mem_static;
  coefficients["mem_token"] = c.mem_token;
  coefficients["mem_token_recompute"] = c.mem_token_recompute;
  coefficients["mem_token_base"] = c.mem_token_base;
  out.set_step_error(StepError());
  out.set_sync_error(SyncError());
  out.set_refit_error_before(refit_error_before_);
  out.set_refit_error_after(refit_error_after_);
  out.set_observations(static_cast<int64_t>(observations_.size()));
  out.set_stopping(stop_requested_);
  if (!planner_error_.ok()) {
    out.set_planner_error(std::string(planner_error_.message()));
  }
  return out;
}

absl::StatusOr<v1::StepPlan> ControlPlane::PlannedStep(int64_t step) const {
  absl::MutexLock lock(&mu_);
  if (step < completed_steps_ || step >= planned_steps_) {
    return absl::NotFoundError(
        absl::StrCat("step ", step, " is not kept: the window holds steps [",
                     completed_steps_, ", ", planned_steps_, ")"));
  }
  return window_[step - completed_steps_].plan;
}

int64_t ControlPlane::Drain(bool stop) {
  WakeList wakes;
  int64_t last_step = -1;
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    stop_requested_ = stop_requested_ || stop;
    last_step = planned_steps_ - 1;
    wakes = AllWakes();
  }
  CallAll(wakes);
  return last_step;
}

bool ControlPlane::StreamsEnded() const { return streams_.empty(); }

bool ControlPlane::stopped() const {
  absl::MutexLock lock(&mu_);
  return stop_requested_ && StreamsEnded();
}

bool ControlPlane::WaitForStop(absl::Duration grace) {
  auto requested = [](const ControlPlane* cp) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return cp->stop_requested_ || cp->shutdown_;
  };
  auto ended = [](const ControlPlane* cp) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return cp->StreamsEnded();
  };
  absl::MutexLock lock(&mu_);
  mu_.Await(
      absl::Condition(+requested, static_cast<const ControlPlane*>(this)));
  if (shutdown_) return StreamsEnded();
  return mu_.AwaitWithTimeout(
      absl::Condition(+ended, static_cast<const ControlPlane*>(this)), grace);
}

void ControlPlane::Shutdown() {
  WakeList wakes;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    for (auto& [id, stream] : streams_) {
      if (!stream.closed.has_value()) {
        stream.closed =
            absl::UnavailableError("the scheduler is shutting down");
      }
    }
    for (RankState& rank : ranks_) rank.stream = 0;
    wakes = AllWakes();
  }
  CallAll(wakes);
}

}  // namespace dcp
