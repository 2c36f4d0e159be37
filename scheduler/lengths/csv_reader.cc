// kCsv and kTsv: lengths in one named column of a delimited file with a
// header row.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "scheduler/lengths/csv_columns.h"
#include "scheduler/lengths/format_readers.h"

namespace dcp {
namespace lengths_internal {
namespace {

class CsvLengthReader final : public RowLengthReader {
 public:
  explicit CsvLengthReader(std::unique_ptr<CsvColumnReader> rows)
      : rows_(std::move(rows)) {}

 private:
  absl::StatusOr<bool> Next(int64_t* length) override {
    ASSIGN_OR_RETURN(const bool more, rows_->Next(&values_));
    if (more) *length = values_[0];
    return more;
  }

  std::unique_ptr<CsvColumnReader> rows_;
  std::vector<int64_t> values_;
};

absl::StatusOr<std::unique_ptr<LengthReader>> OpenDelimited(
    const LengthSourceOptions& options, char delimiter) {
  ASSIGN_OR_RETURN(
      std::unique_ptr<CsvColumnReader> rows,
      CsvColumnReader::Open(options.path, options.buffer_bytes, delimiter,
                            {options.column}, "length"));
  return std::make_unique<CsvLengthReader>(std::move(rows));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LengthReader>> OpenCsvReader(
    const LengthSourceOptions& options) {
  return OpenDelimited(options, ',');
}

absl::StatusOr<std::unique_ptr<LengthReader>> OpenTsvReader(
    const LengthSourceOptions& options) {
  return OpenDelimited(options, '\t');
}

}  // namespace lengths_internal
}  // namespace dcp
