#ifndef DCP_COMMON_CLOCK_H_
#define DCP_COMMON_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace dcp {

/// The source of wall-clock time for components that record when things
/// happened (last report of a rank, planning time). Injected through Options
/// so tests can step time with `FakeClock` instead of sleeping.
///
/// Implementations must be thread-safe. Components never wait on a `Clock`;
/// it only answers "what time is it".
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
};

/// The system clock (`absl::Now()`). Stateless; thread-safe.
class RealClock : public Clock {
 public:
  absl::Time Now() override;
};

/// A clock that moves only when told to. Thread-safe.
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

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dcp

#endif  // DCP_COMMON_CLOCK_H_
