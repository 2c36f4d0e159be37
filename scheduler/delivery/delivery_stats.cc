#include "scheduler/delivery/delivery_stats.h"

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace dcp::plan_delivery {

absl::Duration ThreadCpuTime() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return absl::DurationFromTimespec(ts);
}

double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  const std::string stat(std::istreambuf_iterator<char>(in), {});
  // The command may hold spaces: fields are counted after its ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 > stat.size()) return 0;
  const std::vector<std::string> fields =
      absl::StrSplit(stat.substr(close + 2), ' ');
  double utime = 0, stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtod(fields[11], &utime) ||
      !absl::SimpleAtod(fields[12], &stime)) {
    return 0;
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

CpuSample CpuSample::Take() {
  CpuSample s;
  s.wall = absl::Now();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + 1e-6 * tv.tv_usec;
  };
  s.process_seconds = seconds(usage.ru_utime) + seconds(usage.ru_stime);
  std::ifstream stat("/proc/stat");
  std::string cpu;
  stat >> cpu;
  int64_t v = 0;
  for (int i = 0; i < 10 && (stat >> v); ++i) {
    s.machine_total += v;
    if (i != 3 && i != 4) s.machine_busy += v;  // idle, iowait
    if (i == 7) s.machine_steal += v;
  }
  return s;
}

CpuLoad LoadBetween(const CpuSample& start, const CpuSample& end) {
  CpuLoad load;
  const double wall = absl::ToDoubleSeconds(end.wall - start.wall);
  load.process_cores = (end.process_seconds - start.process_seconds) / wall;
  const int64_t total = end.machine_total - start.machine_total;
  if (total > 0) {
    load.machine_busy =
        static_cast<double>(end.machine_busy - start.machine_busy) /
        static_cast<double>(total);
    load.machine_steal =
        static_cast<double>(end.machine_steal - start.machine_steal) /
        static_cast<double>(total);
  }
  load.other_cores =
      std::max(0.0, load.machine_busy * OnlineCpus() - load.process_cores);
  return load;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return absl::StrCat(one, " ", five, " ", fifteen);
}

int ProcessThreads() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    int threads = 0;
    if (line.rfind("Threads:", 0) == 0 &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(8)),
                         &threads)) {
      return threads;
    }
  }
  return -1;
}

int OnlineCpus() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

double StepsPerSecond(const std::vector<std::pair<double, double>>& points) {
  if (points.size() < 2) return 0;
  double mx = 0, my = 0;
  for (const auto& [x, y] : points) {
    mx += x;
    my += y;
  }
  mx /= points.size();
  my /= points.size();
  double sxy = 0, sxx = 0;
  for (const auto& [x, y] : points) {
    sxy += (x - mx) * (y - my);
    sxx += (x - mx) * (x - mx);
  }
  if (sxx <= 0 || sxy <= 0) return 0;
  return sxx / sxy;
}

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(q * static_cast<double>(values.size()));
  const size_t i = static_cast<size_t>(std::max(1.0, rank)) - 1;
  return values[std::min(i, values.size() - 1)];
}

}  // namespace dcp::plan_delivery
