#include "scheduler/lengths/length_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

// The binary readers load little-endian values with plain memcpy.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "length_reader.cc assumes a little-endian host"
#endif

namespace dcp {
namespace {

constexpr int64_t kMaxLength = std::numeric_limits<int32_t>::max();
// Bounds the memory one line (CSV: one record) may take.
constexpr size_t kMaxLineBytes = size_t{256} << 20;

// Quotes `text` for an error message: control bytes escaped, long text cut so
// that a garbage line cannot flood the log.
std::string Quote(absl::string_view text) {
  constexpr size_t kMaxShown = 40;
  if (text.size() > kMaxShown) {
    return absl::StrCat("\"", absl::CHexEscape(text.substr(0, kMaxShown)),
                        "\"...");
  }
  return absl::StrCat("\"", absl::CHexEscape(text), "\"");
}

absl::Status AtLine(absl::string_view path, int64_t line,
                    absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ":", line, ": ", problem));
}

absl::Status AtOffset(absl::string_view path, uint64_t offset,
                      absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": byte offset ", offset, ": ", problem));
}

absl::Status ErrnoError(int error_number, absl::string_view action,
                        absl::string_view path) {
  return absl::ErrnoToStatus(error_number,
                             absl::StrCat("cannot ", action, " ", path));
}

std::string TooLarge(absl::string_view what, uint64_t value) {
  return absl::StrCat(what, " ", value, " is larger than the int32 maximum ",
                      kMaxLength);
}

// Parses a positive decimal int32 such as "347". `what` names the value in
// the problem it returns otherwise ("length", "value").
absl::StatusOr<int64_t> ParsePositiveInt(absl::string_view text,
                                         absl::string_view what) {
  const bool negative = !text.empty() && text[0] == '-';
  const absl::string_view digits = negative ? text.substr(1) : text;
  bool overflow = false;
  int64_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') {
      return absl::InvalidArgumentError(absl::StrCat(
          "expected a non-negative integer ", what, ", got ", Quote(text)));
    }
    value = value * 10 + (c - '0');
    if (value > kMaxLength) {
      overflow = true;
      value = kMaxLength + 1;  // Saturate; the digits are still checked.
    }
  }
  if (digits.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected a non-negative integer ", what, ", got ", Quote(text)));
  }
  // All digits here; only a pathologically long number needs cutting.
  const std::string shown = text.size() <= 24 ? std::string(text) : Quote(text);
  if (negative || value == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be positive, got ", shown));
  }
  if (overflow) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " ", shown, " is larger than the int32 maximum ", kMaxLength));
  }
  return value;
}

bool IsBlank(absl::string_view line) {
  return std::all_of(line.begin(), line.end(),
                     [](char c) { return c == ' ' || c == '\t'; });
}

// Allows blank lines only at the end of a file: remembers where a run of
// blank lines began and reports it once a non-blank line follows.
class BlankLineTracker {
 public:
  // Returns true if `line` is blank (the caller skips it).
  bool Skip(absl::string_view line, int64_t line_number) {
    if (!IsBlank(line)) return false;
    if (first_blank_ == 0) first_blank_ = line_number;
    return true;
  }

  // Call before using a non-blank line.
  absl::Status CheckNoneBefore(absl::string_view path) const {
    if (first_blank_ == 0) return absl::OkStatus();
    return AtLine(path, first_blank_,
                  "blank line (blank lines are allowed only at the end of the "
                  "file)");
  }

 private:
  int64_t first_blank_ = 0;
};

