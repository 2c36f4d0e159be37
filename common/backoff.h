#ifndef DCP_COMMON_BACKOFF_H_
#define DCP_COMMON_BACKOFF_H_

#include <algorithm>

#include "absl/time/time.h"

namespace dcp {

/// Exponential back-off: `initial`, doubling up to `max`. Thread-compatible.
///
///   Backoff backoff(absl::Milliseconds(100), absl::Seconds(5));
///   clock->AwaitWithTimeout(&mu, stopped, backoff.Next());
class Backoff {
 public:
  Backoff(absl::Duration initial, absl::Duration max)
      : initial_(initial), max_(max), next_(initial) {}

  /// The sleep before the next attempt; the one after doubles.
  absl::Duration Next() {
    const absl::Duration now = next_;
    next_ = std::min(next_ * 2, max_);
    return now;
  }
  /// Starts over at `initial` (an attempt succeeded).
  void Reset() { next_ = initial_; }

 private:
  const absl::Duration initial_;
  const absl::Duration max_;
  absl::Duration next_;
};

}  // namespace dcp

#endif  // DCP_COMMON_BACKOFF_H_
