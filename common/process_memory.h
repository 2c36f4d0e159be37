#ifndef DCP_COMMON_PROCESS_MEMORY_H_
#define DCP_COMMON_PROCESS_MEMORY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dcp {

/// This process's resident memory now (VmRSS of /proc/self/status), in
/// bytes. UNAVAILABLE when it cannot be read (not Linux).
absl::StatusOr<int64_t> ResidentBytes();

/// The most resident memory this process has held (VmHWM) since it started
/// or since the last `ResetPeakResident`, in bytes.
absl::StatusOr<int64_t> PeakResidentBytes();

/// Starts a new peak: the kernel sets VmHWM to the current VmRSS (writes
/// "5" to /proc/self/clear_refs, Linux 4.0+). So the peak of a piece of
/// work is `PeakResidentBytes()` after it, with this called before it.
/// UNAVAILABLE when the kernel refuses.
absl::Status ResetPeakResident();

/// Has glibc's malloc hand large freed blocks back to the kernel at once
/// (fixed mmap and trim thresholds of 128 KiB, instead of the defaults that
/// grow with the blocks freed), so that resident memory follows what is
/// live and the peak of one piece of work is not hidden by memory an
/// earlier one left cached. Process-wide; call it once at start-up in a
/// process that measures peaks. Costs some speed on large allocations.
void MakeResidentMemoryFollowAllocations();

}  // namespace dcp

#endif  // DCP_COMMON_PROCESS_MEMORY_H_
