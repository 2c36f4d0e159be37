#ifndef DCP_SCHEDULER_CONTROL_WORLD_MEMBERSHIP_H_
#define DCP_SCHEDULER_CONTROL_WORLD_MEMBERSHIP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/scheduler_service.pb.h"
#include "scheduler/control/control_events.h"
#include "scheduler/control/rank_liveness.h"

namespace dcp {

/// What the scheduler knows of one rank: its registration, when it was
/// last heard from and how far through the steps it got.
struct RankRecord {
  bool registered = false;
  std::string host;
  int gpu = 0;
  int64_t pid = 0;
  int64_t last_reported_step = -1;
  int64_t last_sent_step = -1;
  int64_t reported_steps = 0;
  absl::Time last_seen = absl::InfinitePast();
};

/// The ranks of `world` (one flag a rank), ascending.
std::vector<int> RanksOf(const std::vector<bool>& world);

/// The world of `ranks` among `world_size` ranks (no ranks: every rank);
/// INVALID_ARGUMENT for a rank outside it.
absl::StatusOr<std::vector<bool>> WorldOf(const std::vector<int>& ranks,
                                          int world_size);

/// Configuration of a `WorldMembership`.
struct WorldMembershipOptions {
  int world_size = 0;
  /// `RankLivenessOptions::timeout` and `step_timeout`; both zero: no rank
  /// is ever declared failed.
  absl::Duration rank_timeout = absl::ZeroDuration();
  absl::Duration step_timeout = absl::ZeroDuration();
  RankFailurePolicy on_rank_failure = RankFailurePolicy::kHold;

  /// Whether a rank can be declared failed at all (a timeout is set).
  bool DetectsFailures() const {
    return rank_timeout > absl::ZeroDuration() ||
           step_timeout > absl::ZeroDuration();
  }
  /// A failure starts a smaller world (detection on, policy shrink).
  bool Shrinks() const {
    return DetectsFailures() && on_rank_failure == RankFailurePolicy::kShrink;
  }
};

/// The job's ranks and its world: who registered (host, GPU, pid), when
/// each was last heard from and whether it is declared failed (a
/// `RankLiveness`), which ranks the current epoch trains on, and what the
/// failure policy makes of a failure or a return. It is the membership
/// half of the control plane's window, after Ray's node manager beside its
/// pubsub: `StepWindow` keeps the other half (the planned steps, their
/// reports and the plan streams) and tells this one what happened to a
/// rank (`StreamOpened`, `StepSent`, `Reported`, ...).
///
/// Not thread-safe: its owner holds it under the owner's mutex, since a
/// registration, a report or a step sent changes both halves at once.
///
///   WorldMembershipOptions options;
///   options.world_size = 4;
///   options.rank_timeout = absl::Seconds(60);
///   options.on_rank_failure = RankFailurePolicy::kShrink;
///   WorldMembership world(options);
///   world.Registered(request, now);
///   RankFailureEvent failure = world.DeclareFailed(now);
///   if (!failure.failed.empty() && world.shrinks()) {
///     world.MoveTo(world.epoch() + 1, world.NextMembers());
///   }
class WorldMembership {
 public:
  explicit WorldMembership(WorldMembershipOptions options);

  int world_size() const { return options_.world_size; }
  RankFailurePolicy policy() const { return options_.on_rank_failure; }
  /// `WorldMembershipOptions::DetectsFailures` and `Shrinks`.
  bool detects_failures() const { return options_.DetectsFailures(); }
  bool shrinks() const { return options_.Shrinks(); }

  const RankRecord& rank(int r) const { return ranks_[r]; }
  /// The step-level books (who owes which step) that `StepWindow` keeps
  /// through `OnStepAwaiting`, `OnStepReport`, `OnStepComplete` and
  /// `ForgetAwaited`.
  RankLiveness& liveness() { return liveness_; }
  const RankLiveness& liveness() const { return liveness_; }

  // ------------------------------------------------- what a rank did

  /// Records `request`'s registration at `now` (a rank registered again
  /// keeps its progress). True when the rank was declared failed and is
  /// back (`ReturnEvent` says what that does).
  bool Registered(const v1::RegisterRequest& request, absl::Time now);
  void StreamOpened(int rank, absl::Time now);
  void StreamClosed(int rank, absl::Time now);
  /// Step `step` was sent on the rank's stream.
  void StepSent(int rank, int64_t step, absl::Time now);
  /// The rank's timings of `step` were accepted.
  void Reported(int rank, int64_t step, absl::Time now);
  /// The rank was sent a profile request.
  void ProfileAsked(int rank, absl::Time now);
  /// The rank sent something that changes no step (a profile, a report
  /// taken and dropped).
  void Seen(int rank, absl::Time now);

  // ---------------------------------------------------- the world

  int64_t epoch() const { return epoch_; }
  /// The current epoch's ranks, by rank.
  const std::vector<bool>& members() const { return members_; }
  /// Under hold: a rank is failed, so nothing new is planned.
  bool holding() const;
  /// The world of the next step planned: under shrink the ranks not
  /// failed, else the current members.
  std::vector<bool> NextMembers() const;
  /// The epoch moves on to `epoch`, trained on by `members`.
  void MoveTo(int64_t epoch, std::vector<bool> members);

  /// The ranks `RankLiveness::Check(now)` declares failed, each with its
  /// reason and the policy; empty `failed` when none. The caller does what
  /// the policy asks (closes their streams, shrinks) and fills the rest.
  RankFailureEvent DeclareFailed(absl::Time now);
  /// What the return of failed rank `rank`, registered again, does.
  RankFailureEvent ReturnEvent(int rank) const;

  /// After a restart: epoch `epoch` of `members`; with a job under way the
  /// members owe their registrations from `now` on, and the others stay
  /// failed.
  void Restore(int64_t epoch, std::vector<bool> members, bool under_way,
               absl::Time now);

  /// The status's epoch, liveness and world fields, and one `RankStatus` a
  /// rank (all but `connected` and `lag_steps`, the window's).
  void FillStatus(absl::Time now, v1::StatusResponse* out) const;

 private:
  const WorldMembershipOptions options_;
  std::vector<RankRecord> ranks_;
  RankLiveness liveness_;
  int64_t epoch_ = 0;
  std::vector<bool> members_;
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_CONTROL_WORLD_MEMBERSHIP_H_
