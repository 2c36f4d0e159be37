#include "worker_agent/report_spool.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/record_log.h"
#include "common/test_files.h"
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
  EXPECT_EQ(ReadWholeFile(path), "DCPSPOOL");
  std::unique_ptr<ReportSpool> again = Open();
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(again->recovered().empty());
}

TEST_F(ReportSpoolTest, ATornLastRecordIsCutOffAndNamed) {
  const std::string path = PathWithTwoUnsettled();
  const std::string whole = ReadWholeFile(path);
  // The last record is the settle marker, a one-byte body: cut into it.
  const size_t marker = kRecordFrameBytes + 1;
  OverwriteFile(path, whole.substr(0, whole.size() - 3));
  std::unique_ptr<ReportSpool> again = Open();
  ASSERT_NE(again, nullptr);
  // Without the marker, step 0 is unsettled again: sent again, at least once.
  EXPECT_EQ(Steps(again->recovered()), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_NE(again->tail_problem().find("torn"), std::string::npos)
      << again->tail_problem();
  EXPECT_EQ(ReadWholeFile(path).size(), whole.size() - marker);
}

TEST_F(ReportSpoolTest, AGarbledRecordEndsWhatIsTrusted) {
  const std::string path = PathWithTwoUnsettled();
  std::string contents = ReadWholeFile(path);
  // The header, then the first record's frame and body ('R', the report):
  // flip a bit of its body's last byte.
  const std::string first = ReportOf(0).SerializeAsString();
  const size_t second_record =
      kRecordLogHeaderBytes + kRecordFrameBytes + 1 + first.size();
  contents[second_record - 1] ^= 0x20;
  OverwriteFile(path, contents);
  std::unique_ptr<ReportSpool> again = Open();
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(again->recovered().empty());
  EXPECT_NE(again->tail_problem().find(absl::StrCat(
                "record at byte ", kRecordLogHeaderBytes, " is corrupt")),
            std::string::npos)
      << again->tail_problem();
  // Appending goes on after what was trusted.
  ASSERT_TRUE(again->Append(ReportOf(7)).ok());
  again.reset();
  EXPECT_EQ(Steps(Open()->recovered()), (std::vector<int64_t>{7}));
}

TEST_F(ReportSpoolTest, ARecordThatMakesNoSenseEndsWhatIsTrusted) {
  // A record log with the spool's header whose second record, checksum and
  // all, is neither a report nor a settle.
  ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0);
  const std::string path = absl::StrCat(dir_, "/reports-rank", kRank, ".spool");
  const std::string report = "R" + ReportOf(4).SerializeAsString();
  ASSERT_TRUE(
      RecordLogWriter::Create(path, "DCPSPOOL", {report, "X", "S"}).ok());
  std::unique_ptr<ReportSpool> spool = Open();
  ASSERT_NE(spool, nullptr);
  EXPECT_EQ(Steps(spool->recovered()), (std::vector<int64_t>{4}));
  const int64_t second_at =
      kRecordLogHeaderBytes + kRecordFrameBytes + report.size();
  EXPECT_NE(spool->tail_problem().find(
                absl::StrCat("record at byte ", second_at, " is garbled")),
            std::string::npos)
      << spool->tail_problem();
  EXPECT_EQ(static_cast<int64_t>(ReadWholeFile(path).size()), second_at);
}

TEST_F(ReportSpoolTest, AFailedWriteBreaksTheSpoolAndLosesNothingKept) {
  const std::string path = PathWithTwoUnsettled();
  std::unique_ptr<ReportSpool> spool = Open();
  ASSERT_NE(spool, nullptr);
  const std::string before = ReadWholeFile(path);
  // Files may not grow past what the spool holds (write fails with EFBIG
  // once SIGXFSZ is ignored), as on a full disk.
  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
  struct rlimit limit = old_limit;
  limit.rlim_cur = before.size();
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  const absl::Status failed = spool->Append(ReportOf(9));
  const absl::Status after = spool->Append(ReportOf(10));
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
  signal(SIGXFSZ, old_handler);
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition) << after;
  EXPECT_EQ(spool->SettleOldest().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(spool->unsettled(), 2);
  EXPECT_EQ(ReadWholeFile(path), before);
  spool.reset();
  EXPECT_EQ(Steps(Open()->recovered()), (std::vector<int64_t>{1, 2}));
}

TEST_F(ReportSpoolTest, AFileThatIsNotASpoolIsRefused) {
  ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0);
  OverwriteFile(absl::StrCat(dir_, "/reports-rank", kRank, ".spool"), "hello");
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
