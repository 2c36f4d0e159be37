#ifndef DCP_COMMON_SIGNAL_WATCHER_H_
#define DCP_COMMON_SIGNAL_WATCHER_H_

#include <atomic>
#include <functional>
#include <thread>

namespace dcp {

/// Turns SIGINT/SIGTERM into calls of `on_signal(signal, count)` on a thread
/// of its own (count = 1 for the first signal, 2 for the second, ...), taken
/// with sigwait so that nothing runs in a signal handler. For daemons' main
/// functions: call `BlockSignals()` before any thread starts (threads
/// inherit the mask), then keep a watcher alive while the daemon runs.
///
///   SignalWatcher::BlockSignals();
///   ... start servers ...
///   SignalWatcher watcher([&](int signal, int count) {
///     if (count == 1) Drain(); else Shutdown();
///   });
///
/// Not copyable; destroying it stops the watching thread.
class SignalWatcher {
 public:
  static void BlockSignals();

  explicit SignalWatcher(std::function<void(int signal, int count)> on_signal);
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  /// Whether a signal has arrived.
  bool signalled() const { return count_.load() > 0; }

 private:
  void Run();

  std::function<void(int, int)> on_signal_;
  std::atomic<int> count_{0};
  std::thread thread_;
};

}  // namespace dcp

#endif  // DCP_COMMON_SIGNAL_WATCHER_H_
