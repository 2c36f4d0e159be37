#include "scheduler/lengths/length_reader.h"

#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Writes `contents` to a fresh file under the test's temporary directory and
// returns its path.
std::string WriteFile(absl::string_view name, absl::string_view contents) {
  std::string path = absl::StrCat(::testing::TempDir(), "/", name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), contents.size());
  out.close();
  EXPECT_TRUE(out.good()) << path;
  return path;
}

// The little-endian bytes of `values` (the host is little-endian).
template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) memcpy(&out[0], values.data(), out.size());
  return out;
}

template <typename T>
std::string Scalar(T value) {
  return Bytes(std::vector<T>{value});
}

// A minimal .npy writer: `shape` is the Python tuple text, e.g. "(3,)".
std::string NpyBytes(absl::string_view descr, absl::string_view shape,
                     absl::string_view data, int major = 1,
                     bool fortran_order = false) {
  std::string header =
      absl::StrCat("{'descr': '", descr,
                   "', 'fortran_order': ", fortran_order ? "True" : "False",
                   ", 'shape': ", shape, ", }");
  const size_t prefix = 8 + (major == 1 ? 2 : 4);
  const size_t unpadded = prefix + header.size() + 1;
  header.append((unpadded + 63) / 64 * 64 - unpadded, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  if (major == 1) {
    out += Scalar<uint16_t>(header.size());
  } else {
    out += Scalar<uint32_t>(header.size());
  }
  return absl::StrCat(out, header, data);
}

// The data offset of an `NpyBytes` file: its header is padded to 64 bytes
// whenever it fits.
constexpr size_t kNpyDataOffset = 128;

// A minimal Megatron-LM MMIDIDX writer, one document per sequence.
std::string IdxBytes(const std::vector<int32_t>& lengths, uint64_t version = 1,
                     uint8_t dtype_code = 8) {
  std::string out("MMIDIDX\0\0", 9);
  out += Scalar<uint64_t>(version);
  out += Scalar<uint8_t>(dtype_code);
  out += Scalar<uint64_t>(lengths.size());
  out += Scalar<uint64_t>(lengths.size() + 1);
  out += Bytes(lengths);
  std::vector<int64_t> pointers;
  int64_t pointer = 0;
  for (int32_t length : lengths) {
    pointers.push_back(pointer);
    pointer += int64_t{length} * 2;
  }
  out += Bytes(pointers);
  std::vector<int64_t> documents;
  for (size_t i = 0; i <= lengths.size(); ++i) documents.push_back(i);
  out += Bytes(documents);
  return out;
}

LengthSourceOptions Source(const std::string& path, LengthFormat format) {
  LengthSourceOptions options;
  options.path = path;
  options.format = format;
  return options;
}

// Reads a whole source with `ReadAllLengths`.
absl::StatusOr<std::vector<int32_t>> ReadAll(const std::string& path,
                                             LengthFormat format) {
  return ReadAllLengths(Source(path, format));
}

// Expects `result` to fail with `code` and a message containing every one of
// `parts`.
template <typename T>
void ExpectError(const absl::StatusOr<T>& result,
                 const std::vector<std::string>& parts,
                 absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  ASSERT_FALSE(result.ok()) << "expected an error containing " << parts[0];
  EXPECT_EQ(result.status().code(), code) << result.status();
  for (const std::string& part : parts) {
    EXPECT_THAT(std::string(result.status().message()), HasSubstr(part));
  }
}

// ------------------------------------------------------------- formats ----

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

  options = Source(WriteFile("options.npy", NpyBytes("<i4", "(0,)", "")),
                   LengthFormat::kNpy);
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

// ---------------------------------------------------------------- text ----

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
  std::vector<int64_t> batch = {99, 98, 97, 96};  // Cleared by NextBatch.
  std::vector<size_t> sizes;
  std::vector<int64_t> all;
  for (;;) {
    absl::StatusOr<size_t> n = (*reader)->NextBatch(3, &batch);
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_EQ(batch.size(), *n);
    sizes.push_back(*n);
    all.insert(all.end(), batch.begin(), batch.end());
    if (*n == 0) break;
  }
  EXPECT_THAT(sizes, ElementsAre(3, 3, 3, 1, 0));
  EXPECT_THAT(all, ElementsAre(1, 2, 3, 4, 5, 6, 7, 8, 9, 10));
  absl::StatusOr<size_t> again = (*reader)->NextBatch(3, &batch);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0u);
}

