#include "scheduler/delivery/delivery_relays.h"

#include <stdlib.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/subprocess.h"
#include "scheduler/delivery/delivery_processes.h"
#include "scheduler/delivery/delivery_stats.h"

namespace dcp::plan_delivery {

absl::StatusOr<std::vector<std::string>> RelayProcesses::Start(
    const std::string& scheduler) {
  char pattern[] = "/tmp/dcp-bench-relays-XXXXXX";
  if (mkdtemp(pattern) == nullptr) {
    return absl::UnavailableError("cannot make a directory for port files");
  }
  dir_ = pattern;
  for (int i = 0; i < count_; ++i) {
    const std::vector<std::string> args = {
        binary_, "--listen=127.0.0.1:0", "--scheduler=" + scheduler,
        absl::StrCat("--port_file=", dir_, "/", i),
        absl::StrCat("--gather_window=", absl::FormatDuration(gather_window_))};
    absl::StatusOr<subprocess::Child> child =
        subprocess::Start(absl::StrCat("relay ", i), args);
    if (!child.ok()) {
      Stop();
      return absl::UnavailableError(
          absl::StrCat("cannot run the relay binary '", binary_,
                       "': ", child.status().message()));
    }
    children_.push_back(*std::move(child));
  }
  std::vector<std::string> addresses;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (int i = 0; i < count_; ++i) {
    absl::StatusOr<int> port =
        AwaitPortFile(absl::StrCat(dir_, "/", i), children_[i], deadline,
                      absl::StrCat("relay ", i, " (", binary_, ")"));
    if (!port.ok()) {
      Stop();
      return absl::UnavailableError(
          absl::StrCat("relay ", i, " (", binary_,
                       ") did not start: ", port.status().message()));
    }
    addresses.push_back(absl::StrCat("127.0.0.1:", *port));
  }
  return addresses;
}

double RelayProcesses::CpuSeconds() const {
  double sum = 0;
  for (const subprocess::Child& child : children_) {
    sum += ProcessCpuSeconds(child.pid);
  }
  return sum;
}

void RelayProcesses::Stop() {
  subprocess::TerminateAll(children_, absl::Seconds(10));
  children_.clear();
  if (!dir_.empty()) {
    for (int i = 0; i < count_; ++i) unlink(absl::StrCat(dir_, "/", i).c_str());
    rmdir(dir_.c_str());
    dir_.clear();
  }
}

}  // namespace dcp::plan_delivery
