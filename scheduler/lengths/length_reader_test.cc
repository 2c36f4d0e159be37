#include "scheduler/lengths/length_reader.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/lengths/length_reader_testing.h"

namespace dcp {
namespace {

using ::dcp::testing_lengths::ExpectError;

using ::dcp::testing_lengths::ReadAll;
using ::dcp::testing_lengths::Source;
using ::dcp::testing_lengths::WriteFile;

TEST(LengthFormatTest, ParsesEveryName) {
  const std::vector<std::pair<std::string, LengthFormat>> names = {
      {"text", LengthFormat::kText},
      {"csv", LengthFormat::kCsv},
      {"tsv", LengthFormat::kTsv},
      {"jsonl", LengthFormat::kJsonl},
      {"npy", LengthFormat::kNpy},
      {"idx", LengthFormat::kMegatronIdx},
      {"video_csv", LengthFormat::kVideoCsv}};
  for (const auto& [name, format] : names) {
    absl::StatusOr<LengthFormat> parsed = ParseLengthFormat(name);
    ASSERT_TRUE(parsed.ok()) << name;
    EXPECT_EQ(*parsed, format);
    EXPECT_EQ(LengthFormatName(format), name);
  }
  ASSERT_TRUE(ParseLengthFormat("CSV").ok());
  EXPECT_EQ(*ParseLengthFormat("CSV"), LengthFormat::kCsv);
  ExpectError(ParseLengthFormat("parquet"),
              {"unknown length format \"parquet\"", "video_csv"});
}

TEST(LengthFormatTest, GuessesByExtension) {
  EXPECT_EQ(GuessLengthFormat("data/wikipedia.txt"), LengthFormat::kText);
  EXPECT_EQ(GuessLengthFormat("meta.CSV"), LengthFormat::kCsv);
  EXPECT_EQ(GuessLengthFormat("meta.tsv"), LengthFormat::kTsv);
  EXPECT_EQ(GuessLengthFormat("docs.jsonl"), LengthFormat::kJsonl);
  EXPECT_EQ(GuessLengthFormat("docs.json"), LengthFormat::kJsonl);
  EXPECT_EQ(GuessLengthFormat("lengths.npy"), LengthFormat::kNpy);
  EXPECT_EQ(GuessLengthFormat("gpt2_text_document.idx"),
            LengthFormat::kMegatronIdx);
  EXPECT_EQ(GuessLengthFormat("lengths"), LengthFormat::kText);
  EXPECT_EQ(GuessLengthFormat("run.v2/lengths"), LengthFormat::kText);
}

TEST(LengthReaderTest, RejectsBadOptions) {
  LengthSourceOptions options = Source("", LengthFormat::kText);
  ExpectError(LengthReader::Open(options), {"path is empty"});

  // The column is checked before the file is opened.
  options = Source(WriteFile("options.npy", ""), LengthFormat::kNpy);
  options.column = "tokens";
  ExpectError(LengthReader::Open(options),
              {"options.npy", "\"tokens\"", "no named columns"});

  options = Source(WriteFile("options.txt", "1\n"), LengthFormat::kText);
  options.buffer_bytes = 0;
  ExpectError(LengthReader::Open(options), {"buffer_bytes"});
}

TEST(LengthReaderTest, MissingFileIsNotFound) {
  const std::string path = ::testing::TempDir() + "/no_such_file.txt";
  ExpectError(ReadAll(path, LengthFormat::kText), {path},
              absl::StatusCode::kNotFound);
  ExpectError(ReadAll(path, LengthFormat::kNpy), {path},
              absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dcp
