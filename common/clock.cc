#include "common/clock.h"

#include "absl/time/clock.h"

namespace dcp {

absl::Time RealClock::Now() { return absl::Now(); }

absl::Time FakeClock::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeClock::Set(absl::Time time) {
  absl::MutexLock lock(&mu_);
  now_ = time;
}

void FakeClock::Advance(absl::Duration delta) {
  absl::MutexLock lock(&mu_);
  now_ += delta;
}

}  // namespace dcp
