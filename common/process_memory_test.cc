#include "common/process_memory.h"

#include <cstdint>
#include <cstring>
#include <memory>

#include "gtest/gtest.h"

namespace dcp {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Touches `bytes` of fresh memory, so that it is resident, then frees it.
void TouchAndFree(int64_t bytes) {
  std::unique_ptr<char[]> block(new char[bytes]);
  std::memset(block.get(), 1, bytes);
  volatile char sink = block[bytes - 1];
  (void)sink;
}

TEST(ProcessMemoryTest, PeakFollowsTheWorkSinceTheReset) {
  ASSERT_TRUE(ResetPeakResident().ok());
  absl::StatusOr<int64_t> base = ResidentBytes();
  ASSERT_TRUE(base.ok()) << base.status();
  TouchAndFree(64 * kMiB);
  absl::StatusOr<int64_t> big = PeakResidentBytes();
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_GE(*big - *base, 60 * kMiB);

  // After a reset the 64 MiB, freed since, no longer count.
  ASSERT_TRUE(ResetPeakResident().ok());
  TouchAndFree(8 * kMiB);
  absl::StatusOr<int64_t> small = PeakResidentBytes();
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_LT(*small, *big - 32 * kMiB);
  EXPECT_GE(*small, *base);
}

// Without fixed thresholds, glibc keeps a freed block of this size cached
// after the first one (its mmap threshold grows to it), so a second run of
// the same work would show no rise at all.
TEST(ProcessMemoryTest, RepeatedWorkShowsTheSamePeak) {
  MakeResidentMemoryFollowAllocations();
  for (int run = 0; run < 3; ++run) {
    ASSERT_TRUE(ResetPeakResident().ok());
    absl::StatusOr<int64_t> base = ResidentBytes();
    ASSERT_TRUE(base.ok()) << base.status();
    TouchAndFree(32 * kMiB);
    absl::StatusOr<int64_t> peak = PeakResidentBytes();
    ASSERT_TRUE(peak.ok()) << peak.status();
    EXPECT_GE(*peak - *base, 30 * kMiB) << "run " << run;
  }
}

}  // namespace
}  // namespace dcp
