// StepWindow's world: which ranks an epoch trains on, what a shrink
// abandons and re-serves, liveness checks, and the restore of all of it
// after a restart. The rest of the class is in step_window.cc.
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

std::vector<int> StepWindow::RanksOf(const std::vector<bool>& world) const {
  std::vector<int> ranks;
  for (int r = 0; r < options_.world_size; ++r) {
    if (world[r]) ranks.push_back(r);
  }
  return ranks;
}

absl::StatusOr<std::vector<bool>> StepWindow::WorldOf(
    const std::vector<int>& ranks) const {
  std::vector<bool> world(options_.world_size, ranks.empty());
  for (int r : ranks) {
    RETURN_IF_ERROR(CheckRank(r, options_.world_size));
    world[r] = true;
  }
  return world;
}

void StepWindow::ShrinkLocked(
    RankFailureEvent& event,
    absl::FunctionRef<absl::Status(const EpochChange&)> persist) {
  const std::vector<bool> next = NextMembers();
  if (std::count(next.begin(), next.end(), true) == 0) return;
  EpochChange change{epoch_ + 1, RanksOf(next), completed_steps_,
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
  epoch_ = change.epoch;
  members_ = next;
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
  liveness_.ForgetAwaited();  // Nothing abandoned is owed any more.
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
    event.failed = liveness_.Check(clock_->Now());
    if (event.failed.empty()) return std::nullopt;
    event.policy = std::string(RankFailurePolicyName(options_.on_rank_failure));
    for (int rank : event.failed) {
      event.reasons.push_back(liveness_.FailureReason(rank));
      // A hung rank's stream is ended, so that when it wakes up it
      // registers again and is admitted like any returning rank.
      wakes.push_back(CloseRankStream(
          rank, absl::UnavailableError(absl::StrCat(
                    event.reasons.back(), ": declared failed under ",
                    event.policy, "; register again to rejoin"))));
    }
    if (options_.on_rank_failure == RankFailurePolicy::kShrink) {
      ShrinkLocked(event, persist);
      wakes = AllWakes();
    }
    event.holding = Holding();
    event.epoch = epoch_;
    event.members = RanksOf(members_);
    event.live_ranks = liveness_.live_ranks();
  }
  CallAll(wakes);
  return event;
}

absl::Status StepWindow::Restore(RestoredWindow restored) {
  ASSIGN_OR_RETURN(std::vector<bool> members, WorldOf(restored.members));
  std::deque<StepRecord> records;
  for (size_t i = 0; i < restored.steps.size(); ++i) {
    RestoredWindow::Kept& kept = restored.steps[i];
    const int64_t step = restored.completed_steps + static_cast<int64_t>(i);
    if (kept.plan.step() != step) {
      return absl::FailedPreconditionError(absl::StrCat(
          "restoring step ", step, " from the plan of step ", kept.plan.step()));
    }
    ASSIGN_OR_RETURN(std::vector<bool> world, WorldOf(kept.members));
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
  epoch_ = restored.epoch;
  members_ = std::move(members);
  // A job under way owes its members' registrations from the restart on.
  const absl::Time restarted = clock_->Now();
  for (int r = 0; r < options_.world_size; ++r) {
    if (!members_[r]) {
      liveness_.RestoreFailed(r);
    } else if (planned_steps_ > 0) {
      liveness_.OnRestarted(r, restarted);
    }
  }
  reserve_ = std::move(restored.reserve);
  abandoned_ranges_ = std::move(restored.abandoned);
  abandoned_steps_ = 0;
  for (const auto& [from, to] : abandoned_ranges_) abandoned_steps_ += to - from;
  reserved_planned_ = restored.reserved_planned;
  epoch_abandoned_from_ = restored.epoch_abandoned_from;
  for (StepRecord& record : window_) {
    if (record.plan->epoch() == epoch_) MarkAbandonedFrom(record);
  }
  return absl::OkStatus();
}

}  // namespace dcp