// ----------------------------------------------------------------- csv ----

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

// --------------------------------------------------------------- jsonl ----

TEST(JsonlLengthTest, ReadsATopLevelField) {
  const std::string path =
      WriteFile("basic.jsonl",
                "{\"length\": 5}\n"
                "{\"text\": \"a \\\"length\\\": 9\", \"length\": 7}\r\n"
                "{\"meta\": {\"length\": 100}, \"tags\": [1, {\"length\": 2}],"
                " \"length\": 3}\n"
                "\n");
  auto lengths = ReadAll(path, LengthFormat::kJsonl);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_THAT(*lengths, ElementsAre(5, 7, 3));
}

TEST(JsonlLengthTest, ReadsANamedField) {
  LengthSourceOptions options =
      Source(WriteFile("named.jsonl",
                       "{\"length\": \"n/a\", \"num_tokens\": 11}\n"
                       "{\"num_tokens\": 2147483647}\n"),
             LengthFormat::kJsonl);
  options.column = "num_tokens";
  auto lengths = ReadAllLengths(options);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_THAT(*lengths, ElementsAre(11, 2147483647));
}

TEST(JsonlLengthTest, BadValuesNameTheLine) {
  ExpectError(
      ReadAll(WriteFile("float.jsonl", "{\"length\": 1}\n{\"length\": 12.5}\n"),
              LengthFormat::kJsonl),
      {"float.jsonl:2: field \"length\": expected an integer length, "
       "got 12.5"});
  ExpectError(ReadAll(WriteFile("string.jsonl", "{\"length\": \"12\"}\n"),
                      LengthFormat::kJsonl),
              {"string.jsonl:1: field \"length\"", "got the string \"12\""});
  ExpectError(ReadAll(WriteFile("object.jsonl", "{\"length\": {\"n\": 1}}\n"),
                      LengthFormat::kJsonl),
              {"object.jsonl:1:", "got an object"});
  ExpectError(ReadAll(WriteFile("zero.jsonl", "{\"length\": 0}\n"),
                      LengthFormat::kJsonl),
              {"zero.jsonl:1: field \"length\": length must be positive"});
  ExpectError(ReadAll(WriteFile("neg.jsonl", "{\"length\": -4}\n"),
                      LengthFormat::kJsonl),
              {"neg.jsonl:1:", "must be positive, got -4"});
  ExpectError(ReadAll(WriteFile("big.jsonl", "{\"length\": 3000000000}\n"),
                      LengthFormat::kJsonl),
              {"big.jsonl:1:", "3000000000 is larger than the int32 maximum"});
}

TEST(JsonlLengthTest, BadLinesNameTheLine) {
  ExpectError(
      ReadAll(WriteFile("missing.jsonl", "{\"length\": 1}\n{\"len\": 2}\n"),
              LengthFormat::kJsonl),
      {"missing.jsonl:2: field \"length\" not found"});
  ExpectError(
      ReadAll(WriteFile("broken.jsonl", "{\"length\": 1}\n{\"length\": 5\n"),
              LengthFormat::kJsonl),
      {"broken.jsonl:2: invalid JSON"});
  ExpectError(ReadAll(WriteFile("trailing.jsonl", "{\"length\": 1} x\n"),
                      LengthFormat::kJsonl),
              {"trailing.jsonl:1: invalid JSON"});
  ExpectError(
      ReadAll(WriteFile("array.jsonl", "[1, 2]\n"), LengthFormat::kJsonl),
      {"array.jsonl:1: expected a JSON object, got an array"});
  ExpectError(ReadAll(WriteFile("gap.jsonl",
                                "{\"length\": 1}\n\n{\"length\": "
                                "1}\n"),
                      LengthFormat::kJsonl),
              {"gap.jsonl:2: blank line"});
}

