#ifndef DCP_SCHEDULER_LENGTHS_CSV_COLUMNS_H_
#define DCP_SCHEDULER_LENGTHS_CSV_COLUMNS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dcp {
namespace lengths_internal {

class CsvRecordReader;

/// Reads named columns of a CSV or TSV file (RFC 4180 quoting, a header row
/// naming the columns, quoted fields may span lines) as positive integers,
/// one row at a time. The csv, tsv and video_csv readers read through it.
///
/// Thread-compatible. Owns the file through its line reader.
class CsvColumnReader {
 public:
  /// Opens `path`, reads the header row and finds each of `columns` in it
  /// exactly once. `what` names a value in errors ("length", "value").
  static absl::StatusOr<std::unique_ptr<CsvColumnReader>> Open(
      const std::string& path, size_t buffer_bytes, char delimiter,
      std::vector<std::string> columns, std::string what);

  ~CsvColumnReader();
  CsvColumnReader(const CsvColumnReader&) = delete;
  CsvColumnReader& operator=(const CsvColumnReader&) = delete;

  /// Reads the next row's values, one per column in the order given to
  /// `Open`, into `values`; false at the end of the file.
  absl::StatusOr<bool> Next(std::vector<int64_t>* values);

  /// INVALID_ARGUMENT naming the file and the first line of the row read
  /// last.
  absl::Status Error(absl::string_view problem) const;

 private:
  CsvColumnReader(std::unique_ptr<CsvRecordReader> records,
                  std::vector<std::string> columns, std::vector<size_t> indices,
                  std::string what);

  std::unique_ptr<CsvRecordReader> records_;
  const std::vector<std::string> columns_;
  const std::vector<size_t> indices_;  // Of `columns_` in a row's fields.
  const std::string what_;
  std::string scratch_;
};

}  // namespace lengths_internal
}  // namespace dcp

#endif  // DCP_SCHEDULER_LENGTHS_CSV_COLUMNS_H_