// Reads a file line by line through a fixed-size buffer that grows only while
// one line is longer than it.
class LineReader {
 public:
  static absl::StatusOr<std::unique_ptr<LineReader>> Open(
      const std::string& path, size_t buffer_bytes) {
    int fd;
    do {
      fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return ErrnoError(errno, "open", path);
    return absl::WrapUnique(new LineReader(path, fd, buffer_bytes));
  }

  ~LineReader() { close(fd_); }

  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Sets `*line` to the next line without its "\n" or "\r\n" (and, on line 1,
  // a UTF-8 byte-order mark); it stays valid until the next call. Returns
  // false at the end of the file.
  absl::StatusOr<bool> Next(absl::string_view* line) {
    for (;;) {
      char* const buf = buffer_.get();
      const void* newline = memchr(buf + scanned_, '\n', end_ - scanned_);
      if (newline != nullptr) {
        const size_t pos = static_cast<const char*>(newline) - buf;
        *line = absl::string_view(buf + begin_, pos - begin_);
        begin_ = scanned_ = pos + 1;
        Finish(line);
        return true;
      }
      scanned_ = end_;
      if (eof_) {
        if (begin_ == end_) return false;
        *line = absl::string_view(buf + begin_, end_ - begin_);
        begin_ = scanned_ = end_;
        Finish(line);
        return true;
      }
      RETURN_IF_ERROR(Fill());
    }
  }

  // The 1-based number of the line `Next` returned last.
  int64_t line_number() const { return line_number_; }
  const std::string& path() const { return path_; }

 private:
  LineReader(std::string path, int fd, size_t buffer_bytes)
      : path_(std::move(path)),
        fd_(fd),
        read_bytes_(buffer_bytes),
        capacity_(buffer_bytes),
        buffer_(new char[buffer_bytes]) {}

  void Finish(absl::string_view* line) {
    ++line_number_;
    if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
    if (line_number_ == 1 && absl::StartsWith(*line, "\xEF\xBB\xBF")) {
      line->remove_prefix(3);
    }
  }

  // Moves the partial line to the front and reads more after it, growing the
  // buffer when the partial line fills it.
  absl::Status Fill() {
    if (begin_ > 0) {
      memmove(buffer_.get(), buffer_.get() + begin_, end_ - begin_);
      end_ -= begin_;
      scanned_ -= begin_;
      begin_ = 0;
    }
    if (end_ == capacity_) {
      if (capacity_ >= kMaxLineBytes) {
        return AtLine(
            path_, line_number_ + 1,
            absl::StrCat("line longer than ", kMaxLineBytes >> 20, " MiB"));
      }
      const size_t capacity = std::min(capacity_ * 2, kMaxLineBytes);
      std::unique_ptr<char[]> bigger(new char[capacity]);
      memcpy(bigger.get(), buffer_.get(), end_);
      buffer_ = std::move(bigger);
      capacity_ = capacity;
    }
    const size_t want = std::min(capacity_ - end_, read_bytes_);
    ssize_t n;
    do {
      n = read(fd_, buffer_.get() + end_, want);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return ErrnoError(errno, "read", path_);
    if (n == 0) {
      eof_ = true;
    } else {
      end_ += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  const std::string path_;
  const int fd_;
  const size_t read_bytes_;
  size_t capacity_;
  std::unique_ptr<char[]> buffer_;
  // buffer_[begin_, end_) holds unconsumed bytes; [begin_, scanned_) has no
  // newline.
  size_t begin_ = 0;
  size_t scanned_ = 0;
  size_t end_ = 0;
  bool eof_ = false;
  int64_t line_number_ = 0;
};

// ---------------------------------------------------------------- text ----

class TextLengthReader final : public LengthReader {
 public:
  explicit TextLengthReader(std::unique_ptr<LineReader> lines)
      : lines_(std::move(lines)) {}

  absl::StatusOr<size_t> NextBatch(size_t max,
                                   std::vector<int64_t>* out) override {
    out->clear();
    absl::string_view line;
    while (out->size() < max) {
      ASSIGN_OR_RETURN(const bool more, lines_->Next(&line));
      if (!more) break;
      if (blank_.Skip(line, lines_->line_number())) continue;
      RETURN_IF_ERROR(blank_.CheckNoneBefore(lines_->path()));
      absl::StatusOr<int64_t> length = ParsePositiveInt(line, "length");
      if (!length.ok()) {
        return AtLine(lines_->path(), lines_->line_number(),
                      length.status().message());
      }
      out->push_back(*length);
    }
    return out->size();
  }

  int64_t SizeHint() const override { return -1; }

 private:
  std::unique_ptr<LineReader> lines_;
  BlankLineTracker blank_;
};

// ----------------------------------------------------------------- csv ----

// One field of a CSV record. A quoted field's `text` is what lies between
// its quotes, with any doubled quotes still doubled (`escaped`).
struct CsvField {
  absl::string_view text;
  bool escaped = false;
};

enum class CsvSplit { kOk, kOpenQuote, kJunkAfterQuote };

// Splits `record` at `delimiter` following RFC 4180. kOpenQuote: the record
// ends inside a quoted field (it continues on the next line).
// kJunkAfterQuote: `*junk_at` is the index of a character between a closing
// quote and the next delimiter.
CsvSplit SplitCsvRecord(absl::string_view record, char delimiter,
                        std::vector<CsvField>* fields, size_t* junk_at) {
  fields->clear();
  const char* const data = record.data();
  const size_t n = record.size();
  size_t i = 0;
  for (;;) {
    if (i < n && data[i] == '"') {
      CsvField field;
      size_t j = i + 1;
      size_t close;
      for (;;) {
        const void* quote = j < n ? memchr(data + j, '"', n - j) : nullptr;
        if (quote == nullptr) return CsvSplit::kOpenQuote;
        close = static_cast<const char*>(quote) - data;
        if (close + 1 < n && data[close + 1] == '"') {
          field.escaped = true;
          j = close + 2;
          continue;
        }
        break;
      }
      field.text = record.substr(i + 1, close - i - 1);
      fields->push_back(field);
      i = close + 1;
      if (i == n) return CsvSplit::kOk;
      if (data[i] != delimiter) {
        *junk_at = i;
        return CsvSplit::kJunkAfterQuote;
      }
      ++i;
    } else {
      const void* next = i < n ? memchr(data + i, delimiter, n - i) : nullptr;
      if (next == nullptr) {
        fields->push_back({record.substr(i), false});
        return CsvSplit::kOk;
      }
      const size_t end = static_cast<const char*>(next) - data;
      fields->push_back({record.substr(i, end - i), false});
      i = end + 1;
    }
  }
}

// The value of `field`, undoubling quotes into `scratch` when needed.
absl::string_view FieldValue(const CsvField& field, std::string* scratch) {
  if (!field.escaped) return field.text;
  scratch->clear();
  for (size_t i = 0; i < field.text.size(); ++i) {
    scratch->push_back(field.text[i]);
    if (field.text[i] == '"') ++i;  // Skip the second of a doubled quote.
  }
  return *scratch;
}

// Reads CSV/TSV records, joining lines when a quoted field spans them.
class CsvRecordReader {
 public:
  CsvRecordReader(std::unique_ptr<LineReader> lines, char delimiter)
      : lines_(std::move(lines)), delimiter_(delimiter) {}

  // Reads the next record into `fields()`; false at the end of the file. The
  // fields stay valid until the next call.
  absl::StatusOr<bool> Next() {
    absl::string_view line;
    for (;;) {
      ASSIGN_OR_RETURN(const bool more, lines_->Next(&line));
      if (!more) return false;
      if (!blank_.Skip(line, lines_->line_number())) break;
    }
    RETURN_IF_ERROR(blank_.CheckNoneBefore(path()));
    record_line_ = lines_->line_number();
    absl::string_view record = line;
    bool joined = false;
    for (;;) {
      size_t junk_at = 0;
      switch (SplitCsvRecord(record, delimiter_, &fields_, &junk_at)) {
        case CsvSplit::kOk:
          return true;
        case CsvSplit::kJunkAfterQuote:
          return Error(absl::StrCat(
              "unexpected ", Quote(record.substr(junk_at, 1)),
              " after the closing quote of field ", fields_.size()));
        case CsvSplit::kOpenQuote:
          break;
      }
      // A quoted field goes on past the end of the line.
      if (!joined) {
        record_.assign(record.data(), record.size());
        joined = true;
      }
      ASSIGN_OR_RETURN(const bool more, lines_->Next(&line));
      if (!more) {
        return Error("unterminated quoted field: the file ends inside quotes");
      }
      if (record_.size() + 1 + line.size() > kMaxLineBytes) {
        return Error(
            absl::StrCat("record longer than ", kMaxLineBytes >> 20, " MiB"));
      }
      record_.push_back('\n');
      record_.append(line.data(), line.size());
      record = record_;
    }
  }

  const std::vector<CsvField>& fields() const { return fields_; }

  // An INVALID_ARGUMENT naming the file and the record's first line.
  absl::Status Error(absl::string_view problem) const {
    return AtLine(path(), record_line_, problem);
  }

  const std::string& path() const { return lines_->path(); }

 private:
  std::unique_ptr<LineReader> lines_;
  const char delimiter_;
  BlankLineTracker blank_;
  std::vector<CsvField> fields_;
  std::string record_;
  int64_t record_line_ = 0;
};

// Reads CSV/TSV lengths from one column, or, given video options, tokens
// computed from three columns (frames, height, width).
class CsvLengthReader final : public LengthReader {
 public:
  static absl::StatusOr<std::unique_ptr<LengthReader>> Open(
      const LengthSourceOptions& options, char delimiter,
      std::vector<std::string> columns,
      std::optional<VideoTokenizerOptions> video) {
    ASSIGN_OR_RETURN(std::unique_ptr<LineReader> lines,
                     LineReader::Open(options.path, options.buffer_bytes));
    auto records =
        std::make_unique<CsvRecordReader>(std::move(lines), delimiter);
    ASSIGN_OR_RETURN(const bool has_header, records->Next());
    if (!has_header) {
      return absl::InvalidArgumentError(absl::StrCat(
          options.path, ": the file is empty, expected a header row"));
    }
    std::vector<std::string> header;
    std::string scratch;
    for (const CsvField& field : records->fields()) {
      header.emplace_back(FieldValue(field, &scratch));
    }
    std::vector<size_t> indices;
    for (const std::string& column : columns) {
      const auto it = std::find(header.begin(), header.end(), column);
      if (it == header.end()) {
        return records->Error(absl::StrCat("column ", Quote(column),
                                           " not found in the header; it has ",
                                           DescribeColumns(header)));
      }
      if (std::find(it + 1, header.end(), column) != header.end()) {
        return records->Error(absl::StrCat("column ", Quote(column),
                                           " appears more than once in the "
                                           "header"));
      }
      indices.push_back(it - header.begin());
    }
    return absl::WrapUnique(new CsvLengthReader(
        std::move(records), std::move(columns), std::move(indices), video));
  }

  absl::StatusOr<size_t> NextBatch(size_t max,
                                   std::vector<int64_t>* out) override {
    out->clear();
    int64_t values[3];
    while (out->size() < max) {
      ASSIGN_OR_RETURN(const bool more, records_->Next());
      if (!more) break;
      const std::vector<CsvField>& fields = records_->fields();
      for (size_t c = 0; c < columns_.size(); ++c) {
        const size_t index = indices_[c];
        if (index >= fields.size()) {
          return records_->Error(absl::StrCat(
              "the row has ", fields.size(), " field",
              fields.size() == 1 ? "" : "s", ", too few to reach column ",
              Quote(columns_[c]), " (field ", index + 1, ")"));
        }
        const absl::string_view text =
            absl::StripAsciiWhitespace(FieldValue(fields[index], &scratch_));
        absl::StatusOr<int64_t> value =
            ParsePositiveInt(text, video_.has_value() ? "value" : "length");
        if (!value.ok()) {
          return records_->Error(absl::StrCat("column ", Quote(columns_[c]),
                                              ": ", value.status().message()));
        }
        values[c] = *value;
      }
      if (!video_.has_value()) {
        out->push_back(values[0]);
        continue;
      }
      absl::StatusOr<int64_t> tokens =
          VideoTokenCount(values[0], values[1], values[2], *video_);
      if (!tokens.ok()) return records_->Error(tokens.status().message());
      if (*tokens > kMaxLength) {
        return records_->Error(absl::StrCat(TooLarge("token count", *tokens),
                                            " (", values[0], " frames of ",
                                            values[1], "x", values[2], ")"));
      }
      out->push_back(*tokens);
    }
    return out->size();
  }

  int64_t SizeHint() const override { return -1; }

 private:
  CsvLengthReader(std::unique_ptr<CsvRecordReader> records,
                  std::vector<std::string> columns, std::vector<size_t> indices,
                  std::optional<VideoTokenizerOptions> video)
      : records_(std::move(records)),
        columns_(std::move(columns)),
        indices_(std::move(indices)),
        video_(video) {}

  static std::string DescribeColumns(const std::vector<std::string>& header) {
    constexpr size_t kMaxListed = 20;
    std::vector<std::string> quoted;
    for (size_t i = 0; i < header.size() && i < kMaxListed; ++i) {
      quoted.push_back(Quote(header[i]));
    }
    std::string list =
        absl::StrCat(header.size(), " column", header.size() == 1 ? "" : "s",
                     ": ", absl::StrJoin(quoted, ", "));
    if (header.size() > kMaxListed) absl::StrAppend(&list, ", ...");
    return list;
  }

  std::unique_ptr<CsvRecordReader> records_;
  const std::vector<std::string> columns_;
  const std::vector<size_t> indices_;
  const std::optional<VideoTokenizerOptions> video_;
  std::string scratch_;
};

// --------------------------------------------------------------- jsonl ----

void AppendUtf8(uint32_t code_point, std::string* out) {
  if (code_point < 0x80) {
    out->push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

uint32_t Hex4(absl::string_view text) {
  uint32_t value = 0;
  for (char c : text.substr(0, 4)) {
    value =
        value * 16 +
        (absl::ascii_isdigit(c) ? c - '0' : absl::ascii_tolower(c) - 'a' + 10);
  }
  return value;
}

// Decodes the body of a JSON string that `JsonFieldScanner` has validated.
std::string DecodeJsonString(absl::string_view raw) {
  std::string out;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\') {
      out.push_back(raw[i]);
      continue;
    }
    const char escape = raw[++i];
    switch (escape) {
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'u': {
        uint32_t code_point = Hex4(raw.substr(i + 1));
        i += 4;
        if (code_point >= 0xD800 && code_point < 0xDC00 && i + 6 < raw.size() &&
            raw[i + 1] == '\\' && raw[i + 2] == 'u') {
          const uint32_t low = Hex4(raw.substr(i + 3));
          if (low >= 0xDC00 && low < 0xE000) {
            code_point =
                0x10000 + ((code_point - 0xD800) << 10) + (low - 0xDC00);
            i += 6;
          }
        }
        AppendUtf8(code_point, &out);
        break;
      }
      default:  // '"', '\\' and '/' stand for themselves.
        out.push_back(escape);
        break;
    }
  }
  return out;
}

// Validates one line as a JSON object (RFC 8259 grammar; bytes above 0x7F in
// strings are passed through unchecked) and picks out one top-level integer
// field, without building a document: JSON Lines files can hold 100M rows.
class JsonFieldScanner {
 public:
  explicit JsonFieldScanner(std::string field) : field_(std::move(field)) {}

  // Scans `line`. On success, `found()` says whether the field was there and
  // `value()` / `problem()` what it held. The error (no location) says why
  // the line is not a JSON object.
  absl::Status Scan(absl::string_view line) {
    text_ = line;
    pos_ = 0;
    found_ = false;
    value_ = 0;
    problem_.clear();
    error_.clear();
    SkipSpace();
    const char first = Peek();
    // Any value parses here; only an object is accepted below.
    if (!Value(0, /*target=*/false)) return absl::InvalidArgumentError(error_);
    SkipSpace();
    if (pos_ != text_.size()) {
      Fail("unexpected characters after the value");
      return absl::InvalidArgumentError(error_);
    }
    if (first != '{') {
      return absl::InvalidArgumentError(
          absl::StrCat("expected a JSON object, got ", DescribeValue(first)));
    }
    return absl::OkStatus();
  }

  bool found() const { return found_; }
  int64_t value() const { return value_; }
  const std::string& problem() const { return problem_; }

 private:
  static constexpr int kMaxDepth = 512;

  // What a valid JSON value starting with `first` is.
  static absl::string_view DescribeValue(char first) {
    switch (first) {
      case '{':
        return "an object";
      case '[':
        return "an array";
      case '"':
        return "a string";
      case 't':
      case 'f':
        return "a boolean";
      case 'n':
        return "null";
      default:
        return "a number";
    }
  }

  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  void SkipSpace() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\t' && c != '\r' && c != '\n') break;
      ++pos_;
    }
  }

  // Records a syntax error at the current column; returns false.
  bool Fail(absl::string_view what) {
    error_ = absl::StrCat("invalid JSON at column ", pos_ + 1, ": ", what);
    return false;
  }

  // `pos_` is at '{'.
  bool Object(int depth) {
    if (depth > kMaxDepth) return Fail("nested too deeply");
    ++pos_;
    SkipSpace();
    if (Peek() == '}') {
      ++pos_;
      return true;
    }
    for (;;) {
      SkipSpace();
      if (Peek() != '"') return Fail("expected a quoted object key");
      absl::string_view key;
      bool escaped;
      if (!String(&key, &escaped)) return false;
      const bool target =
          depth == 1 &&
          (escaped ? DecodeJsonString(key) == field_ : key == field_);
      SkipSpace();
      if (Peek() != ':') return Fail("expected ':' after an object key");
      ++pos_;
      if (!Value(depth, target)) return false;
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == '}') {
        ++pos_;
        return true;
      }
      return Fail("expected ',' or '}' in an object");
    }
  }

  // `pos_` is at '['.
  bool Array(int depth) {
    if (depth > kMaxDepth) return Fail("nested too deeply");
    ++pos_;
    SkipSpace();
    if (Peek() == ']') {
      ++pos_;
      return true;
    }
    for (;;) {
      if (!Value(depth, false)) return false;
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() == ']') {
        ++pos_;
        return true;
      }
      return Fail("expected ',' or ']' in an array");
    }
  }

  // A value inside a container `depth` deep; `target`: it is the field's.
  bool Value(int depth, bool target) {
    SkipSpace();
    switch (Peek()) {
      case '{':
        if (target) NotAnInteger("an object");
        return Object(depth + 1);
      case '[':
        if (target) NotAnInteger("an array");
        return Array(depth + 1);
      case '"': {
        absl::string_view raw;
        bool escaped;
        if (!String(&raw, &escaped)) return false;
        if (target) {
          NotAnInteger(absl::StrCat(
              "the string ", Quote(escaped ? DecodeJsonString(raw) : raw)));
        }
        return true;
      }
      case 't':
        return Literal("true", target);
      case 'f':
        return Literal("false", target);
      case 'n':
        return Literal("null", target);
      default:
        if (Peek() == '-' || absl::ascii_isdigit(Peek())) {
          return Number(target);
        }
        return Fail("expected a value");
    }
  }

  // `pos_` is at '"'. Sets `*raw` to the body, escapes undecoded.
  bool String(absl::string_view* raw, bool* escaped) {
    *escaped = false;
    size_t i = pos_ + 1;
    for (;;) {
      if (i >= text_.size()) return Fail("unterminated string");
      const unsigned char c = text_[i];
      if (c == '"') break;
      if (c < 0x20) {
        pos_ = i;
        return Fail("control character in a string");
      }
      if (c != '\\') {
        ++i;
        continue;
      }
      *escaped = true;
      const char escape = i + 1 < text_.size() ? text_[i + 1] : '\0';
      if (escape == 'u') {
        for (size_t k = i + 2; k < i + 6; ++k) {
          if (k >= text_.size() || !absl::ascii_isxdigit(text_[k])) {
            pos_ = i;
            return Fail("\\u needs four hex digits");
          }
        }
        i += 6;
      } else if (escape != '\0' && strchr("\"\\/bfnrt", escape) != nullptr) {
        i += 2;
      } else {
        pos_ = i;
        return Fail("invalid escape in a string");
      }
    }
    *raw = text_.substr(pos_ + 1, i - pos_ - 1);
    pos_ = i + 1;
    return true;
  }

  bool Number(bool target) {
    const size_t start = pos_;
    const bool negative = Peek() == '-';
    if (negative) ++pos_;
    if (Peek() == '0') {
      ++pos_;
    } else if (absl::ascii_isdigit(Peek())) {
      while (absl::ascii_isdigit(Peek())) ++pos_;
    } else {
      return Fail("invalid number");
    }
    const size_t integer_end = pos_;
    if (Peek() == '.') {
      ++pos_;
      if (!absl::ascii_isdigit(Peek())) return Fail("invalid number");
      while (absl::ascii_isdigit(Peek())) ++pos_;
    }
    if (Peek() == 'e' || Peek() == 'E') {
      ++pos_;
      if (Peek() == '+' || Peek() == '-') ++pos_;
      if (!absl::ascii_isdigit(Peek())) return Fail("invalid number");
      while (absl::ascii_isdigit(Peek())) ++pos_;
    }
    if (!target) return true;
    const absl::string_view text = text_.substr(start, pos_ - start);
    const std::string number =
        text.size() <= 24 ? std::string(text) : Quote(text);
    if (pos_ != integer_end) {
      NotAnInteger(number);
    } else if (negative) {
      Found(absl::StrCat("length must be positive, got ", number));
    } else {
      int64_t value = 0;
      for (char c : text) {
        value = std::min(value * 10 + (c - '0'), kMaxLength + 1);
      }
      if (value == 0) {
        Found("length must be positive, got 0");
      } else if (value > kMaxLength) {
        Found(absl::StrCat("length ", number,
                           " is larger than the int32 maximum ", kMaxLength));
      } else {
        Found("");
        value_ = value;
      }
    }
    return true;
  }

  bool Literal(absl::string_view word, bool target) {
    if (text_.substr(pos_, word.size()) != word) {
      return Fail("invalid literal");
    }
    pos_ += word.size();
    if (target) NotAnInteger(word);
    return true;
  }

  // The field was present; `problem` is empty if its value is a length.
  // Of duplicate fields the last wins, as in most JSON libraries.
  void Found(std::string problem) {
    found_ = true;
    problem_ = std::move(problem);
  }
  void NotAnInteger(absl::string_view description) {
    Found(absl::StrCat("expected an integer length, got ", description));
  }

  const std::string field_;
  absl::string_view text_;
  size_t pos_ = 0;
  bool found_ = false;
  int64_t value_ = 0;
  std::string problem_;
  std::string error_;
};

class JsonlLengthReader final : public LengthReader {
 public:
  JsonlLengthReader(std::unique_ptr<LineReader> lines, std::string field)
      : lines_(std::move(lines)), field_(field), scanner_(std::move(field)) {}