TEST(JsonlLengthTest, SmallBufferGivesTheSameResult) {
  std::string contents;
  std::vector<int32_t> expected;
  for (int i = 1; i <= 50; ++i) {
    absl::StrAppend(&contents, "{\"text\": \"sample ", i,
                    "\", \"length\": ", i * 31, "}\n");
    expected.push_back(i * 31);
  }
  LengthSourceOptions options =
      Source(WriteFile("chunks.jsonl", contents), LengthFormat::kJsonl);
  options.buffer_bytes = 7;
  auto lengths = ReadAllLengths(options);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_THAT(*lengths, ElementsAreArray(expected));
}

// What one JSON Lines row holds.
enum class RowKind { kInvalidJson, kNotObject, kMissing, kBadValue, kLength };

// The reference: nlohmann_json's reading of `line`. Returns nullopt for
// numbers beyond double's range, which nlohmann rejects but JSON allows (and
// the reader accepts, as Python's json does).
std::optional<RowKind> ReferenceKind(const std::string& line, int64_t* value) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(line);
  } catch (const nlohmann::json::out_of_range&) {
    return std::nullopt;
  } catch (const nlohmann::json::exception&) {
    return RowKind::kInvalidJson;
  }
  if (!json.is_object()) return RowKind::kNotObject;
  const auto it = json.find("length");
  if (it == json.end()) return RowKind::kMissing;
  if (!it->is_number_unsigned()) return RowKind::kBadValue;
  const uint64_t length = it->get<uint64_t>();
  if (length < 1 || length > 2147483647) return RowKind::kBadValue;
  *value = static_cast<int64_t>(length);
  return RowKind::kLength;
}

// The reader's reading of a one-line file holding `line`.
RowKind ReaderKind(const std::string& line, int64_t* value) {
  const std::string path = WriteFile("fuzz.jsonl", line + "\n");
  absl::StatusOr<std::vector<int32_t>> lengths =
      ReadAll(path, LengthFormat::kJsonl);
  if (lengths.ok()) {
    EXPECT_EQ(lengths->size(), 1u) << line;
    *value = lengths->empty() ? 0 : (*lengths)[0];
    return RowKind::kLength;
  }
  const std::string message(lengths.status().message());
  EXPECT_THAT(message, HasSubstr("fuzz.jsonl:1: ")) << line;
  if (absl::StrContains(message, "invalid JSON")) return RowKind::kInvalidJson;
  if (absl::StrContains(message, "expected a JSON object")) {
    return RowKind::kNotObject;
  }
  if (absl::StrContains(message, "not found")) return RowKind::kMissing;
  return RowKind::kBadValue;
}

void ExpectSameAsReference(const std::string& line) {
  int64_t expected = 0, actual = 0;
  const std::optional<RowKind> reference = ReferenceKind(line, &expected);
  if (!reference.has_value()) return;
  EXPECT_EQ(ReaderKind(line, &actual), *reference) << line;
  if (*reference == RowKind::kLength) EXPECT_EQ(actual, expected) << line;
}

