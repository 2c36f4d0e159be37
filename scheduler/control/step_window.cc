#include "scheduler/control/step_window.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "google/protobuf/arena.h"
#include "scheduler/planner/plan_proto.h"

namespace dcp {
namespace {

void Call(const std::shared_ptr<std::function<void()>>& wake) {
  if (wake != nullptr && *wake) (*wake)();
}

StreamNext End(absl::Status status) {
  StreamNext next;
  next.kind = StreamNext::Kind::kEnd;
  next.end_status = std::move(status);
  return next;
}

StreamNext Send(std::shared_ptr<const v1::PlanUpdate> update) {
  StreamNext next;
  next.kind = StreamNext::Kind::kSend;
  next.update = std::move(update);
  return next;
}

}  // namespace

void StepWindow::CallAll(const WakeList& wakes) {
  for (const auto& wake : wakes) Call(wake);
}

StepWindow::StepWindow(StepWindowOptions options)
    : options_(std::move(options)),
      limits_{options_.world_size, options_.gpus_per_node,
              options_.max_task_seconds},
      clock_(options_.clock),
      membership_{options_.world_size, options_.rank_timeout,
                  options_.step_timeout, options_.on_rank_failure},
      world_(membership_),
      rank_streams_(options_.world_size, 0) {}

// ----------------------------------------------------------- registration

absl::StatusOr<v1::RegisterResponse> StepWindow::Register(
    const v1::RegisterRequest& request,
    std::optional<RankFailureEvent>* returned) {
  RETURN_IF_ERROR(CheckRank(request.rank(), options_.world_size));
  if (request.fixed_world() && membership_.Shrinks()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank ", request.rank(),
        " cannot follow a change of the world (an execute-mode agent: its "
        "Gloo training groups span the whole world), and this scheduler "
        "shrinks the world when a rank fails (--on_rank_failure=shrink); "
        "run the scheduler with --on_rank_failure=hold, or the agents in "
        "another mode"));
  }
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
    if (world_.rank(request.rank()).registered) {
      old_wake = CloseRankStream(
          request.rank(),
          absl::AbortedError(absl::StrCat(
              "rank ", request.rank(), " registered again (pid ", request.pid(),
              " on '", request.host(), "'); this plan stream is replaced")));
    }
    if (world_.Registered(request, clock_->Now()) && returned != nullptr) {
      *returned = world_.ReturnEvent(request.rank());
    }

    response.set_session_id(options_.session_id);
    response.set_epoch(world_.epoch());
    response.set_world_size(options_.world_size);
    response.set_gpus_per_node(options_.gpus_per_node);
    response.set_model(options_.model_name);
    response.set_next_step(NextUnreported(request.rank()));
    response.set_max_message_bytes(options_.max_message_bytes);
  }
  Call(old_wake);
  return response;
}

int64_t StepWindow::NextUnreported(int rank) const {
  for (size_t i = 0; i < window_.size(); ++i) {
    if (window_[i].members[rank] && !window_[i].reported[rank]) {
      return completed_steps_ + static_cast<int64_t>(i);
    }
  }
  return planned_steps_;
}

// ------------------------------------------------------------------ streams

std::shared_ptr<std::function<void()>> StepWindow::CloseRankStream(
    int rank, const absl::Status& why) {
  const int64_t id = rank_streams_[rank];
  if (id == 0) return nullptr;
  rank_streams_[rank] = 0;
  world_.StreamClosed(rank, clock_->Now());
  auto it = streams_.find(id);
  if (it == streams_.end()) return nullptr;
  if (!it->second.closed.has_value()) it->second.closed = why;
  return it->second.wake;
}

StepWindow::WakeList StepWindow::AllWakes() const {
  WakeList wakes;
  wakes.reserve(streams_.size());
  for (const auto& [id, stream] : streams_) wakes.push_back(stream.wake);
  return wakes;
}

void StepWindow::WakeAll() const {
  WakeList wakes;
  {
    absl::MutexLock lock(&mu_);
    wakes = AllWakes();
  }
  CallAll(wakes);
}

absl::StatusOr<int64_t> StepWindow::OpenStream(int rank,
                                               absl::string_view session_id,
                                               int64_t from_step,
                                               std::function<void()> wake) {
  RETURN_IF_ERROR(CheckRank(rank, options_.world_size));
  RETURN_IF_ERROR(CheckSession(session_id, options_.session_id));
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
    if (!world_.rank(rank).registered) {
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
    rank_streams_[rank] = id;
    world_.StreamOpened(rank, clock_->Now());
  }
  Call(old_wake);
  return id;
}