  absl::StatusOr<size_t> NextBatch(size_t max,
                                   std::vector<int64_t>* out) override {
    out->clear();
    absl::string_view line;
    while (out->size() < max) {
      ASSIGN_OR_RETURN(const bool more, lines_->Next(&line));
      if (!more) break;
      if (blank_.Skip(line, lines_->line_number())) continue;
      RETURN_IF_ERROR(blank_.CheckNoneBefore(lines_->path()));
      const absl::Status scanned = scanner_.Scan(line);
      if (!scanned.ok()) return Error(scanned.message());
      if (!scanner_.found()) {
        return Error(absl::StrCat("field ", Quote(field_), " not found"));
      }
      if (!scanner_.problem().empty()) {
        return Error(
            absl::StrCat("field ", Quote(field_), ": ", scanner_.problem()));
      }
      out->push_back(scanner_.value());
    }
    return out->size();
  }

  int64_t SizeHint() const override { return -1; }

 private:
  absl::Status Error(absl::string_view problem) const {
    return AtLine(lines_->path(), lines_->line_number(), problem);
  }

  std::unique_ptr<LineReader> lines_;
  const std::string field_;
  JsonFieldScanner scanner_;
  BlankLineTracker blank_;
};

// -------------------------------------------------------------- binary ----

// A whole file mapped read-only.
class MappedFile {
 public:
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(
      const std::string& path) {
    int fd;
    do {
      fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return ErrnoError(errno, "open", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
      const int error_number = errno;
      close(fd);
      return ErrnoError(error_number, "stat", path);
    }
    if (!S_ISREG(st.st_mode)) {
      close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": not a regular file"));
    }
    const size_t size = static_cast<size_t>(st.st_size);
    void* data = nullptr;
    if (size > 0) {
      data = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (data == MAP_FAILED) {
        const int error_number = errno;
        close(fd);
        return ErrnoError(error_number, "mmap", path);
      }
      // Pages behind the reader can be dropped early.
      madvise(data, size, MADV_SEQUENTIAL);
    }
    close(fd);  // The mapping keeps the file open.
    return absl::WrapUnique(new MappedFile(data, size));
  }

