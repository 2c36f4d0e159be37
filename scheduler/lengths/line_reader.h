#ifndef DCP_SCHEDULER_LENGTHS_LINE_READER_H_
#define DCP_SCHEDULER_LENGTHS_LINE_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dcp {
namespace lengths_internal {

/// Reads a file line by line through a fixed-size buffer that grows only
/// while one line is longer than it (up to `kMaxLineBytes`). The text length
/// formats (text, csv, tsv, jsonl, video_csv) read through it.
///
/// Thread-compatible. Owns the file descriptor and closes it on destruction.
class LineReader {
 public:
  /// Opens `path`; `buffer_bytes` (positive) are read at a time.
  static absl::StatusOr<std::unique_ptr<LineReader>> Open(
      const std::string& path, size_t buffer_bytes);

  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  /// Sets `*line` to the next line without its "\n" or "\r\n" (and, on line
  /// 1, a UTF-8 byte-order mark); it stays valid until the next call. Returns
  /// false at the end of the file.
  absl::StatusOr<bool> Next(absl::string_view* line);

  /// Like `Next`, but skips blank lines (spaces and tabs only). They are
  /// allowed only at the end of the file: a line after them is an error that
  /// names the first of them.
  absl::StatusOr<bool> NextNonBlank(absl::string_view* line);

  /// INVALID_ARGUMENT naming the file and the line `Next` returned last.
  absl::Status Error(absl::string_view problem) const;

  /// The 1-based number of the line `Next` returned last.
  int64_t line_number() const { return line_number_; }
  const std::string& path() const { return path_; }

 private:
  LineReader(std::string path, int fd, size_t buffer_bytes);

  void Finish(absl::string_view* line);
  absl::Status Fill();

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
  // The first of the blank lines `NextNonBlank` skipped last, 0 if none.
  int64_t first_blank_ = 0;
};

}  // namespace lengths_internal
}  // namespace dcp

#endif  // DCP_SCHEDULER_LENGTHS_LINE_READER_H_
