#ifndef DCP_SCHEDULER_DELIVERY_DELIVERY_RELAYS_H_
#define DCP_SCHEDULER_DELIVERY_DELIVERY_RELAYS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/subprocess.h"

// The plan-delivery benchmark's relay rows: real dcp-node-relay processes
// between the simulated agents and the scheduler.
namespace dcp::plan_delivery {

/// `count` dcp-node-relay processes (the binary at `binary`) in front of a
/// scheduler, each on 127.0.0.1:0, started by `Start` and stopped (SIGTERM,
/// SIGKILL 10 s later) by `Stop` or the destructor. Not thread-safe.
class RelayProcesses {
 public:
  RelayProcesses(std::string binary, int count, absl::Duration gather_window)
      : binary_(std::move(binary)),
        count_(count),
        gather_window_(gather_window) {}
  ~RelayProcesses() { Stop(); }
  RelayProcesses(const RelayProcesses&) = delete;
  RelayProcesses& operator=(const RelayProcesses&) = delete;

  /// Starts the relays for the scheduler at `scheduler` and returns their
  /// addresses once each serves. UNAVAILABLE naming the relay that did not
  /// start within 30 s (the others are stopped).
  absl::StatusOr<std::vector<std::string>> Start(const std::string& scheduler);
  /// CPU seconds (user + system) the running relays used so far.
  double CpuSeconds() const;
  void Stop();

 private:
  const std::string binary_;
  const int count_;
  const absl::Duration gather_window_;
  std::vector<subprocess::Child> children_;
  std::string dir_;
};

}  // namespace dcp::plan_delivery

#endif  // DCP_SCHEDULER_DELIVERY_DELIVERY_RELAYS_H_
