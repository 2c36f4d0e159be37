#include "scheduler/control/rank_liveness.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

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
  r.awaited_back = false;
  r.failed = false;
  r.last_heard = now;
  // A rank back (or a new process of it) gets a whole timeout to catch up;
  // its new stream sends again what it owes.
  for (auto& [step, since] : r.awaited) since = now;
  r.sent.clear();
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

void RankLiveness::OnStepSent(int rank, int64_t step, absl::Time now) {
  ranks_[rank].sent.try_emplace(step, now);
}

void RankLiveness::OnSeen(int rank, absl::Time now) {
  ranks_[rank].last_heard = now;
}

void RankLiveness::OnReported(int rank, int64_t step, absl::Time now) {
  Rank& r = ranks_[rank];
  r.last_heard = now;
  r.last_report = now;
  r.awaited.erase(r.awaited.begin(), r.awaited.upper_bound(step));
  r.sent.erase(r.sent.begin(), r.sent.upper_bound(step));
}

void RankLiveness::OnStepAwaiting(int64_t step, const std::vector<int>& missing,
                                  absl::Time now) {
  for (int rank : missing) ranks_[rank].awaited[step] = now;
}

void RankLiveness::OnStepReport(int64_t step, absl::Time now) {
  auto [it, added] = step_reported_.try_emplace(step, now);
  if (!added) it->second = std::max(it->second, now);
}

void RankLiveness::OnStepComplete(int64_t step) { step_reported_.erase(step); }

void RankLiveness::ForgetAwaited() {
  for (Rank& r : ranks_) {
    r.awaited.clear();
    r.sent.clear();
  }
  step_reported_.clear();
}

int64_t RankLiveness::OverdueStep(const Rank& r, absl::Time now) const {
  for (const auto& [step, since] : r.awaited) {
    absl::Time started = since;
    if (auto it = step_reported_.find(step); it != step_reported_.end()) {
      started = std::max(started, it->second);
    }
    if (now - started >= options_.timeout) return step;
  }
  return -1;
}

int64_t RankLiveness::StalledStep(const Rank& r, absl::Time now) const {
  if (options_.step_timeout <= absl::ZeroDuration() || !r.connected ||
      r.sent.empty()) {
    return -1;
  }
  const auto& [step, sent] = *r.sent.begin();
  const absl::Time since = std::max(sent, r.last_report);
  return now - since >= options_.step_timeout ? step : -1;
}

std::string RankLiveness::FailureReason(int rank) const {
  const Rank& r = ranks_[rank];
  if (!r.failed) return "";
  if (r.awaited_back) {
    return absl::StrCat("rank ", rank, " did not register within ",
                        absl::FormatDuration(options_.timeout),
                        " (--rank_timeout) of the scheduler's restart");
  }
  if (r.stalled) {
    return absl::StrCat("rank ", rank, " made no progress on step ",
                        r.hung_step, " for ",
                        absl::FormatDuration(options_.step_timeout),
                        " (--step_timeout): its plan stream is open but it "
                        "reported nothing");
  }
  if (r.hung_step >= 0) {
    return absl::StrCat("rank ", rank, " did not report step ", r.hung_step,
                        " for ", absl::FormatDuration(options_.timeout),
                        " (--rank_timeout) after the rest of its world did");
  }
  return absl::StrCat("rank ", rank, " had no plan stream and was silent for ",
                      absl::FormatDuration(options_.timeout),
                      " (--rank_timeout)");
}

void RankLiveness::RestoreFailed(int rank) {
  ranks_[rank].failed = true;
  ranks_[rank].connected = false;
}

void RankLiveness::OnRestarted(int rank, absl::Time now) {
  Rank& r = ranks_[rank];
  if (r.failed || r.registered) return;
  r.awaited_back = true;
  r.connected = false;
  r.last_heard = now;
}

std::vector<int> RankLiveness::Check(absl::Time now) {
  std::vector<int> failed;
  if (!enabled()) return failed;
  const bool timed = options_.timeout > absl::ZeroDuration();
  for (int rank = 0; rank < static_cast<int>(ranks_.size()); ++rank) {
    Rank& r = ranks_[rank];
    if (!(r.registered || r.awaited_back) || r.failed) continue;
    const bool gone =
        timed && !r.connected && now - r.last_heard >= options_.timeout;
    const int64_t overdue = gone || !timed ? -1 : OverdueStep(r, now);
    const int64_t stalled = gone || overdue >= 0 ? -1 : StalledStep(r, now);
    if (!gone && overdue < 0 && stalled < 0) continue;
    r.failed = true;
    r.stalled = stalled >= 0;
    r.hung_step = r.stalled ? stalled : overdue;
    r.sent.clear();
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