// The hand-written JSON scanner agrees with nlohmann_json on tricky rows and
// on random mutations of them. ASCII only and no surrogate escapes: the
// scanner passes non-ASCII bytes and lone surrogates through unchecked.
TEST(JsonlLengthTest, AgreesWithNlohmannJson) {
  const std::vector<std::string> seeds = {
      R"({"length": 5})",
      R"({"a": [1, 2.5, -3e+2, 0.5E-1, true, false, null, {"b": "x\"y"}],)"
      R"( "length": 42})",
      R"({"text": "caf\u00e9 \/ \\ \n", "length": 7, "x": {}, "y": []})",
      R"({"length": 12.5})",
      R"({"length": "3"})",
      R"({"\u006cength": 9})",
      R"({"length": 1, "length": 2})",
      R"({"length": 0})",
      R"({"length": -0})",
      R"({"length": 1e2})",
      R"({"length": 99999999999999999999999})",
      R"({})",
      R"([])",
      R"("length")",
      R"(17)",
      R"(null)",
      R"({"length": 01})",
      R"({"length": 1.})",
      R"({"length": .5})",
      R"({"length": 1e})",
      R"({"length": -})",
      R"({"length": - 1})",
      R"({"length": 1, "s": "\x"})",
      R"({"length": 1, "s": "\u12"})",
      R"({"length": tru})",
      R"({"length": nulll})",
      R"({"length": 1,})",
      R"({,})",
      R"({"length" 1})",
      R"({"length": 1}})",
      R"({"a": [1,], "length": 1})",
      "{\"a\": \"tab\there\", \"length\": 1}",
      R"( {"length": 1} )",
      R"({"length": 1} {"length": 2})",
      R"({"length": 1)",
      R"({"length": [1]})",
      R"({"nested": {"length": 3}})",
  };
  for (const std::string& seed : seeds) ExpectSameAsReference(seed);

  const std::string alphabet = "{}[]\":,\\ 0123456789-+.eEtrufalsnx/b";
  std::mt19937 random(20240611);
  for (int i = 0; i < 2000; ++i) {
    std::string line = seeds[random() % seeds.size()];
    const int edits = 1 + random() % 3;
    for (int e = 0; e < edits; ++e) {
      const size_t at = random() % (line.size() + 1);
      const char c = alphabet[random() % alphabet.size()];
      switch (random() % 3) {
        case 0:
          line.insert(line.begin() + at, c);
          break;
        case 1:
          if (at < line.size()) line[at] = c;
          break;
        default:
          if (at < line.size()) line.erase(at, 1);
          break;
      }
    }
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    ExpectSameAsReference(line);
  }
}

// ----------------------------------------------------------------- npy ----

TEST(NpyLengthTest, ReadsEveryDtypeAndVersion) {
  const std::vector<int> values = {1, 300, 65535, 4096};
  for (int major : {1, 2, 3}) {
    for (const std::string descr : {"<i4", "<i8", "<u4", "<u2"}) {
      std::string data;
      if (descr == "<i4")
        data = Bytes(std::vector<int32_t>(values.begin(), values.end()));
      if (descr == "<i8")
        data = Bytes(std::vector<int64_t>(values.begin(), values.end()));
      if (descr == "<u4")
        data = Bytes(std::vector<uint32_t>(values.begin(), values.end()));
      if (descr == "<u2")
        data = Bytes(std::vector<uint16_t>(values.begin(), values.end()));
      const std::string path =
          WriteFile(absl::StrCat("v", major, "_", descr.substr(1), ".npy"),
                    NpyBytes(descr, "(4,)", data, major));
      SCOPED_TRACE(path);
      absl::StatusOr<std::unique_ptr<LengthReader>> reader =
          LengthReader::Open(Source(path, LengthFormat::kNpy));
      ASSERT_TRUE(reader.ok()) << reader.status();
      EXPECT_EQ((*reader)->SizeHint(), 4);
      auto lengths = ReadAll(path, LengthFormat::kNpy);
      ASSERT_TRUE(lengths.ok()) << lengths.status();
      EXPECT_THAT(*lengths, ElementsAreArray(values));
    }
  }
}

TEST(NpyLengthTest, AcceptsFortranOrderAndEmptyArrays) {
  auto fortran = ReadAll(
      WriteFile("fortran.npy",
                NpyBytes("<i8", "(2,)", Bytes(std::vector<int64_t>{8, 9}), 1,
                         /*fortran_order=*/true)),
      LengthFormat::kNpy);
  ASSERT_TRUE(fortran.ok()) << fortran.status();
  EXPECT_THAT(*fortran, ElementsAre(8, 9));

  auto empty = ReadAll(WriteFile("empty.npy", NpyBytes("<i4", "(0,)", "")),
                       LengthFormat::kNpy);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_THAT(*empty, IsEmpty());
}

