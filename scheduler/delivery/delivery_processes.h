#ifndef DCP_SCHEDULER_DELIVERY_DELIVERY_PROCESSES_H_
#define DCP_SCHEDULER_DELIVERY_DELIVERY_PROCESSES_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/subprocess.h"

// The plan-delivery benchmark's child processes: real dcp binaries started
// on 127.0.0.1:0 that say their port in a --port_file, and the scheduler's
// own figures read off its /metrics.
namespace dcp::plan_delivery {

/// The port `child` wrote to `path` (the file its --port_file names) once
/// it has. UNAVAILABLE naming `what` when the child exits without writing
/// one (it is reaped) or `deadline` passes.
absl::StatusOr<int> AwaitPortFile(const std::string& path,
                                  subprocess::Child& child, absl::Time deadline,
                                  absl::string_view what);

/// `GET /metrics` from 127.0.0.1:`port` (HTTP/1.0): the body. UNAVAILABLE
/// when the connection fails, DATA_LOSS for an answer other than 200.
absl::StatusOr<std::string> FetchMetrics(int port, absl::Duration timeout);

/// The value of the unlabelled sample `name` in a Prometheus text
/// exposition; nullopt when it has none.
std::optional<double> SampleValue(absl::string_view exposition,
                                  absl::string_view name);

/// What the scheduler says of itself at one scrape.
struct SchedulerCounters {
  /// dcp_scheduler_planning_seconds_count: steps planned so far.
  double planned_steps = 0;
  /// dcp_scheduler_planning_cpu_seconds_total.
  double planning_cpu_seconds = 0;
};

/// A dcp-scheduler process (the binary at `binary`) on 127.0.0.1:0 with
/// `flags`, its metrics on 127.0.0.1:0 too; started by `Start`, stopped
/// (SIGTERM, SIGKILL 10 s later) by `Stop` or the destructor. Its output
/// goes to a file under /tmp (`log_path`), removed by `Stop`. Not
/// thread-safe.
///
///   ASSIGN_OR_RETURN(std::unique_ptr<SchedulerProcess> scheduler,
///                    SchedulerProcess::Start(binary, {"--world_size=8"}));
///   double cpu = scheduler->CpuSeconds();
///   ASSIGN_OR_RETURN(SchedulerCounters c, scheduler->Counters());
class SchedulerProcess {
 public:
  /// UNAVAILABLE naming the binary, with the end of its output, when it
  /// does not serve within 60 s (it is stopped).
  static absl::StatusOr<std::unique_ptr<SchedulerProcess>> Start(
      const std::string& binary, const std::vector<std::string>& flags);
  ~SchedulerProcess();
  SchedulerProcess(const SchedulerProcess&) = delete;
  SchedulerProcess& operator=(const SchedulerProcess&) = delete;

  /// host:port of its gRPC service.
  const std::string& address() const { return address_; }
  const std::string& log_path() const { return log_path_; }
  /// CPU seconds (user + system) it used so far, all its threads.
  double CpuSeconds() const;
  /// Its planning counters, scraped now. DATA_LOSS naming the sample its
  /// /metrics lacks.
  absl::StatusOr<SchedulerCounters> Counters() const;
  /// Stops it (a drain, as the daemon does on SIGTERM). Idempotent.
  void Stop();

 private:
  SchedulerProcess() = default;

  subprocess::Child child_;
  std::string dir_;
  std::string log_path_;
  std::string address_;
  int metrics_port_ = 0;
};

}  // namespace dcp::plan_delivery

#endif  // DCP_SCHEDULER_DELIVERY_DELIVERY_PROCESSES_H_