StreamNext StepWindow::NextForStream(
    int64_t stream_id, absl::FunctionRef<bool(int rank)> ask_profile,
    const std::shared_ptr<const v1::PlanUpdate>& profile_request) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) {
    return End(absl::CancelledError("the plan stream is closed"));
  }
  StreamState& stream = it->second;
  if (stream.closed.has_value()) return End(*stream.closed);
  if (stream.drain_sent) return End(absl::OkStatus());
  if (!stream.profile_sent && ask_profile(stream.rank)) {
    stream.profile_sent = true;
    world_.ProfileAsked(stream.rank, clock_->Now());
    return Send(profile_request);
  }
  int64_t step = std::max(stream.cursor, completed_steps_);
  // Steps of a world without the rank are not its.
  while (step < planned_steps_ &&
         !window_[step - completed_steps_].members[stream.rank]) {
    stream.cursor = ++step;
  }
  if (step < planned_steps_) {
    stream.cursor = step + 1;
    world_.StepSent(stream.rank, step, clock_->Now());
    return Send(window_[step - completed_steps_].updates[stream.rank]);
  }
  if (StreamsDrain()) {
    auto update = std::make_shared<v1::PlanUpdate>();
    update->mutable_drain()->set_last_step(planned_steps_ - 1);
    stream.drain_sent = true;
    return Send(std::move(update));
  }
  return StreamNext();  // kWait
}

void StepWindow::CloseStream(int64_t stream_id) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) return;
  const int rank = it->second.rank;
  if (rank_streams_[rank] == stream_id) {
    rank_streams_[rank] = 0;
    world_.StreamClosed(rank, clock_->Now());
  }
  streams_.erase(it);
}

// ------------------------------------------------------------------ reports

const StepWindow::StepRecord* StepWindow::KeptLocked(int64_t step) const {
  if (step < completed_steps_ || step >= planned_steps_) return nullptr;
  return &window_[step - completed_steps_];
}

StepWindow::StepRecord* StepWindow::KeptLocked(int64_t step) {
  if (step < completed_steps_ || step >= planned_steps_) return nullptr;
  return &window_[step - completed_steps_];
}

absl::StatusOr<AcceptedTimings> StepWindow::ValidateLocked(
    const v1::TimingReport& report, const StepRecord* record,
    bool replay) const {
  const int rank = report.rank();
  KnownStep known;
  known.registered = replay || world_.rank(rank).registered;
  known.epoch = world_.epoch();
  known.planned_steps = planned_steps_;
  known.completed_steps = completed_steps_;
  if (record != nullptr) {
    // A step planned before a grow is still its own epoch's.
    known.epoch = record->plan->epoch();
    if (!record->members[rank]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank, " is not in the world of step ", report.step(),
          " (epoch ", record->plan->epoch(),
          "): it was left out when it failed, and is in the world again "
          "from the next epoch on"));
    }
    known.plan = record->plan;
    known.rank_tasks = record->updates[rank]->step().tasks_size();
    known.already_reported = record->reported[rank];
  }
  return ValidateTimingReport(report, known, limits_);
}

bool StepWindow::DiscardsLocked(const v1::TimingReport& report) const {
  if (AbandonedLocked(report.step())) return true;
  // A report from an epoch before the step's (or, for a step no longer
  // kept, before the current one) is stale: a rank that was left out (held,
  // or its answer lost) sends it when it comes back. It has nothing to add
  // and is answered, not refused, so the sender goes on to the next epoch.
  const StepRecord* record = KeptLocked(report.step());
  if (record != nullptr) return report.epoch() < record->plan->epoch();
  return report.step() >= 0 && report.step() < completed_steps_ &&
         report.epoch() < world_.epoch();
}

absl::StatusOr<bool> StepWindow::CheckTimings(
    const v1::TimingReport& report) const {
  RETURN_IF_ERROR(CheckReportAddress(report, options_.world_size));
  absl::MutexLock lock(&mu_);
  if (DiscardsLocked(report)) return false;
  RETURN_IF_ERROR(
      ValidateLocked(report, KeptLocked(report.step()), /*replay=*/false)
          .status());
  return true;
}

absl::StatusOr<RecordedTimings> StepWindow::RecordTimings(
    const v1::TimingReport& report) {
  return Record(report, /*replay=*/false);
}

absl::StatusOr<RecordedTimings> StepWindow::ReplayTimings(
    const v1::TimingReport& report) {
  return Record(report, /*replay=*/true);
}

