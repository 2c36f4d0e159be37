#include <cstdint>
#include <memory>
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
using ::dcp::testing_lengths::ReadInBatches;
using ::dcp::testing_lengths::Source;
using ::dcp::testing_lengths::WriteFile;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::IsEmpty;

TEST(TextLengthTest, ReadsOneLengthPerLine) {
  const std::string path = WriteFile("basic.txt", "5\n17\r\n3\n\n\n");
  absl::StatusOr<std::vector<int32_t>> lengths =
      ReadAll(path, LengthFormat::kText);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_THAT(*lengths, ElementsAre(5, 17, 3));
}

TEST(TextLengthTest, HandlesMissingFinalNewlineEmptyFileAndBom) {
  auto no_newline = ReadAll(WriteFile("nonl.txt", "1\n2"), LengthFormat::kText);
  ASSERT_TRUE(no_newline.ok()) << no_newline.status();
  EXPECT_THAT(*no_newline, ElementsAre(1, 2));

  auto empty = ReadAll(WriteFile("empty.txt", ""), LengthFormat::kText);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_THAT(*empty, IsEmpty());

  auto bom = ReadAll(WriteFile("bom.txt",
                               "\xEF\xBB\xBF"
                               "7\n8\n"),
                     LengthFormat::kText);
  ASSERT_TRUE(bom.ok()) << bom.status();
  EXPECT_THAT(*bom, ElementsAre(7, 8));
}

TEST(TextLengthTest, AcceptsInt32Max) {
  auto lengths =
      ReadAll(WriteFile("max.txt", "2147483647\n"), LengthFormat::kText);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_THAT(*lengths, ElementsAre(2147483647));
}

TEST(TextLengthTest, BadLineNamesFileAndLine) {
  ExpectError(
      ReadAll(WriteFile("bad_line.txt", "1\n2\n12a\n4\n"), LengthFormat::kText),
      {"bad_line.txt:3: expected a non-negative integer length, got "
       "\"12a\""});
  ExpectError(ReadAll(WriteFile("zero.txt", "4\n0\n"), LengthFormat::kText),
              {"zero.txt:2: length must be positive, got 0"});
  ExpectError(ReadAll(WriteFile("negative.txt", "-3\n"), LengthFormat::kText),
              {"negative.txt:1: length must be positive, got -3"});
  ExpectError(ReadAll(WriteFile("overflow.txt", "1\n2147483648\n"),
                      LengthFormat::kText),
              {"overflow.txt:2: length 2147483648 is larger than the int32 "
               "maximum 2147483647"});
  ExpectError(
      ReadAll(WriteFile("spaces.txt", "1\n 2\n"), LengthFormat::kText),
      {"spaces.txt:2: expected a non-negative integer length, got \" 2\""});
  ExpectError(
      ReadAll(WriteFile("comment.txt", "# lengths\n1\n"), LengthFormat::kText),
      {"comment.txt:1:"});
}

TEST(TextLengthTest, BlankLineBeforeTheEndIsAnError) {
  ExpectError(ReadAll(WriteFile("gap.txt", "1\n\n2\n"), LengthFormat::kText),
              {"gap.txt:2: blank line"});
}

TEST(TextLengthTest, LinesCrossChunkBoundaries) {
  std::string contents;
  std::vector<int32_t> expected;
  for (int i = 1; i <= 300; ++i) {
    // Every third value has up to 10 digits, longer than the buffer.
    const int32_t value =
        i % 3 == 0
            ? static_cast<int32_t>(int64_t{i} * 1944032191 % 2000000000 + 1)
            : i;
    expected.push_back(value);
    absl::StrAppend(&contents, value, i % 2 ? "\r\n" : "\n");
  }
  expected.push_back(1234567890);
  absl::StrAppend(&contents, "1234567890");
  LengthSourceOptions options =
      Source(WriteFile("chunks.txt", contents), LengthFormat::kText);
  options.buffer_bytes = 7;
  absl::StatusOr<std::vector<int32_t>> lengths = ReadAllLengths(options);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_THAT(*lengths, ElementsAreArray(expected));

  // Line numbers stay right across chunks.
  std::string bad;
  for (int i = 1; i < 150; ++i) absl::StrAppend(&bad, i * 1000, "\n");
  absl::StrAppend(&bad, "12345x7\n1\n");
  options = Source(WriteFile("chunks_bad.txt", bad), LengthFormat::kText);
  options.buffer_bytes = 7;
  ExpectError(ReadAllLengths(options),
              {"chunks_bad.txt:150: expected a non-negative integer length, "
               "got \"12345x7\""});
}

TEST(TextLengthTest, StreamsInBatches) {
  std::string contents;
  for (int i = 1; i <= 10; ++i) absl::StrAppend(&contents, i, "\n");
  absl::StatusOr<std::unique_ptr<LengthReader>> reader = LengthReader::Open(
      Source(WriteFile("stream.txt", contents), LengthFormat::kText));
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->SizeHint(), -1);
  std::vector<size_t> sizes;
  const std::vector<int64_t> all = ReadInBatches(**reader, 3, &sizes);
  EXPECT_THAT(sizes, ElementsAre(3, 3, 3, 1, 0));
  EXPECT_THAT(all, ElementsAre(1, 2, 3, 4, 5, 6, 7, 8, 9, 10));
  std::vector<int64_t> batch;
  absl::StatusOr<size_t> again = (*reader)->NextBatch(3, &batch);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0u);
}

}  // namespace
}  // namespace dcp