  ~MappedFile() {
    if (data_ != nullptr) munmap(data_, size_);
  }

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return static_cast<const uint8_t*>(data_); }
  size_t size() const { return size_; }

 private:
  MappedFile(void* data, size_t size) : data_(data), size_(size) {}

  void* const data_;
  const size_t size_;
};

template <typename T>
T LoadLittleEndian(const uint8_t* p) {
  T value;
  memcpy(&value, p, sizeof(T));
  return value;
}

enum class ElementType { kInt32, kInt64, kUint32, kUint16 };

size_t ElementSize(ElementType type) {
  switch (type) {
    case ElementType::kInt32:
    case ElementType::kUint32:
      return 4;
    case ElementType::kInt64:
      return 8;
    case ElementType::kUint16:
      return 2;
  }
  return 0;
}

// Streams a little-endian integer array out of a mapped file.
class MappedArrayReader final : public LengthReader {
 public:
  MappedArrayReader(std::string path, std::unique_ptr<MappedFile> file,
                    size_t offset, uint64_t count, ElementType type)
      : path_(std::move(path)),
        file_(std::move(file)),
        offset_(offset),
        count_(count),
        type_(type) {}

  absl::StatusOr<size_t> NextBatch(size_t max,
                                   std::vector<int64_t>* out) override {
    const size_t n =
        static_cast<size_t>(std::min<uint64_t>(max, count_ - next_));
    out->resize(n);
    switch (type_) {
      case ElementType::kInt32:
        RETURN_IF_ERROR(Decode<int32_t>(n, out->data()));
        break;
      case ElementType::kInt64:
        RETURN_IF_ERROR(Decode<int64_t>(n, out->data()));
        break;
      case ElementType::kUint32:
        RETURN_IF_ERROR(Decode<uint32_t>(n, out->data()));
        break;
      case ElementType::kUint16:
        RETURN_IF_ERROR(Decode<uint16_t>(n, out->data()));
        break;
    }
    next_ += n;
    return n;
  }

