// The public entry points: format names, `LengthReader::Open`, which hands
// the options to one format's reader (format_readers.h), and
// `ReadAllLengths`.

#include "scheduler/lengths/length_reader.h"

#include <iterator>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "scheduler/lengths/format_readers.h"
#include "scheduler/lengths/reader_support.h"

namespace dcp {
namespace {

using lengths_internal::kMaxLength;
using lengths_internal::Quote;

// One on-disk format: its name and how to open it.
struct Format {
  LengthFormat format;
  absl::string_view name;
  // Whether `LengthSourceOptions::column` names the length's column/field.
  bool named_column;
  lengths_internal::FormatOpener open;
};

// Every format, in the order error messages list them.
constexpr Format kFormats[] = {
    {LengthFormat::kText, "text", false, lengths_internal::OpenTextReader},
    {LengthFormat::kCsv, "csv", true, lengths_internal::OpenCsvReader},
    {LengthFormat::kTsv, "tsv", true, lengths_internal::OpenTsvReader},
    {LengthFormat::kJsonl, "jsonl", true, lengths_internal::OpenJsonlReader},
    {LengthFormat::kNpy, "npy", false, lengths_internal::OpenNpyReader},
    {LengthFormat::kMegatronIdx, "idx", false,
     lengths_internal::OpenMegatronIdxReader},
    {LengthFormat::kVideoCsv, "video_csv", false,
     lengths_internal::OpenVideoCsvReader},
};

// The entry of `format`; null for a value outside the enum.
const Format* FindFormat(LengthFormat format) {
  for (const Format& entry : kFormats) {
    if (entry.format == format) return &entry;
  }
  return nullptr;
}

}  // namespace

namespace lengths_internal {

absl::StatusOr<size_t> RowLengthReader::NextBatch(size_t max,
                                                  std::vector<int64_t>* out) {
  out->clear();
  int64_t length;
  while (out->size() < max) {
    ASSIGN_OR_RETURN(const bool more, Next(&length));
    if (!more) break;
    out->push_back(length);
  }
  return out->size();
}

}  // namespace lengths_internal

absl::StatusOr<LengthFormat> ParseLengthFormat(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const Format& entry : kFormats) {
    if (lower == entry.name) return entry.format;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown length format ", Quote(name), "; expected one of ",
      absl::StrJoin(std::begin(kFormats), std::end(kFormats), ", ",
                    [](std::string* out, const Format& entry) {
                      out->append(entry.name.data(), entry.name.size());
                    })));
}

absl::string_view LengthFormatName(LengthFormat format) {
  const Format* entry = FindFormat(format);
  return entry == nullptr ? "unknown" : entry->name;
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
  const Format* format = FindFormat(options.format);
  const bool named_column = format != nullptr && format->named_column;
  if (!named_column && !options.column.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.path, ": a column (", Quote(options.column), ") was given but ",
        LengthFormatName(options.format), " sources have no named columns"));
  }
  if (format == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.path, ": unknown length format"));
  }
  if (!named_column || !options.column.empty()) return format->open(options);
  LengthSourceOptions with_default = options;
  with_default.column = "length";
  return format->open(with_default);
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
