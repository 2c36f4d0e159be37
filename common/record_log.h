#ifndef DCP_COMMON_RECORD_LOG_H_
#define DCP_COMMON_RECORD_LOG_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dcp {

// An append-only file of checksummed records, fsync'd: what
// `FileStateStore` keeps the control plane's durable state in, and
// `ReportSpool` the agent's kept reports.
//
// Layout: an 8-byte header that the user names (what kind of log the file
// is, and that kind's format version), then records, each
//   u32 length (little-endian) | u32 CRC-32C of (length bytes, payload) |
//   payload
// A record is durable once `RecordLogWriter::Sync` returned after it was
// appended. A crash may leave the last records torn (cut short) or, on some
// file systems, garbled; `ReadRecordLog` detects both and stops there:
// what follows the first bad record is the tail, reported and never
// trusted.

/// CRC-32C (Castagnoli) of `data`, continuing from `crc` (0 to start).
uint32_t Crc32c(absl::string_view data, uint32_t crc = 0);

/// The bytes of the file header: the `header` argument of `ReadRecordLog`
/// and `RecordLogWriter::Create` is this long.
inline constexpr int64_t kRecordLogHeaderBytes = 8;
/// Bytes a record adds to its payload (length and checksum).
inline constexpr int64_t kRecordFrameBytes = 8;
/// Payloads longer than this are refused on write and read as corrupt.
inline constexpr int64_t kMaxRecordBytes = int64_t{1} << 30;

/// A payload framed as it is written: length, checksum, payload.
std::string FrameRecord(absl::string_view payload);

/// What `ReadRecordLog` found.
struct RecordLogContents {
  /// The payloads of the good records, in order.
  std::vector<std::string> records;
  /// The header and the good records: where the next record goes.
  int64_t valid_bytes = 0;
  int64_t file_bytes = 0;
  /// Why [valid_bytes, file_bytes) is not trusted (a torn or corrupt
  /// record, named with its offset); empty when the whole file was read.
  std::string tail_problem;
};

/// Reads the log at `path`, which starts with `header`. NOT_FOUND when there
/// is none; FAILED_PRECONDITION when the file does not start with `header`
/// (not a log, or one of another kind or version: logs are created whole,
/// so this is not a crash's doing); INVALID_ARGUMENT for a `header` that is
/// not `kRecordLogHeaderBytes` long.
absl::StatusOr<RecordLogContents> ReadRecordLog(const std::string& path,
                                                absl::string_view header);

/// Appends records to a log file. Move-only; closes the file when
/// destroyed.
///
/// Thread-compatible, except that `Sync` may run while another thread
/// calls `Append` or `Clear` (it only reads the descriptor), which is how
/// callers share one fsync among several appends (group commit) or sync
/// outside their locks.
///
///   ASSIGN_OR_RETURN(RecordLogWriter log,
///                    RecordLogWriter::Create(path, kMyLogHeader, {}));
///   RETURN_IF_ERROR(log.Append(payload));
///   RETURN_IF_ERROR(log.Sync());  // payload is durable now
class RecordLogWriter {
 public:
  /// Writes a new log holding `payloads` at `path`, starting with `header`
  /// (`kRecordLogHeaderBytes` long, else INVALID_ARGUMENT), atomically (a
  /// temporary file, fsync'd, renamed over `path`, the directory fsync'd):
  /// a crash leaves either the old file or the new one, whole. Returns a
  /// writer that appends to it.
  static absl::StatusOr<RecordLogWriter> Create(
      const std::string& path, absl::string_view header,
      const std::vector<std::string>& payloads);

  /// Opens the existing log at `path` to append after its first
  /// `valid_bytes` (from `ReadRecordLog`); anything after them is cut off,
  /// durably, first.
  static absl::StatusOr<RecordLogWriter> OpenForAppend(const std::string& path,
                                                       int64_t valid_bytes);

  RecordLogWriter(RecordLogWriter&& other) noexcept;
  RecordLogWriter& operator=(RecordLogWriter&& other) noexcept;
  RecordLogWriter(const RecordLogWriter&) = delete;
  RecordLogWriter& operator=(const RecordLogWriter&) = delete;
  ~RecordLogWriter();

  /// Writes one record (not yet durable). After a failed write the file is
  /// cut back to where it was, and the writer refuses further appends.
  absl::Status Append(absl::string_view payload);

  /// Drops every record: the file is cut back to its header (durably once
  /// `Sync` returned). DATA_LOSS when the file position is then unknown:
  /// the writer refuses further appends.
  absl::Status Clear();

  /// Makes every record appended so far, and a `Clear`, durable
  /// (fdatasync).
  absl::Status Sync() const;

  /// Bytes in the file: header and records.
  int64_t size() const { return size_; }

 private:
  RecordLogWriter(std::string path, int fd, int64_t size);

  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
  absl::Status failed_;
};

}  // namespace dcp

#endif  // DCP_COMMON_RECORD_LOG_H_
