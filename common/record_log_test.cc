#include "common/record_log.h"

#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

/// The header of the logs these tests write: a kind and its version.
constexpr absl::string_view kHeader("TESTLOG\1", 8);

/// A log of `payloads`, made by Create (the first) and Append (the rest).
std::string MakeLog(const std::string& name,
                    const std::vector<std::string>& payloads) {
  const std::string path = TestTmpPath(name);
  absl::StatusOr<RecordLogWriter> log =
      RecordLogWriter::Create(path, kHeader, {payloads.front()});
  EXPECT_TRUE(log.ok()) << log.status();
  for (size_t i = 1; i < payloads.size(); ++i) {
    EXPECT_TRUE(log->Append(payloads[i]).ok());
  }
  EXPECT_TRUE(log->Sync().ok());
  return path;
}

TEST(Crc32cTest, MatchesTheCastagnoliCheckValue) {
  // The check value of CRC-32C (RFC 3720, appendix B.4).
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  // Continuing a CRC over a split input gives the CRC of the whole.
  EXPECT_EQ(Crc32c("6789", Crc32c("12345")), Crc32c("123456789"));
}

TEST(RecordLogTest, RecordsComeBackInOrder) {
  const std::vector<std::string> payloads = {"one", std::string(1000, 'x'), "",
                                             std::string("\0\1\2", 3)};
  const std::string path = MakeLog("round-trip.log", payloads);
  absl::StatusOr<RecordLogContents> read = ReadRecordLog(path, kHeader);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->records, payloads);
  EXPECT_EQ(read->tail_problem, "");
  int64_t bytes = kRecordLogHeaderBytes;
  for (const std::string& p : payloads) {
    bytes += kRecordFrameBytes + static_cast<int64_t>(p.size());
  }
  EXPECT_EQ(read->valid_bytes, bytes);
  EXPECT_EQ(read->file_bytes, bytes);
}

TEST(RecordLogTest, EveryTornTailIsDetectedAndSkipped) {
  const std::string path = MakeLog("torn.log", {"first", "second", "third"});
  const std::string whole = ReadWholeFile(path);
  const int64_t third_at = static_cast<int64_t>(whole.size()) -
                           kRecordFrameBytes - static_cast<int64_t>(5);
  // Every cut inside the last record leaves the first two, and names where
  // the torn one starts.
  for (int64_t cut = third_at + 1; cut < static_cast<int64_t>(whole.size());
       ++cut) {
    OverwriteFile(path, whole.substr(0, cut));
    absl::StatusOr<RecordLogContents> read = ReadRecordLog(path, kHeader);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_THAT(read->records, ElementsAre("first", "second")) << cut;
    EXPECT_EQ(read->valid_bytes, third_at) << cut;
    EXPECT_EQ(read->file_bytes, cut);
    EXPECT_THAT(
        read->tail_problem,
        HasSubstr(absl::StrCat("record at byte ", third_at, " is torn")));
  }
  // Cut exactly between records: nothing is torn.
  OverwriteFile(path, whole.substr(0, third_at));
  absl::StatusOr<RecordLogContents> read = ReadRecordLog(path, kHeader);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->tail_problem, "");
  EXPECT_EQ(read->records.size(), 2);
}

TEST(RecordLogTest, ACorruptRecordEndsWhatIsTrusted) {
  const std::string path = MakeLog("corrupt.log", {"first", "second", "third"});
  const std::string whole = ReadWholeFile(path);
  const size_t second_at = kRecordLogHeaderBytes + kRecordFrameBytes + 5;
  // One flipped bit in the second record's payload, then in its length.
  for (size_t at : {second_at + kRecordFrameBytes + 2, second_at}) {
    std::string bad = whole;
    bad[at] ^= 0x10;
    OverwriteFile(path, bad);
    absl::StatusOr<RecordLogContents> read = ReadRecordLog(path, kHeader);
    ASSERT_TRUE(read.ok()) << read.status();
    // The third record is whole, but nothing after a bad one is trusted.
    EXPECT_THAT(read->records, ElementsAre("first")) << at;
    EXPECT_EQ(read->valid_bytes, second_at);
    EXPECT_THAT(read->tail_problem,
                HasSubstr(absl::StrCat("record at byte ", second_at)));
  }
}

