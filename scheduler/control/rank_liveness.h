#ifndef DCP_SCHEDULER_CONTROL_RANK_LIVENESS_H_
#define DCP_SCHEDULER_CONTROL_RANK_LIVENESS_H_

#include <cstdint>
#include <map>
#include <string>
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
  /// A registered rank is declared failed when, for this long, it had no
  /// open plan stream and nothing was heard from it (registration, report,
  /// stream opened or closed), or it did not report a step that every
  /// other member of the step's world had reported. Zero or less: never.
  absl::Duration timeout = absl::Seconds(60);
  /// A registered rank with an open stream is also declared failed when it
  /// owes a step it was sent and reported nothing for this long: since the
  /// later of that step's sending and its last report (stalled: a step, or
  /// the collective every rank of it waits in, that never ends). Unlike
  /// `timeout`'s hung rule it needs no other rank to have reported, so it
  /// catches a whole world stuck in one step. Zero or less: never; set it
  /// above the longest step.
  absl::Duration step_timeout = absl::ZeroDuration();
};

/// The liveness bookkeeping of a job's ranks, after Ray's
/// `GcsHealthCheckManager`: which ranks are alive, when each was last
/// heard from, and which are declared failed. It only keeps the books and
/// answers `Check(now)`; the caller owns the clock (so tests step a fake
/// one) and decides what a failure means (`RankFailurePolicy`).
///
/// A rank can fail only once it has registered, in one of two ways:
///   - gone: it has no open plan stream (its stream's end is what the
///     server sees when its process dies) and was silent for `timeout`;
///   - hung: its stream is open but it did not report step s for `timeout`
///     after the rest of s's world did. The clock starts at the last report
///     of s from a rank outside the ranks still missing (`OnStepAwaiting`),
///     so one long step is no failure: every rank is slow then, and the
///     clock starts only once the others are done with s. With several
///     ranks missing, it starts when every rank outside them reported;
///   - stalled (with `step_timeout`): its stream is open but it reported
///     nothing for `step_timeout` while owing a step it was sent
///     (`OnStepSent`).
///
/// A failed rank stays failed until it registers again; a registration
/// restarts the clocks of the steps it still owes.
///
/// After a scheduler restart the books start afresh at the restart: no
/// time from before it is kept (the times the reports came are not
/// durable, and the outage was no rank's fault). The ranks of the restored
/// world are owed a registration (`OnRestarted`): one that does not
/// register within `timeout` of the restart is gone, as if its stream had
/// ended then (a rank that died during the outage would otherwise hold the
/// job for ever). The replayed reports count as made at the restart; no
/// rank has registered again by then, and a registration restarts the
/// clocks of what a rank owes, so a rank missing from a step the rest of
/// its world reported before the crash owes it for `timeout` from its
/// registration (the time before the crash and the outage never count).
///
/// Thread-compatible: `StepWindow` calls it under its own lock.
///
///   RankLiveness live({.world_size = 4, .timeout = absl::Seconds(10)});
///   live.OnRegistered(2, now);
///   live.OnStreamOpened(2, now);
///   live.OnStreamClosed(2, now);             // its process died
///   live.Check(now + absl::Seconds(10));     // {2}
///   live.OnStepAwaiting(7, {3}, now);        // all but rank 3 reported 7
///   live.Check(now + absl::Seconds(10));     // {3}: hung
class RankLiveness {
 public:
  explicit RankLiveness(RankLivenessOptions options);

  bool enabled() const {
    return options_.timeout > absl::ZeroDuration() ||
           options_.step_timeout > absl::ZeroDuration();
  }
  absl::Duration timeout() const { return options_.timeout; }

  /// `rank` registered at `now`; true when it was failed (it returned).
  bool OnRegistered(int rank, absl::Time now);
  /// Its plan stream opened or ended at `now`.
  void OnStreamOpened(int rank, absl::Time now);
  void OnStreamClosed(int rank, absl::Time now);
  /// Step `step` went down `rank`'s stream at `now`: it owes a report of it
  /// (`step_timeout`).
  void OnStepSent(int rank, int64_t step, absl::Time now);
  /// Something came from the rank (a report) at `now`.
  void OnSeen(int rank, absl::Time now);
  /// `rank` reported `step` at `now` (ranks report their steps in order, so
  /// it owes none before it).
  void OnReported(int rank, int64_t step, absl::Time now);
  /// At `now` every member of step `step`'s world reported it except
  /// `missing`: their clock for the step starts (again) at `now`. The
  /// step's first report names them (a pass over the world, once a step).
  void OnStepAwaiting(int64_t step, const std::vector<int>& missing,
                      absl::Time now);
  /// Another member of `step`'s world reported it at `now`: the clock of
  /// every rank still owing it starts again at `now`, as if
  /// `OnStepAwaiting` had named them all, without a pass over them (a
  /// report costs O(log steps), not O(world)).
  void OnStepReport(int64_t step, absl::Time now);
  /// Every member of `step`'s world reported it: its clock is dropped.
  void OnStepComplete(int64_t step);
  /// No step is awaited from anyone any more (a shrink abandoned them).
  void ForgetAwaited();
  /// A restart found `rank` out of the world (it had failed): failed until
  /// it registers, not counted as a new failure.
  void RestoreFailed(int rank);
  /// The scheduler restarted at `now` with `rank` in its world: the rank
  /// is owed a registration, and is gone if none comes within the timeout
  /// (`FailureReason` says so). A no-op for a failed rank.
  void OnRestarted(int rank, absl::Time now);

  /// The ranks declared failed at `now` that were not before (ascending).
  std::vector<int> Check(absl::Time now);

  bool failed(int rank) const { return ranks_[rank].failed; }
  /// Why `rank` was declared failed, for logs and the stream's end.
  std::string FailureReason(int rank) const;
  /// Ranks registered and not failed.
  int live_ranks() const;
  /// Ranks failed now.
  int failed_ranks() const;
  /// Failures declared so far.
  int64_t failures() const { return failures_; }

 private:
  struct Rank {
    bool registered = false;
    /// Restored by a restart and not registered since: owes a
    /// registration from `last_heard`.
    bool awaited_back = false;
    bool connected = false;
    bool failed = false;
    absl::Time last_heard = absl::InfinitePast();
    /// Steps the rest of their world reported and this rank did not yet,
    /// with when their clock started for this rank (`OnStepAwaiting`, or
    /// its registration); the later of that and the step's last report
    /// (`step_reported_`) is when it started.
    std::map<int64_t, absl::Time> awaited;
    /// Steps sent down its stream and not reported yet, with when.
    std::map<int64_t, absl::Time> sent;
    /// Its last report of a step.
    absl::Time last_report = absl::InfinitePast();
    /// The step it failed on for not reporting it; -1: it was gone.
    int64_t hung_step = -1;
    /// Whether that was by `step_timeout` (stalled) rather than `timeout`.
    bool stalled = false;
  };

  /// The first step `r` owes whose clock ran out at `now`; -1: none.
  int64_t OverdueStep(const Rank& r, absl::Time now) const;
  /// The step `r` was sent and stalled on by `now` (`step_timeout`); -1:
  /// none.
  int64_t StalledStep(const Rank& r, absl::Time now) const;

  const RankLivenessOptions options_;
  std::vector<Rank> ranks_;
  /// Per step some rank owes: its latest report (`OnStepReport`).
  std::map<int64_t, absl::Time> step_reported_;
  int64_t failures_ = 0;
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_CONTROL_RANK_LIVENESS_H_
