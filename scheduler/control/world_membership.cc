#include "scheduler/control/world_membership.h"

#include <algorithm>
#include <string>
#include <utility>

#include "common/status_macros.h"
#include "scheduler/control/report_validation.h"

namespace dcp {

std::vector<int> RanksOf(const std::vector<bool>& world) {
  std::vector<int> ranks;
  for (size_t r = 0; r < world.size(); ++r) {
    if (world[r]) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

absl::StatusOr<std::vector<bool>> WorldOf(const std::vector<int>& ranks,
                                          int world_size) {
  std::vector<bool> world(world_size, ranks.empty());
  for (int r : ranks) {
    RETURN_IF_ERROR(CheckRank(r, world_size));
    world[r] = true;
  }
  return world;
}

WorldMembership::WorldMembership(WorldMembershipOptions options)
    : options_(std::move(options)),
      ranks_(options_.world_size),
      liveness_(
          {options_.world_size, options_.rank_timeout, options_.step_timeout}),
      members_(options_.world_size, true) {}

// ------------------------------------------------------- what a rank did

bool WorldMembership::Registered(const v1::RegisterRequest& request,
                                 absl::Time now) {
  RankRecord& rank = ranks_[request.rank()];
  rank.registered = true;
  rank.host = request.host();
  rank.gpu = request.gpu();
  rank.pid = request.pid();
  rank.last_seen = now;
  return liveness_.OnRegistered(request.rank(), now);
}

void WorldMembership::StreamOpened(int rank, absl::Time now) {
  ranks_[rank].last_seen = now;
  liveness_.OnStreamOpened(rank, now);
}

void WorldMembership::StreamClosed(int rank, absl::Time now) {
  liveness_.OnStreamClosed(rank, now);
}

void WorldMembership::StepSent(int rank, int64_t step, absl::Time now) {
  RankRecord& r = ranks_[rank];
  r.last_sent_step = std::max(r.last_sent_step, step);
  r.last_seen = now;
  liveness_.OnStepSent(rank, step, now);
}

void WorldMembership::Reported(int rank, int64_t step, absl::Time now) {
  RankRecord& r = ranks_[rank];
  r.last_reported_step = std::max(r.last_reported_step, step);
  ++r.reported_steps;
  r.last_seen = now;
  liveness_.OnReported(rank, step, now);
}

void WorldMembership::ProfileAsked(int rank, absl::Time now) {
  ranks_[rank].last_seen = now;
}

void WorldMembership::Seen(int rank, absl::Time now) {
  ranks_[rank].last_seen = now;
  liveness_.OnSeen(rank, now);
}

// ------------------------------------------------------------- the world

bool WorldMembership::holding() const {
  return options_.on_rank_failure == RankFailurePolicy::kHold &&
         liveness_.failed_ranks() > 0;
}

std::vector<bool> WorldMembership::NextMembers() const {
  if (options_.on_rank_failure != RankFailurePolicy::kShrink) return members_;
  std::vector<bool> next(options_.world_size);
  for (int r = 0; r < options_.world_size; ++r) next[r] = !liveness_.failed(r);
  return next;
}

void WorldMembership::MoveTo(int64_t epoch, std::vector<bool> members) {
  epoch_ = epoch;
  members_ = std::move(members);
}

RankFailureEvent WorldMembership::DeclareFailed(absl::Time now) {
  RankFailureEvent event;
  event.failed = liveness_.Check(now);
  if (event.failed.empty()) return event;
  event.policy = std::string(RankFailurePolicyName(options_.on_rank_failure));
  for (int rank : event.failed) {
    event.reasons.push_back(liveness_.FailureReason(rank));
  }
  return event;
}

RankFailureEvent WorldMembership::ReturnEvent(int rank) const {
  RankFailureEvent event;
  event.returned = rank;
  event.policy = std::string(RankFailurePolicyName(options_.on_rank_failure));
  event.holding = holding();
  event.epoch = epoch_;
  event.live_ranks = liveness_.live_ranks();
  event.members = RanksOf(NextMembers());
  return event;
}

void WorldMembership::Restore(int64_t epoch, std::vector<bool> members,
                              bool under_way, absl::Time now) {
  MoveTo(epoch, std::move(members));
  for (int r = 0; r < options_.world_size; ++r) {
    if (!members_[r]) {
      liveness_.RestoreFailed(r);
    } else if (under_way) {
      liveness_.OnRestarted(r, now);
    }
  }
}

void WorldMembership::FillStatus(absl::Time now,
                                 v1::StatusResponse* out) const {
  out->set_epoch(epoch_);
  out->set_live_ranks(liveness_.live_ranks());
  out->set_rank_failures(liveness_.failures());
  if (detects_failures()) {
    out->set_on_rank_failure(
        std::string(RankFailurePolicyName(options_.on_rank_failure)));
  }
  out->set_holding(holding());
  out->set_epoch_world_size(
      static_cast<int32_t>(std::count(members_.begin(), members_.end(), true)));
  for (int r = 0; r < options_.world_size; ++r) {
    const RankRecord& state = ranks_[r];
    v1::RankStatus* rank = out->add_ranks();
    rank->set_rank(r);
    rank->set_host(state.host);
    rank->set_last_reported_step(state.last_reported_step);
    rank->set_last_sent_step(state.last_sent_step);
    rank->set_gpu(state.gpu);
    rank->set_pid(state.pid);
    rank->set_registered(state.registered);
    rank->set_failed(liveness_.failed(r));
    rank->set_member(members_[r]);
    if (state.registered) {
      rank->set_idle_seconds(absl::ToDoubleSeconds(now - state.last_seen));
    }
  }
}

}  // namespace dcp