TEST(NpyLengthTest, StreamsInBatches) {
  std::vector<int32_t> values;
  for (int i = 1; i <= 10; ++i) values.push_back(i * 10);
  absl::StatusOr<std::unique_ptr<LengthReader>> reader = LengthReader::Open(
      Source(WriteFile("stream.npy", NpyBytes("<i4", "(10,)", Bytes(values))),
             LengthFormat::kNpy));
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->SizeHint(), 10);
  std::vector<int64_t> batch;
  std::vector<size_t> sizes;
  std::vector<int64_t> all;
  for (;;) {
    absl::StatusOr<size_t> n = (*reader)->NextBatch(3, &batch);
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_EQ(batch.size(), *n);
    sizes.push_back(*n);
    all.insert(all.end(), batch.begin(), batch.end());
    if (*n == 0) break;
  }
  EXPECT_THAT(sizes, ElementsAre(3, 3, 3, 1, 0));
  EXPECT_THAT(all, ElementsAre(10, 20, 30, 40, 50, 60, 70, 80, 90, 100));
}

TEST(NpyLengthTest, BadFilesNameTheByteOffset) {
  const std::string ints = Bytes(std::vector<int32_t>{1, 2, 3});
  ExpectError(
      ReadAll(WriteFile("magic.npy", "NOTNUMPY" + ints), LengthFormat::kNpy),
      {"magic.npy: byte offset 0: bad magic"});
  ExpectError(ReadAll(WriteFile("tiny.npy", "\x93NU"), LengthFormat::kNpy),
              {"tiny.npy: byte offset 0: bad magic"});
  std::string version = NpyBytes("<i4", "(3,)", ints);
  version[6] = 4;
  ExpectError(ReadAll(WriteFile("version.npy", version), LengthFormat::kNpy),
              {"version.npy: byte offset 6: unsupported .npy format version "
               "4.0"});

  // The header declares 10 values; only 3 are there.
  const std::string truncated = NpyBytes("<i4", "(10,)", ints);
  ExpectError(
      ReadAll(WriteFile("truncated.npy", truncated), LengthFormat::kNpy),
      {absl::StrCat("truncated.npy: byte offset ", truncated.size(),
                    ": truncated data"),
       absl::StrCat("from byte offset ", kNpyDataOffset)});
  const std::string cut_header = NpyBytes("<i4", "(3,)", ints).substr(0, 40);
  ExpectError(
      ReadAll(WriteFile("cut_header.npy", cut_header), LengthFormat::kNpy),
      {"cut_header.npy: byte offset 40: truncated header"});

  ExpectError(ReadAll(WriteFile("float.npy", NpyBytes("<f4", "(3,)", ints)),
                      LengthFormat::kNpy),
              {"float.npy: byte offset", "unsupported dtype \"<f4\""});
  ExpectError(ReadAll(WriteFile("big.npy", NpyBytes(">i4", "(3,)", ints)),
                      LengthFormat::kNpy),
              {"big.npy: byte offset", "big-endian dtype '>i4'"});
  ExpectError(
      ReadAll(WriteFile("two_d.npy", NpyBytes("<i4", "(1, 3)", ints)),
              LengthFormat::kNpy),
      {"two_d.npy: byte offset 10: expected a 1-D array, got shape (1, 3)"});
  ExpectError(ReadAll(WriteFile("scalar.npy", NpyBytes("<i4", "()", ints)),
                      LengthFormat::kNpy),
              {"scalar.npy", "expected a 1-D array, got shape ()"});
  ExpectError(ReadAll(WriteFile("garbled.npy", NpyBytes("<i4", "[3]", ints)),
                      LengthFormat::kNpy),
              {"garbled.npy: byte offset", "malformed .npy header"});
}

