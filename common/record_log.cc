#include "common/record_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dcp {
namespace {

std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

uint32_t GetU32(absl::string_view bytes) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(bytes[i]);
  }
  return v;
}

absl::Status CheckHeaderLength(absl::string_view header) {
  if (static_cast<int64_t>(header.size()) == kRecordLogHeaderBytes) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "a record log header is ", kRecordLogHeaderBytes, " bytes, not ",
      header.size(), " (\"", absl::CHexEscape(header), "\")"));
}

absl::Status Errno(absl::string_view what, const std::string& path) {
  const int error = errno;
  return absl::ErrnoToStatus(error, absl::StrCat(what, " '", path, "'"));
}

/// Writes all of `bytes` at the descriptor's position.
absl::Status WriteAll(int fd, absl::string_view bytes,
                      const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot write", path);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

/// fsyncs the directory holding `path`, so that a rename or creation in it
/// is durable.
absl::Status SyncParentDir(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : path.substr(0, slash);
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open directory", dir);
  const int r = fsync(fd);
  const absl::Status status =
      r == 0 ? absl::OkStatus() : Errno("cannot fsync directory", dir);
  close(fd);
  return status;
}

/// Reads the whole file; NOT_FOUND when it does not exist.
absl::StatusOr<std::string> ReadWhole(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("no record log '", path, "'"));
    }
    return Errno("cannot open", path);
  }
  std::string bytes;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const absl::Status status = Errno("cannot read", path);
      close(fd);
      return status;
    }
    if (n == 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return bytes;
}

}  // namespace

uint32_t Crc32c(absl::string_view data, uint32_t crc) {
  static const std::array<uint32_t, 256> kTable = MakeCrcTable();
  crc = ~crc;
  for (unsigned char c : data) crc = kTable[(crc ^ c) & 0xff] ^ (crc >> 8);
  return ~crc;
}

std::string FrameRecord(absl::string_view payload) {
  std::string length;
  PutU32(length, static_cast<uint32_t>(payload.size()));
  std::string out = length;
  PutU32(out, Crc32c(payload, Crc32c(length)));
  out.append(payload.data(), payload.size());
  return out;
}

absl::StatusOr<RecordLogContents> ReadRecordLog(const std::string& path,
                                                absl::string_view header) {
  RETURN_IF_ERROR(CheckHeaderLength(header));
  ASSIGN_OR_RETURN(const std::string bytes, ReadWhole(path));
  RecordLogContents contents;
  contents.file_bytes = static_cast<int64_t>(bytes.size());
  if (bytes.size() < static_cast<size_t>(kRecordLogHeaderBytes) ||
      absl::string_view(bytes).substr(0, kRecordLogHeaderBytes) != header) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", path, "' is not a dcp record log with the header \"",
        absl::CHexEscape(header), "\" (its header is ",
        bytes.size() < static_cast<size_t>(kRecordLogHeaderBytes) ? "cut short"
                                                                  : "wrong",
        ")"));
  }
  const absl::string_view all(bytes);
  size_t at = kRecordLogHeaderBytes;
  while (at < all.size()) {
    const auto torn = [&](absl::string_view why) {
      contents.tail_problem = absl::StrCat("record at byte ", at, " ", why);
    };
    if (all.size() - at < static_cast<size_t>(kRecordFrameBytes)) {
      torn("is torn: its frame is cut short");
      break;
    }
    const uint32_t length = GetU32(all.substr(at, 4));
    const uint32_t crc = GetU32(all.substr(at + 4, 4));
    if (length > kMaxRecordBytes ||
        length > all.size() - at - kRecordFrameBytes) {
      torn(absl::StrCat("is torn: it claims ", length, " bytes, ",
                        all.size() - at - kRecordFrameBytes, " follow"));
      break;
    }
    const absl::string_view payload =
        all.substr(at + kRecordFrameBytes, length);
    if (Crc32c(payload, Crc32c(all.substr(at, 4))) != crc) {
      torn("is corrupt: its checksum does not match");
      break;
    }
    contents.records.emplace_back(payload);
    at += kRecordFrameBytes + length;
  }
  contents.valid_bytes = static_cast<int64_t>(at);
  return contents;
}

