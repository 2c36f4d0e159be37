#ifndef DCP_COMMON_CLOCK_H_
#define DCP_COMMON_CLOCK_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace dcp {

/// The source of time for components that record when things happened
/// (last report of a rank, planning time) and that wait (back-off,
/// timeouts). Injected through Options so tests can step time with
/// `FakeClock` instead of sleeping.
///
/// Implementations must be thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;

  /// Blocks until `cond` holds or this clock reads `deadline` or later;
  /// returns whether `cond` holds on return. `mu` is held on entry and on
  /// return, and released while waiting (like `Mutex::AwaitWithDeadline`;
  /// an implementation may release it once more before returning, so
  /// callers re-read what `cond` looked at). The default waits in real time
  /// for `deadline - Now()`: right for any clock that runs at the rate of
  /// the system clock.
  virtual bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                 absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  /// `AwaitWithDeadline(mu, cond, Now() + timeout)`.
  bool AwaitWithTimeout(absl::Mutex* mu, const absl::Condition& cond,
                        absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return AwaitWithDeadline(mu, cond, Now() + timeout);
  }
};

/// The system clock (`absl::Now()`). Stateless; thread-safe.
class RealClock : public Clock {
 public:
  absl::Time Now() override;

  /// A process-wide instance, for options whose clock is left null.
  static Clock* Default();
};

/// The CPU time this process has used, all threads together, as a time
/// after the Unix epoch: a stopwatch of a process's own work where
/// processes share cores (time spent waiting for a core, or blocked on a
/// peer, does not count). For measuring, not for deadlines: a wait on it
/// lasts `deadline - Now()` of real time. Stateless; thread-safe.
class ProcessCpuClock : public Clock {
 public:
  absl::Time Now() override;
};

/// The CPU time the calling thread has used, as a time after the Unix
/// epoch: what one thread's work costs, whatever else runs (a planning
/// step's CPU, as `ControlPlane` counts it). Differences of two readings are
/// only meaningful on the same thread. Stateless; thread-safe.
class ThreadCpuClock : public Clock {
 public:
  absl::Time Now() override;
};

/// A clock that moves only when told to. Thread-safe.
///
/// A wait on it (`AwaitWithDeadline`) ends when its condition holds or when
/// `Advance` / `Set` reach its deadline, never by itself; `AwaitSleepers`
/// lets a test step time exactly when the code under test is waiting.
///
///   FakeClock clock;                    // starts at the Unix epoch
///   clock.Advance(absl::Seconds(3));
///   EXPECT_EQ(clock.Now(), absl::UnixEpoch() + absl::Seconds(3));
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch()) : now_(start) {}

  absl::Time Now() override;
  /// Sets the time; it may go backwards (tests of clock skew).
  void Set(absl::Time time);
  /// Moves the time forward by `delta` (or back, when negative).
  void Advance(absl::Duration delta);

  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) override;

  /// Blocks until at least `count` waits with a finite deadline are under
  /// way (not yet ended by their condition or by the time), or `timeout`
  /// of real time passed (a guard against a test that hangs); returns
  /// whether they are.
  bool AwaitSleepers(int count, absl::Duration timeout);
  /// Blocks until a wait with `deadline` is under way, or `timeout` of real
  /// time passed; returns whether one is.
  bool AwaitSleeperUntil(absl::Time deadline, absl::Duration timeout);
  /// The earliest deadline of the waits under way; InfiniteFuture if none.
  absl::Time NextDeadline();

 private:
  /// One wait under way; shared with `Advance`, which may still hold it
  /// when the wait has ended.
  struct Sleeper;

  /// Moves the clock to `time` and wakes the waits it reaches.
  void MoveTo(absl::Time time) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Sleeper>> sleepers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dcp

#endif  // DCP_COMMON_CLOCK_H_
