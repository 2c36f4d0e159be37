// StepWindow's changes of world: what a shrink abandons and re-serves, the
// liveness check that starts one, and the restore of the window after a
// restart. Who is in the world is its WorldMembership's
// (world_membership.h); the rest of the class is in step_window.cc.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "scheduler/control/step_window.h"

namespace dcp {

void StepWindow::MarkAbandonedFrom(StepRecord& record) const {
  for (auto& update : record.updates) {
    if (epoch_abandoned_from_ < 0) break;
    auto told = std::make_shared<v1::PlanUpdate>(*update);
    told->mutable_step()->set_abandoned_from(epoch_abandoned_from_);
    update = std::move(told);
  }
}

bool StepWindow::AbandonedLocked(int64_t step) const {
  for (const auto& [from, to] : abandoned_ranges_) {
    if (step >= from && step < to) return true;
  }
  return false;
}

void StepWindow::ShrinkLocked(
    RankFailureEvent& event,
    absl::FunctionRef<absl::Status(const EpochChange&)> persist) {
  const std::vector<bool> next = world_.NextMembers();
  if (std::count(next.begin(), next.end(), true) == 0) return;
  EpochChange change{world_.epoch() + 1, RanksOf(next), completed_steps_,
                     planned_steps_, {}};
  for (const StepRecord& record : window_) {
    change.reserve.push_back(
        {record.plan->step(),
         {record.plan->samples().begin(), record.plan->samples().end()}});
    event.reserved_samples += record.plan->samples_size();
  }
  // Durable before a discarded answer or a plan of the new epoch is out.
  if (absl::Status kept = persist(change); !kept.ok()) {
    planner_error_ = std::move(kept);
    draining_ = true;
    event.reserved_samples = 0;
    return;
  }
  world_.MoveTo(change.epoch, next);
  event.abandoned_from = completed_steps_;
  event.abandoned_to = planned_steps_;
  for (ReservedStep& step : change.reserve) {
    reserve_.push_back(std::move(step));
  }
  epoch_abandoned_from_ =
      planned_steps_ > completed_steps_ ? completed_steps_ : -1;
  if (planned_steps_ > completed_steps_) {
    abandoned_ranges_.emplace_back(completed_steps_, planned_steps_);
  }
  abandoned_steps_ += planned_steps_ - completed_steps_;
  world_.liveness().ForgetAwaited();  // Nothing abandoned is owed any more.
  window_.clear();
  completed_steps_ = planned_steps_;
}

std::optional<RankFailureEvent> StepWindow::CheckLiveness() {
  return CheckLiveness([](const EpochChange&) { return absl::OkStatus(); });
}

std::optional<RankFailureEvent> StepWindow::CheckLiveness(
    absl::FunctionRef<absl::Status(const EpochChange&)> persist) {
  if (!detects_failures()) return std::nullopt;
  WakeList wakes;
  RankFailureEvent event;
  {
    absl::MutexLock lock(&mu_);
    event = world_.DeclareFailed(clock_->Now());
    if (event.failed.empty()) return std::nullopt;
    for (size_t i = 0; i < event.failed.size(); ++i) {
      // A hung rank's stream is ended, so that when it wakes up it
      // registers again and is admitted like any returning rank.
      wakes.push_back(CloseRankStream(
          event.failed[i], absl::UnavailableError(absl::StrCat(
                               event.reasons[i], ": declared failed under ",
                               event.policy, "; register again to rejoin"))));
    }
    if (options_.on_rank_failure == RankFailurePolicy::kShrink) {
      ShrinkLocked(event, persist);
      wakes = AllWakes();
    }
    event.holding = world_.holding();
    event.epoch = world_.epoch();
    event.members = RanksOf(world_.members());
    event.live_ranks = world_.liveness().live_ranks();
  }
  CallAll(wakes);
  return event;
}

absl::Status StepWindow::Restore(RestoredWindow restored) {
  ASSIGN_OR_RETURN(std::vector<bool> members,
                   WorldOf(restored.members, options_.world_size));
  std::deque<StepRecord> records;
  for (size_t i = 0; i < restored.steps.size(); ++i) {
    RestoredWindow::Kept& kept = restored.steps[i];
    const int64_t step = restored.completed_steps + static_cast<int64_t>(i);
    if (kept.plan.step() != step) {
      return absl::FailedPreconditionError(absl::StrCat(
          "restoring step ", step, " from the plan of step ", kept.plan.step()));
    }
    ASSIGN_OR_RETURN(std::vector<bool> world,
                     WorldOf(kept.members, options_.world_size));
    const int64_t plan_epoch = kept.plan.epoch();
    records.push_back(MakeRecord(StepArena::Of(kept.plan), plan_epoch, world));
  }
  absl::MutexLock lock(&mu_);
  if (planned_steps_ != 0 || !streams_.empty()) {
    return absl::FailedPreconditionError(
        "the step window can only be restored before it is used");
  }
  completed_steps_ = restored.completed_steps;
  planned_steps_ = completed_steps_ + static_cast<int64_t>(records.size());
  window_ = std::move(records);
  // A job under way owes its members' registrations from the restart on.
  world_.Restore(restored.epoch, std::move(members), planned_steps_ > 0,
                 clock_->Now());
  reserve_ = std::move(restored.reserve);
  abandoned_ranges_ = std::move(restored.abandoned);
  abandoned_steps_ = 0;
  for (const auto& [from, to] : abandoned_ranges_) abandoned_steps_ += to - from;
  reserved_planned_ = restored.reserved_planned;
  epoch_abandoned_from_ = restored.epoch_abandoned_from;
  for (StepRecord& record : window_) {
    if (record.plan->epoch() == world_.epoch()) MarkAbandonedFrom(record);
  }
  return absl::OkStatus();
}

}  // namespace dcp