TEST(RecordLogTest, AppendingAfterATornTailCutsItOff) {
  const std::string path = MakeLog("reopen.log", {"first", "second"});
  const std::string whole = ReadWholeFile(path);
  OverwriteFile(path, whole.substr(0, whole.size() - 3));
  absl::StatusOr<RecordLogContents> read = ReadRecordLog(path, kHeader);
  ASSERT_TRUE(read.ok());
  ASSERT_NE(read->tail_problem, "");
  absl::StatusOr<RecordLogWriter> log =
      RecordLogWriter::OpenForAppend(path, read->valid_bytes);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(log->size(), read->valid_bytes);
  ASSERT_TRUE(log->Append("again").ok());
  ASSERT_TRUE(log->Sync().ok());
  read = ReadRecordLog(path, kHeader);
  ASSERT_TRUE(read.ok());
  EXPECT_THAT(read->records, ElementsAre("first", "again"));
  EXPECT_EQ(read->tail_problem, "");
}

TEST(RecordLogTest, CreateReplacesALogWhole) {
  const std::string path = MakeLog("replace.log", {"old", "older"});
  absl::StatusOr<RecordLogWriter> log =
      RecordLogWriter::Create(path, kHeader, {"new"});
  ASSERT_TRUE(log.ok()) << log.status();
  absl::StatusOr<RecordLogContents> read = ReadRecordLog(path, kHeader);
  ASSERT_TRUE(read.ok());
  EXPECT_THAT(read->records, ElementsAre("new"));
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0) << "temporary left";
}

TEST(RecordLogTest, RefusesWhatIsNotALog) {
  EXPECT_TRUE(absl::IsNotFound(
      ReadRecordLog(TestTmpPath("missing.log"), kHeader).status()));
  const std::string path = TestTmpPath("not-a-log");
  OverwriteFile(path, "hello, world");
  const absl::Status bad = ReadRecordLog(path, kHeader).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(bad)) << bad;
  EXPECT_THAT(bad.message(), HasSubstr("header is wrong"));
  OverwriteFile(path, "DCP");
  EXPECT_THAT(ReadRecordLog(path, kHeader).status().message(),
              HasSubstr("cut short"));
}

TEST(RecordLogTest, ALogOfAnotherKindIsRefused) {
  const std::string path = MakeLog("other-kind.log", {"first"});
  constexpr absl::string_view kNextVersion("TESTLOG\2", 8);
  const absl::Status other = ReadRecordLog(path, kNextVersion).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(other)) << other;
  EXPECT_THAT(other.message(), HasSubstr("header is wrong"));
  EXPECT_TRUE(ReadRecordLog(path, kHeader).ok());
}

TEST(RecordLogTest, AHeaderOfTheWrongLengthIsRefused) {
  const std::string path = TestTmpPath("short-header.log");
  EXPECT_TRUE(absl::IsInvalidArgument(
      RecordLogWriter::Create(path, "LOG", {}).status()));
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "a log was written";
  EXPECT_TRUE(absl::IsInvalidArgument(
      ReadRecordLog(path, "a header of more than eight bytes").status()));
}

TEST(RecordLogTest, ClearLeavesTheHeaderAndAppendsGoOnAfterIt) {
  const std::string path = MakeLog("clear.log", {"first", "second"});
  absl::StatusOr<RecordLogContents> read = ReadRecordLog(path, kHeader);
  ASSERT_TRUE(read.ok()) << read.status();
  absl::StatusOr<RecordLogWriter> log =
      RecordLogWriter::OpenForAppend(path, read->valid_bytes);
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_TRUE(log->Clear().ok());
  ASSERT_TRUE(log->Sync().ok());
  EXPECT_EQ(log->size(), kRecordLogHeaderBytes);
  EXPECT_EQ(ReadWholeFile(path), kHeader);
  ASSERT_TRUE(log->Append("after").ok());
  ASSERT_TRUE(log->Sync().ok());
  read = ReadRecordLog(path, kHeader);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(read->records, ElementsAre("after"));
  EXPECT_EQ(read->valid_bytes, read->file_bytes);
}

}  // namespace
}  // namespace dcp