RecordLogWriter::RecordLogWriter(std::string path, int fd, int64_t size)
    : path_(std::move(path)), fd_(fd), size_(size) {}

RecordLogWriter::RecordLogWriter(RecordLogWriter&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      size_(other.size_),
      failed_(std::move(other.failed_)) {}

RecordLogWriter& RecordLogWriter::operator=(RecordLogWriter&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    failed_ = std::move(other.failed_);
  }
  return *this;
}

RecordLogWriter::~RecordLogWriter() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<RecordLogWriter> RecordLogWriter::Create(
    const std::string& path, absl::string_view header,
    const std::vector<std::string>& payloads) {
  RETURN_IF_ERROR(CheckHeaderLength(header));
  const std::string tmp = path + ".tmp";
  const int fd =
      open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", tmp);
  RecordLogWriter writer(tmp, fd, 0);
  std::string bytes(header);
  for (const std::string& payload : payloads) {
    if (static_cast<int64_t>(payload.size()) > kMaxRecordBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a record of ", payload.size(), " bytes is over the limit"));
    }
    bytes += FrameRecord(payload);
  }
  RETURN_IF_ERROR(WriteAll(fd, bytes, tmp));
  if (fsync(fd) != 0) return Errno("cannot fsync", tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Errno(absl::StrCat("cannot rename '", tmp, "' to"), path);
  }
  RETURN_IF_ERROR(SyncParentDir(path));
  writer.path_ = path;
  writer.size_ = static_cast<int64_t>(bytes.size());
  return writer;
}

absl::StatusOr<RecordLogWriter> RecordLogWriter::OpenForAppend(
    const std::string& path, int64_t valid_bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  RecordLogWriter writer(path, fd, valid_bytes);
  struct stat st;
  if (fstat(fd, &st) != 0) return Errno("cannot stat", path);
  if (st.st_size != valid_bytes) {
    if (ftruncate(fd, valid_bytes) != 0) return Errno("cannot truncate", path);
    if (fsync(fd) != 0) return Errno("cannot fsync", path);
  }
  if (lseek(fd, valid_bytes, SEEK_SET) != valid_bytes) {
    return Errno("cannot seek in", path);
  }
  return writer;
}

absl::Status RecordLogWriter::Append(absl::string_view payload) {
  if (!failed_.ok()) return failed_;
  if (static_cast<int64_t>(payload.size()) > kMaxRecordBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a record of ", payload.size(),
                     " bytes is over the limit of ", kMaxRecordBytes));
  }
  const absl::Status written = WriteAll(fd_, FrameRecord(payload), path_);
  if (written.ok()) {
    size_ += kRecordFrameBytes + static_cast<int64_t>(payload.size());
    return written;
  }
  // A partial record must not stay in front of later ones: cut it off.
  if (ftruncate(fd_, size_) != 0 || lseek(fd_, size_, SEEK_SET) != size_) {
    failed_ = absl::DataLossError(
        absl::StrCat(written.message(), "; and cannot cut the log back"));
  } else {
    failed_ = written;
  }
  return failed_;
}

absl::Status RecordLogWriter::Clear() {
  if (!failed_.ok()) return failed_;
  if (ftruncate(fd_, kRecordLogHeaderBytes) != 0) {
    return Errno("cannot truncate", path_);  // the records are all there
  }
  size_ = kRecordLogHeaderBytes;
  if (lseek(fd_, size_, SEEK_SET) != size_) {
    // The next write would land past the header, after a hole.
    failed_ = absl::DataLossError(absl::StrCat(
        Errno("cannot seek in", path_).message(), "; the log writes no more"));
    return failed_;
  }
  return absl::OkStatus();
}

absl::Status RecordLogWriter::Sync() const {
  if (fdatasync(fd_) != 0) return Errno("cannot fdatasync", path_);
  return absl::OkStatus();
}

}  // namespace dcp