  int64_t SizeHint() const override { return static_cast<int64_t>(count_); }

 private:
  template <typename T>
  absl::Status Decode(size_t n, int64_t* out) {
    const uint8_t* p = file_->data() + offset_ + next_ * sizeof(T);
    for (size_t i = 0; i < n; ++i, p += sizeof(T)) {
      const T value = LoadLittleEndian<T>(p);
      bool ok;
      if constexpr (std::is_signed<T>::value) {
        ok = value > 0 && static_cast<int64_t>(value) <= kMaxLength;
      } else {
        ok = value > 0 &&
             static_cast<uint64_t>(value) <= static_cast<uint64_t>(kMaxLength);
      }
      if (!ok) {
        const std::string problem =
            value <= 0 ? absl::StrCat("length must be positive, got ", value)
                       : TooLarge("length", static_cast<uint64_t>(value));
        return AtOffset(path_, p - file_->data(),
                        absl::StrCat("element ", next_ + i, ": ", problem));
      }
      out[i] = static_cast<int64_t>(value);
    }
    return absl::OkStatus();
  }

  const std::string path_;
  const std::unique_ptr<MappedFile> file_;
  const size_t offset_;
  const uint64_t count_;
  const ElementType type_;
  uint64_t next_ = 0;
};

// ----------------------------------------------------------------- npy ----

