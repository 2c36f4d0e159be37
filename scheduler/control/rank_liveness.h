#ifndef DCP_SCHEDULER_CONTROL_RANK_LIVENESS_H_
#define DCP_SCHEDULER_CONTROL_RANK_LIVENESS_H_

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace dcp {

/// What the scheduler does when a rank is declared failed
/// (`dcp-scheduler --on_rank_failure`).
enum class RankFailurePolicy {
  /// Plan no new step until the rank registers again; the steps already
  /// planned stay as they are, and the job goes on when it returns.
  kHold,
  /// A new epoch for the remaining ranks: the steps not completed are
  /// abandoned and their samples planned again for the smaller world; a
  /// rank that returns is in the world again from the next step planned.
  kShrink,
};

/// "hold" or "shrink".
absl::string_view RankFailurePolicyName(RankFailurePolicy policy);

/// Configuration of a `RankLiveness`.
struct RankLivenessOptions {
  int world_size = 0;
  /// A registered rank with no open plan stream that nothing was heard
  /// from (registration, report, stream opened or closed) for this long is
  /// declared failed. Zero or less: never.
  absl::Duration timeout = absl::Seconds(60);
};

/// The liveness bookkeeping of a job's ranks, after Ray's
/// `GcsHealthCheckManager`: which ranks are alive, when each was last
/// heard from, and which are declared failed. It only keeps the books and
/// answers `Check(now)`; the caller owns the clock (so tests step a fake
/// one) and decides what a failure means (`RankFailurePolicy`).
///
/// A rank can fail only once it has registered, and only while it has no
/// open plan stream: a connected rank that is slow is not failed (its
/// stream's end is what the server sees when its process dies). A failed
/// rank stays failed until it registers again.
///
/// Thread-compatible: `StepWindow` calls it under its own lock.
///
///   RankLiveness live({.world_size = 4, .timeout = absl::Seconds(10)});
///   live.OnRegistered(2, now);
///   live.OnStreamOpened(2, now);
///   live.OnStreamClosed(2, now);             // its process died
///   live.Check(now + absl::Seconds(10));     // {2}
class RankLiveness {
 public:
  explicit RankLiveness(RankLivenessOptions options);

  bool enabled() const { return options_.timeout > absl::ZeroDuration(); }
  absl::Duration timeout() const { return options_.timeout; }

  /// `rank` registered at `now`; true when it was failed (it returned).
  bool OnRegistered(int rank, absl::Time now);
  /// Its plan stream opened or ended at `now`.
  void OnStreamOpened(int rank, absl::Time now);
  void OnStreamClosed(int rank, absl::Time now);
  /// Something came from the rank (a report) at `now`.
  void OnSeen(int rank, absl::Time now);
  /// A restart found `rank` out of the world (it had failed): failed until
  /// it registers, not counted as a new failure.
  void RestoreFailed(int rank);

  /// The ranks declared failed at `now` that were not before (ascending).
  std::vector<int> Check(absl::Time now);

  bool failed(int rank) const { return ranks_[rank].failed; }
  /// Ranks registered and not failed.
  int live_ranks() const;
  /// Ranks failed now.
  int failed_ranks() const;
  /// Failures declared so far.
  int64_t failures() const { return failures_; }

 private:
  struct Rank {
    bool registered = false;
    bool connected = false;
    bool failed = false;
    absl::Time last_heard = absl::InfinitePast();
  };

  const RankLivenessOptions options_;
  std::vector<Rank> ranks_;
  int64_t failures_ = 0;
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_CONTROL_RANK_LIVENESS_H_
