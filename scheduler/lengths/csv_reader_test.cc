#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/lengths/length_reader.h"
#include "scheduler/lengths/length_reader_testing.h"

namespace dcp {
namespace {

using ::dcp::testing_lengths::ExpectError;
using ::dcp::testing_lengths::ReadAll;
using ::dcp::testing_lengths::Source;
using ::dcp::testing_lengths::WriteFile;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

TEST(CsvLengthTest, ReadsTheDefaultLengthColumn) {
  const std::string path = WriteFile(
      "basic.csv", "id,length,text\n1,5,hello\n2,7,\"a, b\"\n3, 9 ,c\n");
  auto lengths = ReadAll(path, LengthFormat::kCsv);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_THAT(*lengths, ElementsAre(5, 7, 9));
}

TEST(CsvLengthTest, HandlesQuotesAndCrLf) {
  LengthSourceOptions options =
      Source(WriteFile("quoted.csv",
                       "\"text\",\"num tokens\"\r\n"
                       "\"hello, \"\"world\"\"\",12\r\n"
                       "\"\",\"13\"\r\n"
                       "plain,\"1\"\"4\"\r\n"),
             LengthFormat::kCsv);
  options.column = "num tokens";
  // Row 4's value unquotes to 1"4, which is not a length.
  ExpectError(ReadAllLengths(options),
              {"quoted.csv:4: column \"num tokens\": expected a non-negative "
               "integer length, got \"1\\\"4\""});

  options.path = WriteFile("quoted_ok.csv",
                           "\"text\",\"num tokens\"\r\n"
                           "\"hello, \"\"world\"\"\",12\r\n"
                           "\"\",\"13\"\r\n");
  auto lengths = ReadAllLengths(options);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_THAT(*lengths, ElementsAre(12, 13));
}

TEST(CsvLengthTest, QuotedFieldMaySpanLines) {
  const std::string path = WriteFile("multiline.csv",
                                     "caption,length\n"
                                     "\"line one,\nline two\",9\n"
                                     "ok,4\n"
                                     "bad,x\n");
  ExpectError(ReadAll(path, LengthFormat::kCsv), {"multiline.csv:5:"});
  const std::string good = WriteFile("multiline_ok.csv",
                                     "caption,length\n"
                                     "\"line one,\nline two\",9\n"
                                     "ok,4\n");
  auto lengths = ReadAll(good, LengthFormat::kCsv);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_THAT(*lengths, ElementsAre(9, 4));
}

TEST(CsvLengthTest, MissingColumnListsTheColumnsFound) {
  LengthSourceOptions options = Source(
      WriteFile("nocol.csv", "path,text,tokens\na,b,3\n"), LengthFormat::kCsv);
  ExpectError(ReadAllLengths(options),
              {"nocol.csv:1: column \"length\" not found",
               "\"path\", \"text\", \"tokens\""});
  options.column = "tokens";
  auto lengths = ReadAllLengths(options);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_THAT(*lengths, ElementsAre(3));
}

TEST(CsvLengthTest, RowWithTooFewFieldsNamesTheLine) {
  ExpectError(
      ReadAll(WriteFile("short.csv", "a,b,length\n1,2,3\n4,5\n"),
              LengthFormat::kCsv),
      {"short.csv:3: the row has 2 fields", "column \"length\"", "field 3"});
}

TEST(CsvLengthTest, MalformedFilesAreErrors) {
  ExpectError(ReadAll(WriteFile("empty.csv", ""), LengthFormat::kCsv),
              {"empty.csv", "empty", "header"});
  ExpectError(
      ReadAll(WriteFile("junk.csv", "length\n\"1\"2\n"), LengthFormat::kCsv),
      {"junk.csv:2: unexpected \"2\" after the closing quote"});
  ExpectError(ReadAll(WriteFile("open.csv", "text,length\n\"abc,1\n2,3\n"),
                      LengthFormat::kCsv),
              {"open.csv:2: unterminated quoted field"});
  ExpectError(
      ReadAll(WriteFile("dup.csv", "length,length\n1,2\n"), LengthFormat::kCsv),
      {"dup.csv:1:", "more than once"});
}

TEST(CsvLengthTest, SmallBufferGivesTheSameResult) {
  std::string contents = "name,\"length\"\r\n";
  std::vector<int32_t> expected;
  for (int i = 1; i <= 100; ++i) {
    absl::StrAppend(&contents, "\"sample, number ", i, "\",", i * 12345,
                    "\r\n");
    expected.push_back(i * 12345);
  }
  LengthSourceOptions options =
      Source(WriteFile("chunks.csv", contents), LengthFormat::kCsv);
  options.buffer_bytes = 7;
  auto lengths = ReadAllLengths(options);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_THAT(*lengths, ElementsAreArray(expected));
}

TEST(TsvLengthTest, ReadsTabSeparatedValues) {
  const std::string path =
      WriteFile("basic.tsv", "name\tlength\nfoo, bar\t3\n\"a\tb\"\t4\n\n");
  auto lengths = ReadAll(path, LengthFormat::kTsv);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_THAT(*lengths, ElementsAre(3, 4));
}

}  // namespace
}  // namespace dcp