struct NpyHeader {
  std::string descr;
  size_t descr_pos = 0;  // Offset of the descr value in the header text.
  bool fortran_order = false;
  std::vector<uint64_t> shape;
};

// Parses the Python dict literal of an .npy header, e.g.
// "{'descr': '<i4', 'fortran_order': False, 'shape': (10,), }".
class NpyHeaderParser {
 public:
  NpyHeaderParser(absl::string_view path, size_t offset, absl::string_view text)
      : path_(path), offset_(offset), text_(text) {}

  absl::StatusOr<NpyHeader> Parse() {
    NpyHeader header;
    bool have_descr = false, have_fortran = false, have_shape = false;
    SkipSpace();
    if (!Consume('{')) return Error("expected '{'");
    for (;;) {
      SkipSpace();
      if (Consume('}')) break;
      ASSIGN_OR_RETURN(const std::string key, ParseString("a quoted key"));
      SkipSpace();
      if (!Consume(':')) return Error("expected ':'");
      SkipSpace();
      if (key == "descr") {
        if (Peek() == '[') {
          return Error("structured dtypes are not supported");
        }
        header.descr_pos = pos_;
        ASSIGN_OR_RETURN(header.descr, ParseString("a quoted dtype"));
        have_descr = true;
      } else if (key == "fortran_order") {
        ASSIGN_OR_RETURN(header.fortran_order, ParseBool());
        have_fortran = true;
      } else if (key == "shape") {
        ASSIGN_OR_RETURN(header.shape, ParseShape());
        have_shape = true;
      } else {
        return Error(absl::StrCat("unexpected key ", Quote(key)));
      }
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume('}')) break;
      return Error("expected ',' or '}'");
    }
    if (!have_descr || !have_fortran || !have_shape) {
      return Error(
          "the header needs the keys 'descr', 'fortran_order' and 'shape'");
    }
    return header;
  }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  bool Consume(char c) {
    if (Peek() != c || pos_ >= text_.size()) return false;
    ++pos_;
    return true;
  }

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(text_[pos_])) ++pos_;
  }

  absl::StatusOr<std::string> ParseString(absl::string_view what) {
    const char quote = Peek();
    if (quote != '\'' && quote != '"') {
      return Error(absl::StrCat("expected ", what));
    }
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == absl::string_view::npos) return Error("unterminated string");
    std::string value(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return value;
  }

  absl::StatusOr<bool> ParseBool() {
    if (absl::StartsWith(text_.substr(pos_), "True")) {
      pos_ += 4;
      return true;
    }
    if (absl::StartsWith(text_.substr(pos_), "False")) {
      pos_ += 5;
      return false;
    }
    return Error("expected True or False");
  }

  absl::StatusOr<std::vector<uint64_t>> ParseShape() {
    std::vector<uint64_t> shape;
    if (!Consume('(')) return Error("expected a shape tuple");
    for (;;) {
      SkipSpace();
      if (Consume(')')) return shape;
      if (!absl::ascii_isdigit(Peek())) return Error("expected a dimension");
      uint64_t dim = 0;
      while (absl::ascii_isdigit(Peek())) {
        const uint64_t digit = Peek() - '0';
        if (dim > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
          return Error("dimension too large");
        }
        dim = dim * 10 + digit;
        ++pos_;
      }
      Consume('L');  // Python 2 long literal.
      shape.push_back(dim);
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume(')')) return shape;
      return Error("expected ',' or ')' in the shape");
    }
  }

  absl::Status Error(absl::string_view problem) const {
    return AtOffset(path_, offset_ + pos_,
                    absl::StrCat("malformed .npy header: ", problem));
  }

  const absl::string_view path_;
  const size_t offset_;
  const absl::string_view text_;
  size_t pos_ = 0;
};

