#include "common/process_memory.h"

#include <malloc.h>

#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace dcp {
namespace {

// The "<field>:  <n> kB" line of /proc/self/status, in bytes.
absl::StatusOr<int64_t> StatusField(absl::string_view field) {
  std::ifstream in("/proc/self/status");
  if (!in) return absl::UnavailableError("cannot read /proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, field) || !absl::ConsumePrefix(&rest, ":"))
      continue;
    rest = absl::StripAsciiWhitespace(rest);
    int64_t kib = 0;
    if (!absl::ConsumeSuffix(&rest, " kB") ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &kib)) {
      return absl::UnavailableError(
          absl::StrCat("/proc/self/status: cannot read '", line, "'"));
    }
    return kib * 1024;
  }
  return absl::UnavailableError(
      absl::StrCat("/proc/self/status has no ", field, " line"));
}

}  // namespace

absl::StatusOr<int64_t> ResidentBytes() { return StatusField("VmRSS"); }

absl::StatusOr<int64_t> PeakResidentBytes() { return StatusField("VmHWM"); }

absl::Status ResetPeakResident() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.close();
  if (!out) {
    return absl::UnavailableError(
        "cannot reset the peak resident memory (/proc/self/clear_refs)");
  }
  return absl::OkStatus();
}

void MakeResidentMemoryFollowAllocations() {
  constexpr int kThreshold = 128 * 1024;
  mallopt(M_MMAP_THRESHOLD, kThreshold);
  mallopt(M_TRIM_THRESHOLD, kThreshold);
}

}  // namespace dcp