TEST(NpyLengthTest, BadValuesNameTheByteOffset) {
  ExpectError(ReadAll(WriteFile("zero.npy",
                                NpyBytes("<i8", "(3,)",
                                         Bytes(std::vector<int64_t>{5, 6, 0}))),
                      LengthFormat::kNpy),
              {absl::StrCat("zero.npy: byte offset ", kNpyDataOffset + 16,
                            ": element 2: length must be positive, got 0")});
  ExpectError(
      ReadAll(WriteFile("huge.npy",
                        NpyBytes("<u4", "(2,)",
                                 Bytes(std::vector<uint32_t>{1, 3000000000u}))),
              LengthFormat::kNpy),
      {absl::StrCat("huge.npy: byte offset ", kNpyDataOffset + 4,
                    ": element 1: length 3000000000 is larger than the int32 "
                    "maximum")});
}

// ----------------------------------------------------------------- idx ----

TEST(MegatronIdxTest, ReadsSequenceLengths) {
  const std::string path = WriteFile("basic.idx", IdxBytes({5, 1024, 3, 77}));
  absl::StatusOr<std::unique_ptr<LengthReader>> reader =
      LengthReader::Open(Source(path, LengthFormat::kMegatronIdx));
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->SizeHint(), 4);
  auto lengths = ReadAll(path, LengthFormat::kMegatronIdx);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_THAT(*lengths, ElementsAre(5, 1024, 3, 77));

  auto empty =
      ReadAll(WriteFile("empty.idx", IdxBytes({})), LengthFormat::kMegatronIdx);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_THAT(*empty, IsEmpty());
}

TEST(MegatronIdxTest, BadFilesNameTheByteOffset) {
  std::string magic = IdxBytes({1, 2});
  magic[0] = 'X';
  ExpectError(
      ReadAll(WriteFile("magic.idx", magic), LengthFormat::kMegatronIdx),
      {"magic.idx: byte offset 0: bad magic"});
  ExpectError(ReadAll(WriteFile("version.idx", IdxBytes({1, 2}, 2)),
                      LengthFormat::kMegatronIdx),
              {"version.idx: byte offset 9: unsupported version 2"});
  ExpectError(ReadAll(WriteFile("dtype.idx", IdxBytes({1, 2}, 1, 42)),
                      LengthFormat::kMegatronIdx),
              {"dtype.idx: byte offset 17: unknown dtype code 42"});
  ExpectError(ReadAll(WriteFile("header.idx", IdxBytes({1, 2}).substr(0, 20)),
                      LengthFormat::kMegatronIdx),
              {"header.idx: byte offset 20: truncated header"});
  // Two int32 lengths need bytes [34, 42); cut inside them.
  ExpectError(ReadAll(WriteFile("lengths.idx", IdxBytes({1, 2}).substr(0, 40)),
                      LengthFormat::kMegatronIdx),
              {"lengths.idx: byte offset 40: truncated sequence lengths",
               "from byte offset 34"});
  // Cut inside the pointers that follow the lengths.
  ExpectError(ReadAll(WriteFile("pointers.idx", IdxBytes({1, 2}).substr(0, 50)),
                      LengthFormat::kMegatronIdx),
              {"pointers.idx: byte offset 50: truncated sequence pointers",
               "from byte offset 42"});
  ExpectError(ReadAll(WriteFile("zero.idx", IdxBytes({4, 0})),
                      LengthFormat::kMegatronIdx),
              {"zero.idx: byte offset 38: element 1: length must be positive"});
}

// --------------------------------------------------------------- video ----