absl::StatusOr<std::unique_ptr<LengthReader>> OpenNpy(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  const uint8_t* const data = file->data();
  const size_t size = file->size();
  constexpr absl::string_view kMagic("\x93NUMPY", 6);
  const absl::string_view head(reinterpret_cast<const char*>(data),
                               std::min(size, kMagic.size()));
  if (head != kMagic) {
    return AtOffset(path, 0,
                    absl::StrCat("bad magic: expected \"\\x93NUMPY\" (a NumPy "
                                 ".npy file), got ",
                                 Quote(head)));
  }
  if (size < 8) {
    return AtOffset(path, size,
                    "truncated header: the file ends after 6 "
                    "bytes of magic");
  }
  const int major = data[6], minor = data[7];
  if (major < 1 || major > 3 || minor != 0) {
    return AtOffset(path, 6,
                    absl::StrCat("unsupported .npy format version ", major, ".",
                                 minor, " (1.0, 2.0 and 3.0 are)"));
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t header_start = 8 + length_bytes;
  if (size < header_start) {
    return AtOffset(path, size, "truncated header length");
  }
  const size_t header_length = major == 1
                                   ? LoadLittleEndian<uint16_t>(data + 8)
                                   : LoadLittleEndian<uint32_t>(data + 8);
  if (header_length > size - header_start) {
    return AtOffset(path, size,
                    absl::StrCat("truncated header: it is ", header_length,
                                 " bytes from byte offset ", header_start,
                                 " but the file ends at byte offset ", size));
  }
  const absl::string_view text(
      reinterpret_cast<const char*>(data + header_start), header_length);
  ASSIGN_OR_RETURN(const NpyHeader header,
                   NpyHeaderParser(path, header_start, text).Parse());

  ElementType type;
  const std::string& descr = header.descr;
  if (descr == "<i4") {
    type = ElementType::kInt32;
  } else if (descr == "<i8") {
    type = ElementType::kInt64;
  } else if (descr == "<u4") {
    type = ElementType::kUint32;
  } else if (descr == "<u2") {
    type = ElementType::kUint16;
  } else if (descr.size() == 3 && descr[0] == '>' &&
             (descr[1] == 'i' || descr[1] == 'u')) {
    return AtOffset(path, header_start + header.descr_pos,
                    absl::StrCat("big-endian dtype '", descr,
                                 "' is not supported; convert with .astype('<",
                                 absl::string_view(descr).substr(1), "')"));
  } else {
    return AtOffset(path, header_start + header.descr_pos,
                    absl::StrCat("unsupported dtype ", Quote(descr),
                                 "; expected '<i4', '<i8', '<u4' or '<u2'"));
  }
  if (header.shape.size() != 1) {
    return AtOffset(path, header_start,
                    absl::StrCat("expected a 1-D array, got shape (",
                                 absl::StrJoin(header.shape, ", "), ")"));
  }
  const uint64_t count = header.shape[0];
  const size_t data_offset = header_start + header_length;
  const size_t element_size = ElementSize(type);
  if (count > (size - data_offset) / element_size) {
    return AtOffset(
        path, size,
        absl::StrCat("truncated data: the header declares ", count, " ", descr,
                     " elements from byte offset ", data_offset,
                     " but the file ends at byte offset ", size));
  }
  return std::make_unique<MappedArrayReader>(path, std::move(file), data_offset,
                                             count, type);
}

// ----------------------------------------------------------------- idx ----

// Megatron-LM's MMIDIDX index (megatron/core/datasets/indexed_dataset.py):
//   0  "MMIDIDX\0\0"   9 bytes
//   9  version        uint64 (1)
//   17 dtype code     uint8 (1..8: the token dtype of the .bin)
//   18 sequence count uint64
//   26 document count uint64
//   34 int32 sequence lengths[sequence count]
//      int64 sequence pointers[sequence count]
//      int64 document indices[document count]
absl::StatusOr<std::unique_ptr<LengthReader>> OpenMegatronIdx(
    const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  const uint8_t* const data = file->data();
  const size_t size = file->size();
  constexpr absl::string_view kMagic("MMIDIDX\0\0", 9);
  constexpr size_t kHeaderBytes = 34;
  const absl::string_view head(reinterpret_cast<const char*>(data),
                               std::min(size, kMagic.size()));
  if (head != kMagic) {
    return AtOffset(path, 0,
                    absl::StrCat("bad magic: expected \"MMIDIDX\\x00\\x00\" (a "
                                 "Megatron-LM indexed dataset .idx), got ",
                                 Quote(head)));
  }
  if (size < kHeaderBytes) {
    return AtOffset(path, size,
                    absl::StrCat("truncated header: it is ", kHeaderBytes,
                                 " bytes but the file has ", size));
  }
  const uint64_t version = LoadLittleEndian<uint64_t>(data + 9);
  if (version != 1) {
    return AtOffset(
        path, 9,
        absl::StrCat("unsupported version ", version, " (expected 1)"));
  }
  const int dtype_code = data[17];
  if (dtype_code < 1 || dtype_code > 8) {
    return AtOffset(
        path, 17,
        absl::StrCat("unknown dtype code ", dtype_code, " (expected 1..8)"));
  }
  const uint64_t sequences = LoadLittleEndian<uint64_t>(data + 18);
  const uint64_t documents = LoadLittleEndian<uint64_t>(data + 26);
  // Checks that `count` elements of `element_size` bytes fit from `offset`
  // and advances it past them.
  uint64_t offset = kHeaderBytes;
  auto take = [&](uint64_t count, size_t element_size,
                  absl::string_view what) -> absl::Status {
    if (count > (size - offset) / element_size) {
      return AtOffset(
          path, size,
          absl::StrCat("truncated ", what, ": the header declares ", count,
                       " of them (", element_size,
                       " bytes each) from byte "
                       "offset ",
                       offset, " but the file ends at byte offset ", size));
    }
    offset += count * element_size;
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(take(sequences, 4, "sequence lengths"));
  RETURN_IF_ERROR(take(sequences, 8, "sequence pointers"));
  RETURN_IF_ERROR(take(documents, 8, "document indices"));
  return std::make_unique<MappedArrayReader>(
      path, std::move(file), kHeaderBytes, sequences, ElementType::kInt32);
}

absl::Status ValidateVideoOptions(const VideoTokenizerOptions& options) {
  if (options.temporal_compression < 1 || options.spatial_compression < 1 ||
      options.patch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "video tokenizer factors must be positive, got temporal_compression=",
        options.temporal_compression, " spatial_compression=",
        options.spatial_compression, " patch_size=", options.patch_size));
  }
  return absl::OkStatus();
}

int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0); }

}  // namespace

