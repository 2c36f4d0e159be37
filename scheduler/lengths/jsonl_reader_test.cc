#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
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
using ::testing::HasSubstr;

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

// The reference: nlohmann_json's reading of `line` into a document. Numbers
// beyond double's range (1e999) are invalid there, and so in the reader.
RowKind ReferenceKind(const std::string& line, int64_t* value) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(line);
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
  const RowKind reference = ReferenceKind(line, &expected);
  EXPECT_EQ(ReaderKind(line, &actual), reference) << line;
  if (reference == RowKind::kLength) {
    EXPECT_EQ(actual, expected) << line;
  }
}

// The reader, which follows nlohmann_json's SAX events, reads tricky rows and
// random mutations of them as nlohmann_json's document does. ASCII only and
// no surrogate escapes: there the reader is more lenient (see
// LetsNonUtf8BytesAndLoneSurrogatesThrough).
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
      R"({"x": 1e999, "length": 3})",
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

// Bytes that are not UTF-8 and unpaired surrogate escapes, which
// nlohmann_json rejects, are let through inside strings; as values of the
// field they show in the error, replaced.
TEST(JsonlLengthTest, LetsNonUtf8BytesAndLoneSurrogatesThrough) {
  auto lengths =
      ReadAll(WriteFile("lenient.jsonl",
                        "{\"t\": \"caf\xe9\", \"length\": 1}\n"
                        "{\"t\": \"\\ud83d\", \"length\": 2}\n"
                        "{\"t\": \"\\ude00x\", \"length\": 3}\n"
                        "{\"t\": \"\\ud83d\\ude00\", \"length\": 4}\n"
                        "{\"t\": \"\\uD83D\\uD83D\\uDE00\", "
                        "\"length\": 5}\n"
                        "{\"t\": \"\xed\xa0\x80\xc0\xaf\", "
                        "\"length\": 6}\n"
                        "{\"t\": \"caf\xc3\xa9\", \"length\": 7}\n"),
              LengthFormat::kJsonl);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_THAT(*lengths, ElementsAre(1, 2, 3, 4, 5, 6, 7));

  ExpectError(
      ReadAll(WriteFile("lenient_bad.jsonl", "{\"length\": \"caf\xe9\"}\n"),
              LengthFormat::kJsonl),
      {"lenient_bad.jsonl:1: field \"length\": expected an integer "
       "length, got the string \"caf?\""});
  // Outside strings such bytes are still errors.
  ExpectError(
      ReadAll(WriteFile("lenient_outside.jsonl", "{\"length\": 1}\xe9\n"),
              LengthFormat::kJsonl),
      {"lenient_outside.jsonl:1: invalid JSON"});
}

TEST(JsonlLengthTest, MatchesFieldNamesAfterDecoding) {
  LengthSourceOptions options =
      Source(WriteFile("utf8_field.jsonl",
                       "{\"l\xc3\xa4ngd\": 3}\n{\"l\\u00e4ngd\": 4}\n"
                       "{\"l\\u00e4ngd\": 5, \"length\": 9}\n"),
             LengthFormat::kJsonl);
  options.column = "l\xc3\xa4ngd";
  auto lengths = ReadAllLengths(options);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_THAT(*lengths, ElementsAre(3, 4, 5));
}

TEST(JsonlLengthTest, NestingIsBoundedAt512) {
  const std::string deep_ok =
      absl::StrCat("{\"length\": 1, \"d\": ", std::string(511, '['),
                   std::string(511, ']'), "}\n");
  auto lengths =
      ReadAll(WriteFile("deep_ok.jsonl", deep_ok), LengthFormat::kJsonl);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_THAT(*lengths, ElementsAre(1));

  const std::string too_deep =
      absl::StrCat("{\"length\": 1, \"d\": ", std::string(512, '['),
                   std::string(512, ']'), "}\n");
  ExpectError(
      ReadAll(WriteFile("too_deep.jsonl", too_deep), LengthFormat::kJsonl),
      {"too_deep.jsonl:1: invalid JSON", "512"});
}

TEST(JsonlLengthTest, ByteOrderMarkOnlyOnTheFirstLine) {
  auto lengths = ReadAll(WriteFile("bom.jsonl",
                                   "\xEF\xBB\xBF{\"length\": 1}\n"
                                   "{\"length\": 2}\n"),
                         LengthFormat::kJsonl);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_THAT(*lengths, ElementsAre(1, 2));
  ExpectError(ReadAll(WriteFile("bom_late.jsonl",
                                "{\"length\": 1}\n"
                                "\xEF\xBB\xBF{\"length\": 2}\n"),
                      LengthFormat::kJsonl),
              {"bom_late.jsonl:2: invalid JSON at column 1"});
}

TEST(JsonlLengthTest, LongBadTokensAreCutInTheMessage) {
  const std::string line =
      absl::StrCat("{\"length\": 1, \"s\": \"", std::string(100000, 'x'));
  absl::StatusOr<std::vector<int32_t>> lengths =
      ReadAll(WriteFile("long_token.jsonl", line + "\n"), LengthFormat::kJsonl);
  ExpectError(lengths, {"long_token.jsonl:1: invalid JSON"});
  EXPECT_LT(lengths.status().message().size(), 400u) << lengths.status();
}

}  // namespace
}  // namespace dcp
