#include "scheduler/lengths/csv_columns.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "scheduler/lengths/line_reader.h"
#include "scheduler/lengths/reader_support.h"

namespace dcp {
namespace lengths_internal {
namespace {

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

std::string DescribeColumns(const std::vector<std::string>& header) {
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

}  // namespace

// Reads CSV/TSV records, joining lines when a quoted field spans them.
class CsvRecordReader {
 public:
  CsvRecordReader(std::unique_ptr<LineReader> lines, char delimiter)
      : lines_(std::move(lines)), delimiter_(delimiter) {}

  // Reads the next record into `fields()`; false at the end of the file. The
  // fields stay valid until the next call.
  absl::StatusOr<bool> Next() {
    absl::string_view line;
    ASSIGN_OR_RETURN(const bool more, lines_->NextNonBlank(&line));
    if (!more) return false;
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
      ASSIGN_OR_RETURN(const bool continued, lines_->Next(&line));
      if (!continued) {
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
    return AtLine(lines_->path(), record_line_, problem);
  }

 private:
  std::unique_ptr<LineReader> lines_;
  const char delimiter_;
  std::vector<CsvField> fields_;
  std::string record_;
  int64_t record_line_ = 0;
};

absl::StatusOr<std::unique_ptr<CsvColumnReader>> CsvColumnReader::Open(
    const std::string& path, size_t buffer_bytes, char delimiter,
    std::vector<std::string> columns, std::string what) {
  ASSIGN_OR_RETURN(std::unique_ptr<LineReader> lines,
                   LineReader::Open(path, buffer_bytes));
  auto records = std::make_unique<CsvRecordReader>(std::move(lines), delimiter);
  ASSIGN_OR_RETURN(const bool has_header, records->Next());
  if (!has_header) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the file is empty, expected a header row"));
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
  return absl::WrapUnique(
      new CsvColumnReader(std::move(records), std::move(columns),
                          std::move(indices), std::move(what)));
}

CsvColumnReader::CsvColumnReader(std::unique_ptr<CsvRecordReader> records,
                                 std::vector<std::string> columns,
                                 std::vector<size_t> indices, std::string what)
    : records_(std::move(records)),
      columns_(std::move(columns)),
      indices_(std::move(indices)),
      what_(std::move(what)) {}

CsvColumnReader::~CsvColumnReader() = default;

absl::StatusOr<bool> CsvColumnReader::Next(std::vector<int64_t>* values) {
  ASSIGN_OR_RETURN(const bool more, records_->Next());
  if (!more) return false;
  const std::vector<CsvField>& fields = records_->fields();
  values->resize(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    const size_t index = indices_[c];
    if (index >= fields.size()) {
      return Error(absl::StrCat(
          "the row has ", fields.size(), " field",
          fields.size() == 1 ? "" : "s", ", too few to reach column ",
          Quote(columns_[c]), " (field ", index + 1, ")"));
    }
    const absl::string_view text =
        absl::StripAsciiWhitespace(FieldValue(fields[index], &scratch_));
    absl::StatusOr<int64_t> value = ParsePositiveInt(text, what_);
    if (!value.ok()) {
      return Error(absl::StrCat("column ", Quote(columns_[c]), ": ",
                                value.status().message()));
    }
    (*values)[c] = *value;
  }
  return true;
}

absl::Status CsvColumnReader::Error(absl::string_view problem) const {
  return records_->Error(problem);
}

}  // namespace lengths_internal
}  // namespace dcp
