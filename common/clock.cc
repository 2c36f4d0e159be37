#include "common/clock.h"

#include <time.h>

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"

namespace dcp {

bool Clock::AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                              absl::Time deadline) {
  return mu->AwaitWithTimeout(cond, deadline - Now());
}

absl::Time RealClock::Now() { return absl::Now(); }

Clock* RealClock::Default() {
  static RealClock* const clock = new RealClock();
  return clock;
}

absl::Time ProcessCpuClock::Now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return absl::UnixEpoch() + absl::DurationFromTimespec(ts);
}

absl::Time ThreadCpuClock::Now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return absl::UnixEpoch() + absl::DurationFromTimespec(ts);
}

struct FakeClock::Sleeper {
  /// The waiter's mutex, and the flag `MoveTo` sets under it when the
  /// deadline is reached.
  absl::Mutex* mu = nullptr;
  absl::Time deadline;
  bool woken = false;
  /// Held by `MoveTo` while it wakes this wait; `gone` once the wait ended,
  /// after which `mu` may no longer exist.
  absl::Mutex guard;
  bool gone ABSL_GUARDED_BY(guard) = false;
};

absl::Time FakeClock::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeClock::Set(absl::Time time) { MoveTo(time); }

void FakeClock::Advance(absl::Duration delta) {
  absl::Time to;
  {
    absl::MutexLock lock(&mu_);
    to = now_ + delta;
  }
  MoveTo(to);
}

void FakeClock::MoveTo(absl::Time time) {
  std::vector<std::shared_ptr<Sleeper>> due;
  {
    absl::MutexLock lock(&mu_);
    now_ = time;
    auto reached = [time](const std::shared_ptr<Sleeper>& s) {
      return s->deadline <= time;
    };
    std::copy_if(sleepers_.begin(), sleepers_.end(), std::back_inserter(due),
                 reached);
    sleepers_.erase(std::remove_if(sleepers_.begin(), sleepers_.end(), reached),
                    sleepers_.end());
  }
  // Not under `mu_`: a waiter holds its own mutex when it reads the time.
  for (const std::shared_ptr<Sleeper>& s : due) {
    absl::MutexLock guard(&s->guard);
    if (s->gone) continue;
    // Locking and unlocking the waiter's mutex makes it re-check its wait.
    s->mu->Lock();
    s->woken = true;
    s->mu->Unlock();
  }
}

bool FakeClock::AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                  absl::Time deadline)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (cond.Eval()) return true;
  auto sleeper = std::make_shared<Sleeper>();
  sleeper->mu = mu;
  sleeper->deadline = deadline;
  {
    absl::MutexLock lock(&mu_);
    if (deadline <= now_) return false;
    // A wait without deadline needs no waking: only its condition ends it.
    if (deadline != absl::InfiniteFuture()) sleepers_.push_back(sleeper);
  }
  struct Wait {
    const absl::Condition* cond;
    const Sleeper* sleeper;
  } wait{&cond, sleeper.get()};
  mu->Await(absl::Condition(
      +[](Wait* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return w->sleeper->woken || w->cond->Eval();
      },
      &wait));
  // Leaves with `mu` released: a `MoveTo` waking this wait holds the guard
  // and wants `mu`.
  mu->Unlock();
  {
    absl::MutexLock guard(&sleeper->guard);
    sleeper->gone = true;
  }
  {
    absl::MutexLock lock(&mu_);
    sleepers_.erase(std::remove(sleepers_.begin(), sleepers_.end(), sleeper),
                    sleepers_.end());
  }
  mu->Lock();
  return cond.Eval();
}

bool FakeClock::AwaitSleepers(int count, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto enough = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return static_cast<int>(sleepers_.size()) >= count;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

bool FakeClock::AwaitSleeperUntil(absl::Time deadline, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto waiting = [this, deadline]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::any_of(sleepers_.begin(), sleepers_.end(),
                       [deadline](const std::shared_ptr<Sleeper>& s) {
                         return s->deadline == deadline;
                       });
  };
  return mu_.AwaitWithTimeout(absl::Condition(&waiting), timeout);
}

absl::Time FakeClock::NextDeadline() {
  absl::MutexLock lock(&mu_);
  absl::Time next = absl::InfiniteFuture();
  for (const std::shared_ptr<Sleeper>& s : sleepers_) {
    next = std::min(next, s->deadline);
  }
  return next;
}

}  // namespace dcp