TEST(VideoTokenCountTest, FollowsTheDocumentedFormula) {
  VideoTokenizerOptions open_sora;
  // ceil(33/4) * ceil(720/16) * ceil(1280/16) = 9 * 45 * 80.
  EXPECT_EQ(*VideoTokenCount(33, 720, 1280, open_sora), 9 * 45 * 80);
  // Partial cells round up: ceil(257/16) = 17.
  EXPECT_EQ(*VideoTokenCount(1, 257, 256, open_sora), 1 * 17 * 16);
  EXPECT_EQ(*VideoTokenCount(16, 256, 256, open_sora), 4 * 16 * 16);

  VideoTokenizerOptions causal;
  causal.causal_first_frame = true;
  // 1 + ceil(15/4) = 5 latent frames; an image is one.
  EXPECT_EQ(*VideoTokenCount(16, 256, 256, causal), 5 * 16 * 16);
  EXPECT_EQ(*VideoTokenCount(17, 256, 256, causal), 5 * 16 * 16);
  EXPECT_EQ(*VideoTokenCount(1, 256, 256, causal), 1 * 16 * 16);

  VideoTokenizerOptions custom;
  custom.temporal_compression = 8;
  custom.spatial_compression = 4;
  custom.patch_size = 1;
  EXPECT_EQ(*VideoTokenCount(64, 64, 32, custom), 8 * 16 * 8);
}

TEST(VideoTokenCountTest, RejectsBadInput) {
  VideoTokenizerOptions options;
  ExpectError(VideoTokenCount(0, 256, 256, options), {"must be positive"});
  options.patch_size = 0;
  ExpectError(VideoTokenCount(1, 256, 256, options), {"patch_size=0"});
}

TEST(VideoCsvTest, TurnsOpenSoraMetadataIntoTokens) {
  const std::string path = WriteFile(
      "opensora.csv",
      "path,text,num_frames,height,width,aspect_ratio,fps\n"
      "clips/a.mp4,\"a cat, jumping \"\"high\"\"\",51,720,1280,0.5625,24\n"
      "images/b.jpg,a dog,1,240,426,0.5634,\n");
  auto tokens = ReadAll(path, LengthFormat::kVideoCsv);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  // ceil(51/4)=13 * 45 * 80; ceil(240/16)=15 * ceil(426/16)=27.
  EXPECT_THAT(*tokens, ElementsAre(13 * 45 * 80, 15 * 27));
}

TEST(VideoCsvTest, UsesConfiguredColumnsAndOptions) {
  LengthSourceOptions options =
      Source(WriteFile("custom_video.csv", "w,h,frames\n64,32,17\n"),
             LengthFormat::kVideoCsv);
  options.video_columns.num_frames = "frames";
  options.video_columns.height = "h";
  options.video_columns.width = "w";
  options.video.causal_first_frame = true;
  auto tokens = ReadAllLengths(options);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_THAT(*tokens, ElementsAre(5 * 2 * 4));

  options.video.temporal_compression = 0;
  ExpectError(LengthReader::Open(options),
              {"custom_video.csv", "temporal_compression=0"});
}

TEST(VideoCsvTest, BadRowsNameTheLine) {
  ExpectError(ReadAll(WriteFile("video_zero.csv",
                                "num_frames,height,width\n"
                                "16,256,256\n"
                                "0,256,256\n"),
                      LengthFormat::kVideoCsv),
              {"video_zero.csv:3: column \"num_frames\": value must be "
               "positive, got 0"});
  ExpectError(ReadAll(WriteFile("video_nocol.csv", "num_frames,height\n1,2\n"),
                      LengthFormat::kVideoCsv),
              {"video_nocol.csv:1: column \"width\" not found",
               "\"num_frames\", \"height\""});
  ExpectError(ReadAll(WriteFile("video_huge.csv",
                                "num_frames,height,width\n"
                                "2000000,100000,100000\n"),
                      LengthFormat::kVideoCsv),
              {"video_huge.csv:2: token count", "larger than the int32"});
  LengthSourceOptions with_column =
      Source(WriteFile("video_col.csv", "num_frames,height,width\n1,1,1\n"),
             LengthFormat::kVideoCsv);
  with_column.column = "length";
  ExpectError(LengthReader::Open(with_column), {"no named columns"});
}

}  // namespace
}  // namespace dcp
