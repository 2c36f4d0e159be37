#include "common/signal_watcher.h"

#include <signal.h>

#include <atomic>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

TEST(SignalWatcherTest, CountsSignalsOnItsOwnThread) {
  SignalWatcher::BlockSignals();
  std::atomic<int> last_signal{0};
  std::atomic<int> last_count{0};
  SignalWatcher watcher([&](int signal, int count) {
    last_signal = signal;
    last_count = count;
  });
  EXPECT_FALSE(watcher.signalled());
  kill(getpid(), SIGTERM);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (last_count.load() < 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(last_signal.load(), SIGTERM);
  EXPECT_TRUE(watcher.signalled());
  kill(getpid(), SIGINT);
  while (last_count.load() < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(last_count.load(), 2);
  EXPECT_EQ(last_signal.load(), SIGINT);
}

}  // namespace
}  // namespace dcp
