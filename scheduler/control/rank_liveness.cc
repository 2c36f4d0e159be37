#include "scheduler/control/rank_liveness.h"

#include <algorithm>

namespace dcp {

absl::string_view RankFailurePolicyName(RankFailurePolicy policy) {
  switch (policy) {
    case RankFailurePolicy::kHold:
      return "hold";
    case RankFailurePolicy::kShrink:
      return "shrink";
  }
  return "?";
}

RankLiveness::RankLiveness(RankLivenessOptions options)
    : options_(options), ranks_(std::max(options.world_size, 0)) {}

bool RankLiveness::OnRegistered(int rank, absl::Time now) {
  Rank& r = ranks_[rank];
  const bool returned = r.failed;
  r.registered = true;
  r.failed = false;
  r.last_heard = now;
  return returned;
}

void RankLiveness::OnStreamOpened(int rank, absl::Time now) {
  ranks_[rank].connected = true;
  ranks_[rank].last_heard = now;
}

void RankLiveness::OnStreamClosed(int rank, absl::Time now) {
  ranks_[rank].connected = false;
  ranks_[rank].last_heard = now;
}

void RankLiveness::OnSeen(int rank, absl::Time now) {
  ranks_[rank].last_heard = now;
}

void RankLiveness::RestoreFailed(int rank) {
  ranks_[rank].failed = true;
  ranks_[rank].connected = false;
}

std::vector<int> RankLiveness::Check(absl::Time now) {
  std::vector<int> failed;
  if (!enabled()) return failed;
  for (int rank = 0; rank < static_cast<int>(ranks_.size()); ++rank) {
    Rank& r = ranks_[rank];
    if (!r.registered || r.connected || r.failed) continue;
    if (now - r.last_heard < options_.timeout) continue;
    r.failed = true;
    ++failures_;
    failed.push_back(rank);
  }
  return failed;
}

int RankLiveness::live_ranks() const {
  return static_cast<int>(
      std::count_if(ranks_.begin(), ranks_.end(),
                    [](const Rank& r) { return r.registered && !r.failed; }));
}

int RankLiveness::failed_ranks() const {
  return static_cast<int>(std::count_if(
      ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.failed; }));
}

}  // namespace dcp
