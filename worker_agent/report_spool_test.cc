#include "worker_agent/report_spool.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/scheduler_service.pb.h"

namespace dcp {
namespace {

constexpr int kRank = 3;

v1::TimingReport ReportOf(int64_t step) {
  v1::TimingReport report;
  report.set_rank(kRank);
  report.set_step(step);
  report.set_sync_seconds(0.5 * static_cast<double>(step));
  return report;
}

std::vector<int64_t> Steps(const std::vector<v1::TimingReport>& reports) {
  std::vector<int64_t> steps;
  for (const v1::TimingReport& r : reports) steps.push_back(r.step());
  return steps;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
}

class ReportSpoolTest : public testing::Test {
 protected:
  ReportSpoolTest()
      : dir_(absl::StrCat(
            testing::TempDir(), "/spool-",
            testing::UnitTest::GetInstance()->current_test_info()->name())) {}

  std::unique_ptr<ReportSpool> Open() {
    absl::StatusOr<std::unique_ptr<ReportSpool>> spool =
        ReportSpool::Open(dir_, kRank);
    EXPECT_TRUE(spool.ok()) << spool.status();
    return spool.ok() ? *std::move(spool) : nullptr;
  }

  /// A spool whose file holds reports of steps 0, 1, 2, the first settled.
  std::string PathWithTwoUnsettled() {
    std::unique_ptr<ReportSpool> spool = Open();
    for (int64_t step = 0; step < 3; ++step) {
      EXPECT_TRUE(spool->Append(ReportOf(step)).ok());
    }
    EXPECT_TRUE(spool->SettleOldest().ok());
    return spool->path();
  }

  const std::string dir_;
};

TEST_F(ReportSpoolTest, UnsettledReportsComeBackInOrderAfterReopening) {
  PathWithTwoUnsettled();
  std::unique_ptr<ReportSpool> again = Open();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(Steps(again->recovered()), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(again->recovered()[1].SerializeAsString(),
            ReportOf(2).SerializeAsString());
  EXPECT_EQ(again->unsettled(), 2);
  EXPECT_TRUE(again->tail_problem().empty()) << again->tail_problem();
}

TEST_F(ReportSpoolTest, SettlingEverythingEmptiesTheFile) {
  const std::string path = PathWithTwoUnsettled();
  {
    std::unique_ptr<ReportSpool> spool = Open();
    ASSERT_NE(spool, nullptr);
    ASSERT_TRUE(spool->SettleOldest().ok());
    ASSERT_TRUE(spool->SettleOldest().ok());
    EXPECT_EQ(spool->unsettled(), 0);
    EXPECT_EQ(spool->SettleOldest().code(),
              absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(ReadFile(path), "DCPSPOOL");
  std::unique_ptr<ReportSpool> again = Open();
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(again->recovered().empty());
}

TEST_F(ReportSpoolTest, ATornLastRecordIsCutOffAndNamed) {
  const std::string path = PathWithTwoUnsettled();
  const std::string whole = ReadFile(path);
  // The last record is the settle marker (13 bytes): cut into it.
  WriteFile(path, whole.substr(0, whole.size() - 3));
  std::unique_ptr<ReportSpool> again = Open();
  ASSERT_NE(again, nullptr);
  // Without the marker, step 0 is unsettled again: sent again, at least once.
  EXPECT_EQ(Steps(again->recovered()), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_NE(again->tail_problem().find("torn"), std::string::npos)
      << again->tail_problem();
  EXPECT_EQ(ReadFile(path).size(), whole.size() - 13);
}

TEST_F(ReportSpoolTest, AGarbledRecordEndsWhatIsTrusted) {
  const std::string path = PathWithTwoUnsettled();
  std::string contents = ReadFile(path);
  // Header (8), then the first record's frame (12): its body's last byte.
  const std::string first = ReportOf(0).SerializeAsString();
  const size_t second_record = 8 + 12 + 1 + first.size();
  contents[second_record - 1] ^= 0x20;
  WriteFile(path, contents);
  std::unique_ptr<ReportSpool> again = Open();
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(again->recovered().empty());
  EXPECT_NE(again->tail_problem().find("garbled record at byte 8"),
            std::string::npos)
      << again->tail_problem();
  // Appending goes on after what was trusted.
  ASSERT_TRUE(again->Append(ReportOf(7)).ok());
  again.reset();
  EXPECT_EQ(Steps(Open()->recovered()), (std::vector<int64_t>{7}));
}

TEST_F(ReportSpoolTest, AFileThatIsNotASpoolIsRefused) {
  ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0);
  WriteFile(absl::StrCat(dir_, "/reports-rank", kRank, ".spool"), "hello");
  absl::StatusOr<std::unique_ptr<ReportSpool>> spool =
      ReportSpool::Open(dir_, kRank);
  EXPECT_EQ(spool.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(spool.status().message().find("not a report spool"),
            std::string::npos);
}

TEST_F(ReportSpoolTest, BadArgumentsAreRefused) {
  EXPECT_EQ(ReportSpool::Open("", kRank).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReportSpool::Open(dir_, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReportSpool::Open("/proc/no-such-dir/x", kRank).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace dcp
