#ifndef DCP_SCHEDULER_DELIVERY_DELIVERY_STATS_H_
#define DCP_SCHEDULER_DELIVERY_DELIVERY_STATS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

// The plan-delivery benchmark's accounting: CPU time of threads, of this
// process and of the machine, and the statistics of the measured latencies.
namespace dcp::plan_delivery {

/// CPU time of the calling thread.
absl::Duration ThreadCpuTime();

/// CPU seconds (user + system, /proc/PID/stat) that process `pid` used so
/// far, all its threads; 0 when /proc has no such process.
double ProcessCpuSeconds(pid_t pid);

/// CPU time of this process, and busy/total jiffies of the whole machine.
struct CpuSample {
  absl::Time wall;
  double process_seconds = 0;
  int64_t machine_busy = 0;
  int64_t machine_steal = 0;
  int64_t machine_total = 0;

  static CpuSample Take();
};

/// What the machine and this process did between two samples.
struct CpuLoad {
  /// CPU seconds of this process per wall second.
  double process_cores = 0;
  /// Shares of the machine's jiffies that were busy, and stolen.
  double machine_busy = 0;
  double machine_steal = 0;
  /// Cores busy outside this process (other users of the machine).
  double other_cores = 0;
};
CpuLoad LoadBetween(const CpuSample& start, const CpuSample& end);

/// /proc/loadavg's 1, 5 and 15 minute averages.
std::string LoadAverage();
/// Threads of this process; -1 when /proc does not say.
int ProcessThreads();
int OnlineCpus();

/// The sustained rate: 1 / the least-squares slope of delivery time
/// (seconds) over step number, so one late first or last step does not
/// skew it. 0 with fewer than two steps.
double StepsPerSecond(const std::vector<std::pair<double, double>>& points);

/// Nearest-rank percentile; NaN for no values.
double Percentile(std::vector<double> values, double q);

}  // namespace dcp::plan_delivery

#endif  // DCP_SCHEDULER_DELIVERY_DELIVERY_STATS_H_
