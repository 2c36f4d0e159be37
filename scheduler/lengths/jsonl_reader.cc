// kJsonl: JSON Lines, the length a top-level integer field of each row's
// object. Rows are parsed by nlohmann-json's SAX parser, which builds no
// document: a JSON Lines file can hold 100M rows.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "scheduler/lengths/format_readers.h"
#include "scheduler/lengths/line_reader.h"
#include "scheduler/lengths/reader_support.h"

namespace dcp {
namespace lengths_internal {
namespace {

using Json = nlohmann::json;

// The length of the well-formed UTF-8 sequence (RFC 3629, as nlohmann-json
// checks it) at the start of `text`; 0 if there is none.
size_t Utf8SequenceLength(absl::string_view text) {
  const auto byte = [text](size_t i) -> unsigned {
    return i < text.size() ? static_cast<unsigned char>(text[i]) : 0;
  };
  const unsigned lead = byte(0);
  size_t length;
  unsigned low = 0x80, high = 0xBF;  // The range of the second byte.
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // No overlong forms.
    if (lead == 0xED) high = 0x9F;  // No UTF-16 surrogates.
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;   // No overlong forms.
    if (lead == 0xF4) high = 0x8F;  // Nothing above U+10FFFF.
  } else {
    return 0;
  }
  if (byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return length;
}

// The UTF-16 unit of the "\uXXXX" escape at `text[at]`, or -1 if there is
// none there.
int EscapedUnit(absl::string_view text, size_t at) {
  if (at + 6 > text.size() || text[at] != '\\' || text[at + 1] != 'u') {
    return -1;
  }
  int unit = 0;
  for (char c : text.substr(at + 2, 4)) {
    if (!absl::ascii_isxdigit(c)) return -1;
    unit =
        unit * 16 +
        (absl::ascii_isdigit(c) ? c - '0' : absl::ascii_tolower(c) - 'a' + 10);
  }
  return unit;
}

bool IsHighSurrogate(int unit) { return unit >= 0xD800 && unit < 0xDC00; }
bool IsLowSurrogate(int unit) { return unit >= 0xDC00 && unit < 0xE000; }

// JSON Lines files in the wild hold what the JSON grammar allows but
// nlohmann-json rejects: bytes that are not UTF-8 (this format never checked
// them) and unpaired surrogate escapes ("\ud83d" alone, as JavaScript and
// Python's json.dumps write broken strings). Returns `line` with each such
// byte replaced by '?' and each such escape by "\ufffd", byte for byte so
// that error columns stay right, copying into `scratch` only if needed. A
// byte-order mark after line 1, which nlohmann-json would skip at the start
// of its input, becomes '?' too: it is an error, as anywhere outside a
// string.
absl::string_view MakeParsable(absl::string_view line, std::string* scratch) {
  bool copied = false;
  const auto replace = [&](size_t at, absl::string_view with) {
    if (!copied) scratch->assign(line.data(), line.size());
    copied = true;
    scratch->replace(at, with.size(), with.data(), with.size());
  };
  if (absl::StartsWith(line, "\xEF\xBB\xBF")) replace(0, "?");
  size_t i = 0;
  while (i < line.size()) {
    const unsigned char c = line[i];
    if (c >= 0x80) {
      const size_t length = Utf8SequenceLength(line.substr(i));
      if (length == 0) replace(i, "?");
      i += length == 0 ? 1 : length;
    } else if (c != '\\') {
      ++i;
    } else if (const int unit = EscapedUnit(line, i); unit < 0) {
      i += 2;  // Another escape; nlohmann-json checks it.
    } else if (IsHighSurrogate(unit) &&
               IsLowSurrogate(EscapedUnit(line, i + 6))) {
      i += 12;  // A surrogate pair.
    } else {
      if (IsHighSurrogate(unit) || IsLowSurrogate(unit)) {
        replace(i + 2, "fffd");
      }
      i += 6;
    }
  }
  return copied ? absl::string_view(*scratch) : line;
}

// Follows nlohmann-json's SAX events for one row: what the top-level value
// is, and what the top-level field `field` holds (the last one, if the
// object has it more than once, as in most JSON libraries).
class FieldFinder final : public Json::json_sax_t {
 public:
  explicit FieldFinder(std::string field) : field_(std::move(field)) {}

  // Parses `line`; the error (no location) says why it is not a JSON object.
  // On success `found()` says whether the field was there and `problem()`
  // (empty if none) or `value()` what it held.
  absl::Status Find(absl::string_view line) {
    depth_ = 0;
    top_level_ = {};
    pending_ = found_ = false;
    value_ = 0;
    problem_.clear();
    error_.clear();
    if (!Json::sax_parse(line.begin(), line.end(), this,
                         Json::input_format_t::json, /*strict=*/true)) {
      return absl::InvalidArgumentError(error_);
    }
    if (top_level_ != "an object") {
      return absl::InvalidArgumentError(
          absl::StrCat("expected a JSON object, got ", top_level_));
    }
    return absl::OkStatus();
  }

  bool found() const { return found_; }
  int64_t value() const { return value_; }
  const std::string& problem() const { return problem_; }

