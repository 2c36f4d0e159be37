#include "common/signal_watcher.h"

#include <pthread.h>
#include <signal.h>

namespace dcp {
namespace {

sigset_t Signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);  // the watcher's own "exit now"
  return set;
}

}  // namespace

void SignalWatcher::BlockSignals() {
  sigset_t set = Signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

SignalWatcher::SignalWatcher(std::function<void(int, int)> on_signal)
    : on_signal_(std::move(on_signal)), thread_([this] { Run(); }) {}

SignalWatcher::~SignalWatcher() {
  pthread_kill(thread_.native_handle(), SIGUSR1);
  thread_.join();
}

void SignalWatcher::Run() {
  const sigset_t set = Signals();
  while (true) {
    int signal = 0;
    if (sigwait(&set, &signal) != 0 || signal == SIGUSR1) return;
    on_signal_(signal, ++count_);
  }
}

}  // namespace dcp