absl::StatusOr<LengthFormat> ParseLengthFormat(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (LengthFormat format :
       {LengthFormat::kText, LengthFormat::kCsv, LengthFormat::kTsv,
        LengthFormat::kJsonl, LengthFormat::kNpy, LengthFormat::kMegatronIdx,
        LengthFormat::kVideoCsv}) {
    if (lower == LengthFormatName(format)) return format;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown length format ", Quote(name),
                   "; expected one of text, csv, tsv, jsonl, npy, idx, "
                   "video_csv"));
}

absl::string_view LengthFormatName(LengthFormat format) {
  switch (format) {
    case LengthFormat::kText:
      return "text";
    case LengthFormat::kCsv:
      return "csv";
    case LengthFormat::kTsv:
      return "tsv";
    case LengthFormat::kJsonl:
      return "jsonl";
    case LengthFormat::kNpy:
      return "npy";
    case LengthFormat::kMegatronIdx:
      return "idx";
    case LengthFormat::kVideoCsv:
      return "video_csv";
  }
  return "unknown";
}

LengthFormat GuessLengthFormat(absl::string_view path) {
  const size_t slash = path.find_last_of('/');
  const absl::string_view base =
      slash == absl::string_view::npos ? path : path.substr(slash + 1);
  const size_t dot = base.find_last_of('.');
  if (dot == absl::string_view::npos) return LengthFormat::kText;
  const std::string extension = absl::AsciiStrToLower(base.substr(dot + 1));
  if (extension == "csv") return LengthFormat::kCsv;
  if (extension == "tsv") return LengthFormat::kTsv;
  if (extension == "jsonl" || extension == "json") return LengthFormat::kJsonl;
  if (extension == "npy") return LengthFormat::kNpy;
  if (extension == "idx") return LengthFormat::kMegatronIdx;
  return LengthFormat::kText;
}

absl::StatusOr<int64_t> VideoTokenCount(int64_t num_frames, int64_t height,
                                        int64_t width,
                                        const VideoTokenizerOptions& options) {
  RETURN_IF_ERROR(ValidateVideoOptions(options));
  if (num_frames < 1 || height < 1 || width < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("video dimensions must be positive, got ", num_frames,
                     " frames of ", height, "x", width));
  }
  const int64_t frames =
      options.causal_first_frame
          ? 1 + CeilDiv(num_frames - 1, options.temporal_compression)
          : CeilDiv(num_frames, options.temporal_compression);
  const int64_t cell =
      int64_t{options.spatial_compression} * options.patch_size;
  int64_t tokens;
  if (__builtin_mul_overflow(frames, CeilDiv(height, cell), &tokens) ||
      __builtin_mul_overflow(tokens, CeilDiv(width, cell), &tokens)) {
    return absl::InvalidArgumentError(
        absl::StrCat("token count of ", num_frames, " frames of ", height, "x",
                     width, " overflows int64"));
  }
  return tokens;
}

LengthReader::~LengthReader() = default;

absl::StatusOr<std::unique_ptr<LengthReader>> LengthReader::Open(
    const LengthSourceOptions& options) {
  if (options.path.empty()) {
    return absl::InvalidArgumentError("length source: the path is empty");
  }
  if (options.buffer_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.path, ": buffer_bytes must be positive"));
  }
  const LengthFormat format = options.format;
  const bool has_column = format == LengthFormat::kCsv ||
                          format == LengthFormat::kTsv ||
                          format == LengthFormat::kJsonl;
  if (!has_column && !options.column.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.path, ": a column (", Quote(options.column), ") was given but ",
        LengthFormatName(format), " sources have no named columns"));
  }
  const std::string column =
      options.column.empty() ? std::string("length") : options.column;
  switch (format) {
    case LengthFormat::kText: {
      ASSIGN_OR_RETURN(std::unique_ptr<LineReader> lines,
                       LineReader::Open(options.path, options.buffer_bytes));
      return std::make_unique<TextLengthReader>(std::move(lines));
    }
    case LengthFormat::kCsv:
      return CsvLengthReader::Open(options, ',', {column}, std::nullopt);
    case LengthFormat::kTsv:
      return CsvLengthReader::Open(options, '\t', {column}, std::nullopt);
    case LengthFormat::kJsonl: {
      ASSIGN_OR_RETURN(std::unique_ptr<LineReader> lines,
                       LineReader::Open(options.path, options.buffer_bytes));
      return std::make_unique<JsonlLengthReader>(std::move(lines), column);
    }
    case LengthFormat::kNpy:
      return OpenNpy(options.path);
    case LengthFormat::kMegatronIdx:
      return OpenMegatronIdx(options.path);
    case LengthFormat::kVideoCsv: {
      absl::Status valid = ValidateVideoOptions(options.video);
      if (!valid.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(options.path, ": ", valid.message()));
      }
      const VideoCsvColumns& names = options.video_columns;
      return CsvLengthReader::Open(
          options, ',', {names.num_frames, names.height, names.width},
          options.video);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(options.path, ": unknown length format"));
}

absl::StatusOr<std::vector<int32_t>> ReadAllLengths(
    const LengthSourceOptions& options) {
  constexpr size_t kBatch = size_t{1} << 16;
  ASSIGN_OR_RETURN(std::unique_ptr<LengthReader> reader,
                   LengthReader::Open(options));
  std::vector<int32_t> lengths;
  if (reader->SizeHint() > 0) {
    lengths.reserve(static_cast<size_t>(reader->SizeHint()));
  }
  std::vector<int64_t> batch;
  for (;;) {
    ASSIGN_OR_RETURN(const size_t n, reader->NextBatch(kBatch, &batch));
    if (n == 0) break;
    for (const int64_t length : batch) {
      // Readers guarantee [1, int32 max]; this guards against a new reader
      // that forgets to.
      if (length < 1 || length > kMaxLength) {
        return absl::InternalError(absl::StrCat(
            options.path, ": sample ", lengths.size(), " has length ", length,
            " outside [1, ", kMaxLength, "]"));
      }
      lengths.push_back(static_cast<int32_t>(length));
    }
  }
  return lengths;
}

}  // namespace dcp