  bool null() override {
    if (Saw("null")) NotAnInteger("null");
    return true;
  }
  bool boolean(bool value) override {
    if (Saw("a boolean")) NotAnInteger(value ? "true" : "false");
    return true;
  }
  bool number_unsigned(number_unsigned_t value) override {
    if (!Saw("a number")) return true;
    if (value == 0) {
      Found(NotPositive("length", "0"));
    } else if (value > static_cast<uint64_t>(kMaxLength)) {
      Found(TooLarge("length", absl::StrCat(value)));
    } else {
      Found("");
      value_ = static_cast<int64_t>(value);
    }
    return true;
  }
  // nlohmann-json reads only numbers with a minus sign ("-0" too) as signed.
  bool number_integer(number_integer_t value) override {
    if (Saw("a number")) {
      Found(NotPositive("length", value == 0 ? "-0" : absl::StrCat(value)));
    }
    return true;
  }
  // Fractions, exponents and integers beyond 64 bits; `raw` is the text.
  bool number_float(number_float_t, const string_t& raw) override {
    if (!Saw("a number")) return true;
    const std::string shown = ShownNumber(raw);
    if (raw.find_first_of(".eE") != std::string::npos) {
      NotAnInteger(shown);
    } else if (absl::StartsWith(raw, "-")) {
      Found(NotPositive("length", shown));
    } else {
      Found(TooLarge("length", shown));
    }
    return true;
  }
  bool string(string_t& value) override {
    if (Saw("a string")) {
      NotAnInteger(absl::StrCat("the string ", Quote(value)));
    }
    return true;
  }
  bool binary(binary_t&) override { return true; }  // Not in JSON text.
  bool start_object(std::size_t) override { return Enter("an object"); }
  bool key(string_t& key) override {
    pending_ = depth_ == 1 && key == field_;
    return true;
  }
  bool end_object() override { return Leave(); }
  bool start_array(std::size_t) override { return Enter("an array"); }
  bool end_array() override { return Leave(); }
  bool parse_error(std::size_t position, const std::string& last_token,
                   const Json::exception& error) override {
    std::string problem(WithoutPrefix(error.what()));
    // The message quotes the token read last, which can be a whole line.
    constexpr size_t kMaxToken = 40;
    const size_t at = last_token.size() > kMaxToken ? problem.find(last_token)
                                                    : std::string::npos;
    if (at != std::string::npos) {
      problem.replace(at + kMaxToken, last_token.size() - kMaxToken, "...");
    }
    error_ = absl::StrCat("invalid JSON at column ", position, ": ", problem);
    return false;
  }

 private:
  // The deepest nesting a row may have (see kJsonl in length_reader.h).
  static constexpr int kMaxDepth = 512;

  // "[json.exception.parse_error.101] parse error at line 1, column 5:
  // syntax error ..." -> "syntax error ...": the reader names the location.
  static absl::string_view WithoutPrefix(absl::string_view message) {
    const size_t tag_end = message.find("] ");
    if (tag_end != absl::string_view::npos) message.remove_prefix(tag_end + 2);
    if (absl::StartsWith(message, "parse error")) {
      const size_t colon = message.find(": ");
      if (colon != absl::string_view::npos) message.remove_prefix(colon + 2);
    }
    return message;
  }

  // Notes a value of `kind` ("a number"); returns whether it is the field's.
  bool Saw(absl::string_view kind) {
    if (depth_ == 0) top_level_ = kind;
    const bool target = pending_;
    pending_ = false;
    return target;
  }

  bool Enter(absl::string_view kind) {
    if (Saw(kind)) NotAnInteger(kind);
    if (++depth_ > kMaxDepth) {
      error_ = absl::StrCat("invalid JSON: nested more than ", kMaxDepth,
                            " levels deep");
      return false;
    }
    return true;
  }

  bool Leave() {
    --depth_;
    return true;
  }

  // The field was present; `problem` is empty if its value is a length.
  void Found(std::string problem) {
    found_ = true;
    problem_ = std::move(problem);
  }
  void NotAnInteger(absl::string_view description) {
    Found(absl::StrCat("expected an integer length, got ", description));
  }

  const std::string field_;
  int depth_ = 0;
  absl::string_view top_level_;  // What the row is: "an object", ...
  bool pending_ = false;         // The next value is the field's.
  bool found_ = false;
  int64_t value_ = 0;
  std::string problem_;
  std::string error_;
};

class JsonlLengthReader final : public RowLengthReader {
 public:
  JsonlLengthReader(std::unique_ptr<LineReader> lines, std::string field)
      : lines_(std::move(lines)), field_(field), finder_(std::move(field)) {}

 private:
  absl::StatusOr<bool> Next(int64_t* length) override {
    absl::string_view line;
    ASSIGN_OR_RETURN(const bool more, lines_->NextNonBlank(&line));
    if (!more) return false;
    const absl::Status parsed = finder_.Find(MakeParsable(line, &scratch_));
    if (!parsed.ok()) return lines_->Error(parsed.message());
    if (!finder_.found()) {
      return lines_->Error(absl::StrCat("field ", Quote(field_), " not found"));
    }
    if (!finder_.problem().empty()) {
      return lines_->Error(
          absl::StrCat("field ", Quote(field_), ": ", finder_.problem()));
    }
    *length = finder_.value();
    return true;
  }

  std::unique_ptr<LineReader> lines_;
  const std::string field_;
  FieldFinder finder_;
  std::string scratch_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LengthReader>> OpenJsonlReader(
    const LengthSourceOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<LineReader> lines,
                   LineReader::Open(options.path, options.buffer_bytes));
  return std::make_unique<JsonlLengthReader>(std::move(lines), options.column);
}

}  // namespace lengths_internal
}  // namespace dcp