absl::StatusOr<RecordedTimings> StepWindow::Record(
    const v1::TimingReport& report, bool replay) {
  RETURN_IF_ERROR(CheckReportAddress(report, options_.world_size));
  const int rank = report.rank();
  absl::MutexLock lock(&mu_);
  if (DiscardsLocked(report)) {
    world_.Seen(rank, clock_->Now());
    RecordedTimings discarded;
    discarded.discarded = true;
    discarded.completed_steps = completed_steps_;
    discarded.planned_steps = planned_steps_;
    return discarded;
  }
  StepRecord* record = KeptLocked(report.step());
  ASSIGN_OR_RETURN(AcceptedTimings accepted,
                   ValidateLocked(report, record, replay));
  Accept(*record, rank, report.step(), accepted);

  RecordedTimings recorded;
  recorded.observations = std::move(accepted.observations);
  if (record->reports == record->member_count) {
    MeasuredStep& step = recorded.completed.emplace();
    step.predicted_seconds = record->plan->predicted_makespan_s();
    step.measured_seconds = *std::max_element(record->rank_seconds.begin(),
                                              record->rank_seconds.end());
    step.max_busy_seconds = record->max_busy;
    step.sync_reported = record->sync_reported;
    step.epoch = record->plan->epoch();
    step.step = record->plan->step();
    step.tokens = record->plan->total_tokens();
    for (int r = 0; r < options_.world_size; ++r) {
      if (record->members[r]) {
        step.rank_busy_seconds.push_back(record->rank_busy[r]);
      }
    }
    AdvanceCompleted();  // `record` may be gone after this.
  }
  recorded.completed_steps = completed_steps_;
  recorded.planned_steps = planned_steps_;
  return recorded;
}

void StepWindow::Accept(StepRecord& record, int rank, int64_t step,
                        const AcceptedTimings& accepted) {
  record.reported[rank] = true;
  record.rank_seconds[rank] = accepted.busy_seconds + accepted.sync_seconds;
  record.rank_busy[rank] = accepted.busy_seconds;
  record.max_busy = std::max(record.max_busy, accepted.busy_seconds);
  record.sync_reported = record.sync_reported || accepted.sync_seconds > 0;
  ++record.reports;
  const absl::Time now = clock_->Now();
  world_.Reported(rank, step, now);
  RankLiveness& liveness = world_.liveness();
  if (record.reports == record.member_count) {
    liveness.OnStepComplete(step);
  } else if (record.reports == 1) {
    // The ranks still missing now owe the step to the rest of its world;
    // they are named once, at the step's first report.
    liveness.OnStepAwaiting(step, MissingRanks(record), now);
  } else {
    // The missing ranks are fewer, never others: their clocks restart.
    liveness.OnStepReport(step, now);
  }
}

std::vector<int> StepWindow::MissingRanks(const StepRecord& record) const {
  std::vector<int> missing;
  for (int r = 0; r < options_.world_size; ++r) {
    if (record.members[r] && !record.reported[r]) missing.push_back(r);
  }
  return missing;
}

void StepWindow::AdvanceCompleted() {
  while (!window_.empty() &&
         window_.front().reports == window_.front().member_count) {
    window_.pop_front();
    ++completed_steps_;
  }
}

absl::Status StepWindow::CheckProfileSender(int rank, int64_t epoch) {
  RETURN_IF_ERROR(CheckRank(rank, options_.world_size));
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckSender(absl::StrCat("profile of rank ", rank), rank,
                              world_.rank(rank).registered, epoch,
                              world_.epoch()));
  world_.Seen(rank, clock_->Now());
  return absl::OkStatus();
}

int64_t StepWindow::planned_steps() const {
  absl::MutexLock lock(&mu_);
  return planned_steps_;
}

// ----------------------------------------------------------------- planning

bool StepWindow::PlannedAll() const {
  return options_.max_steps > 0 &&
         planned_steps_ - reserved_planned_ >= options_.max_steps &&
         reserve_.empty();
}

bool StepWindow::StreamsDrain() const {
  if (draining_) return true;
  if (!PlannedAll()) return false;
  // Under shrink a failure may still abandon planned steps, whose samples
  // then need planning again: the job ends when its last step completed.
  return !world_.shrinks() || window_.empty();
}

bool StepWindow::HasWork() const {
  return !shutdown_ && !draining_ && planner_error_.ok() && !world_.holding() &&
         planned_steps_ < completed_steps_ + options_.lookahead_steps &&
         !PlannedAll();
}

std::optional<StepToPlan> StepWindow::NextStepToPlan() const {
  absl::MutexLock lock(&mu_);
  if (!HasWork()) return std::nullopt;
  const std::vector<bool> next = world_.NextMembers();
  const int64_t epoch = world_.epoch();
  StepToPlan out{planned_steps_, next == world_.members() ? epoch : epoch + 1};
  out.members = RanksOf(next);
  out.grows = out.epoch != epoch;
  if (out.members.empty()) return std::nullopt;  // Every rank failed.
  if (!reserve_.empty()) {
    out.reserve_of = reserve_.front().step;
    out.samples = reserve_.front().samples;
  }
  return out;
}

StepArena StepArena::New() {
  // A 1,024-rank step is ~2 MB in ~100k messages (plan and views).
  google::protobuf::ArenaOptions options;
  options.start_block_size = 64 << 10;
  options.max_block_size = 1 << 20;
  StepArena out;
  out.arena = std::make_shared<google::protobuf::Arena>(options);
  out.plan =
      google::protobuf::Arena::CreateMessage<v1::StepPlan>(out.arena.get());
  return out;
}

StepArena StepArena::Of(const v1::StepPlan& plan) {
  StepArena out = New();
  *out.plan = plan;
  return out;
}

StepWindow::StepRecord StepWindow::MakeRecord(
    StepArena plan, int64_t epoch, const std::vector<bool>& members) const {
  StepRecord record;
  record.arena = std::move(plan.arena);
  record.plan = plan.plan;
  for (v1::CommGroup& group : *record.plan->mutable_groups()) {
    group.set_rendezvous_prefix(
        absl::StrCat(options_.session_id, "/e", epoch, "/g",
                     absl::StrJoin(group.ranks(), "-")));
  }
  // The views live on the plan's arena, freed with it when the step and
  // the last write of it are done.
  google::protobuf::Arena* const arena = record.arena.get();
  std::vector<v1::PlanUpdate*> updates;
  std::vector<v1::RankStep*> views;
  updates.reserve(options_.world_size);
  views.reserve(options_.world_size);
  for (int rank = 0; rank < options_.world_size; ++rank) {
    updates.push_back(
        google::protobuf::Arena::CreateMessage<v1::PlanUpdate>(arena));
    views.push_back(updates.back()->mutable_step());
  }
  FillRankViews(*record.plan, views);
  record.updates.reserve(updates.size());
  const bool whole_world =
      std::count(members.begin(), members.end(), true) == options_.world_size;
  for (v1::PlanUpdate* update : updates) {
    // After a shrink the agents' gradient sync spans the epoch's members.
    for (int r = 0; r < options_.world_size && !whole_world; ++r) {
      if (members[r]) update->mutable_step()->add_world_ranks(r);
    }
    // Shares the arena's ownership.
    record.updates.emplace_back(record.arena, update);
  }
  record.reported.assign(options_.world_size, false);
  record.rank_seconds.assign(options_.world_size, 0.0);
  record.members = members;
  record.member_count =
      static_cast<int>(std::count(members.begin(), members.end(), true));
  record.rank_busy.assign(options_.world_size, 0.0);
  return record;
}

bool StepWindow::AddPlannedStep(const v1::StepPlan& plan, int64_t step,
                                int64_t epoch) {
  StepToPlan planned{step, epoch};
  for (int r = 0; r < options_.world_size; ++r) planned.members.push_back(r);
  return AddPlannedStep(plan, planned);
}

bool StepWindow::AddPlannedStep(const v1::StepPlan& plan,
                                const StepToPlan& planned) {
  return AddPlannedStep(StepArena::Of(plan), planned);
}

bool StepWindow::AddPlannedStep(StepArena plan, const StepToPlan& planned) {
  std::vector<bool> members(options_.world_size, false);
  for (int r : planned.members) members[r] = true;
  StepRecord record = MakeRecord(std::move(plan), planned.epoch, members);
  absl::MutexLock lock(&mu_);
  if (!HasWork() || planned.step != planned_steps_) return false;
  if (planned.epoch != world_.epoch()) {
    // The first step of a new world (a grow; a shrink moved the epoch on
    // already). Only the planning thread moves epochs forward this way.
    if (planned.epoch != world_.epoch() + 1) return false;
    world_.MoveTo(planned.epoch, members);
    epoch_abandoned_from_ = -1;  // A grow abandons nothing.
  } else if (members != world_.members()) {
    return false;
  }
  if (planned.reserve_of >= 0) {
    if (reserve_.empty() || reserve_.front().step != planned.reserve_of) {
      return false;
    }
    reserve_.pop_front();
    ++reserved_planned_;
  }
  MarkAbandonedFrom(record);
  window_.push_back(std::move(record));
  ++planned_steps_;
  return true;
}

void StepWindow::FailPlanning(absl::Status error) {
  absl::MutexLock lock(&mu_);
  planner_error_ = std::move(error);
  draining_ = true;
}

absl::StatusOr<v1::StepPlan> StepWindow::PlannedStep(int64_t step) const {
  absl::MutexLock lock(&mu_);
  if (step < completed_steps_ || step >= planned_steps_) {
    return absl::NotFoundError(
        absl::StrCat("step ", step, " is not kept: the window holds steps [",
                     completed_steps_, ", ", planned_steps_, ")"));
  }
  return *window_[step - completed_steps_].plan;
}

bool StepWindow::AwaitPlanned(int64_t steps, absl::Duration timeout) const {
  const auto done = [this, steps]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return planned_steps_ >= steps || draining_ || PlannedAll() || shutdown_ ||
           !planner_error_.ok();
  };
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  return planned_steps_ >= steps;
}

}  // namespace dcp
