#include "worker_agent/report_spool.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dcp {
namespace {

constexpr absl::string_view kMagic = "DCPSPOOL";
constexpr int64_t kHeaderBytes = 8;
/// u32 length and u64 checksum before each body.
constexpr int64_t kFrameBytes = 12;
/// A body longer than this is read as garbled: reports are small.
constexpr uint32_t kMaxBodyBytes = 64u << 20;
constexpr char kReport = 'R';
constexpr char kSettled = 'S';

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat("report spool: ", what, " '", path, "': ", strerror(errno)));
}

uint64_t Fnv1a64(absl::string_view data) {
  uint64_t hash = 14695981039346656037ull;
  for (const char c : data) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

void PutLittleEndian(uint64_t value, int bytes, std::string& out) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>(value >> (8 * i)));
}

uint64_t GetLittleEndian(absl::string_view data, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= uint64_t{static_cast<unsigned char>(data[i])} << (8 * i);
  }
  return value;
}

std::string Frame(absl::string_view body) {
  std::string out;
  PutLittleEndian(body.size(), 4, out);
  PutLittleEndian(Fnv1a64(body), 8, out);
  out.append(body.data(), body.size());
  return out;
}

/// What a spool file holds: the kept reports not settled, oldest first,
/// and how much of the file is trusted.
struct Replay {
  std::deque<v1::TimingReport> kept;
  int64_t valid_bytes = kHeaderBytes;
  std::string tail_problem;
};

/// Applies one record's `body` to `replay`; false when it makes no sense
/// (an unknown kind, a report that does not parse, a settle of nothing).
bool ApplyRecord(absl::string_view body, Replay& replay) {
  if (body.empty()) return false;
  if (body[0] == kSettled && body.size() == 1 && !replay.kept.empty()) {
    replay.kept.pop_front();
    return true;
  }
  v1::TimingReport report;
  if (body[0] != kReport ||
      !report.ParseFromArray(body.data() + 1,
                             static_cast<int>(body.size() - 1))) {
    return false;
  }
  replay.kept.push_back(std::move(report));
  return true;
}

/// Replays the records of `contents` (the whole file, header checked),
/// stopping at the first torn or garbled one.
Replay ReplayRecords(absl::string_view contents) {
  Replay replay;
  int64_t at = kHeaderBytes;
  const int64_t size = static_cast<int64_t>(contents.size());
  while (at < size) {
    if (size - at < kFrameBytes) {
      replay.tail_problem = absl::StrCat("a record frame torn at byte ", at);
      break;
    }
    const uint64_t length = GetLittleEndian(contents.substr(at), 4);
    const uint64_t checksum = GetLittleEndian(contents.substr(at + 4), 8);
    if (length > kMaxBodyBytes ||
        size - at - kFrameBytes < static_cast<int64_t>(length)) {
      replay.tail_problem = absl::StrCat("a record torn at byte ", at);
      break;
    }
    const absl::string_view body = contents.substr(at + kFrameBytes, length);
    if (Fnv1a64(body) != checksum || !ApplyRecord(body, replay)) {
      replay.tail_problem = absl::StrCat("a garbled record at byte ", at);
      break;
    }
    at += kFrameBytes + static_cast<int64_t>(length);
    replay.valid_bytes = at;
  }
  return replay;
}

absl::StatusOr<std::string> ReadAll(int fd, const std::string& path) {
  std::string contents;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("cannot read", path);
    if (n == 0) return contents;
    contents.append(buffer, static_cast<size_t>(n));
  }
}

absl::Status WriteAll(int fd, absl::string_view data, int64_t offset,
                      const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = pwrite(fd, data.data(), data.size(), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("cannot write", path);
    data.remove_prefix(static_cast<size_t>(n));
    offset += n;
  }
  return absl::OkStatus();
}

/// Cuts the file at `fd` to `size` bytes, durably.
absl::Status Truncate(int fd, int64_t size, const std::string& path) {
  if (ftruncate(fd, size) != 0) return Errno("cannot truncate", path);
  if (fdatasync(fd) != 0) return Errno("cannot fdatasync", path);
  return absl::OkStatus();
}

/// Reads the spool open at `fd` (writing the header into an empty file) and
/// cuts off what is not trusted, or all of it when nothing is unsettled.
absl::StatusOr<Replay> Recover(int fd, const std::string& path) {
  ASSIGN_OR_RETURN(const std::string contents, ReadAll(fd, path));
  if (contents.empty()) {
    RETURN_IF_ERROR(WriteAll(fd, kMagic, 0, path));
    if (fdatasync(fd) != 0) return Errno("cannot fdatasync", path);
    return Replay{};
  }
  if (absl::string_view(contents).substr(0, kHeaderBytes) != kMagic) {
    return absl::FailedPreconditionError(absl::StrCat(
        "report spool: '", path, "' is not a report spool (no \"", kMagic,
        "\" header); move it away or pick another --report_spool_dir"));
  }
  Replay replay = ReplayRecords(contents);
  if (replay.kept.empty()) replay.valid_bytes = kHeaderBytes;
  if (replay.valid_bytes < static_cast<int64_t>(contents.size())) {
    RETURN_IF_ERROR(Truncate(fd, replay.valid_bytes, path));
  }
  return replay;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ReportSpool>> ReportSpool::Open(
    const std::string& dir, int rank) {
  if (dir.empty()) {
    return absl::InvalidArgumentError("report spool: the directory is empty");
  }
  if (rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("report spool: rank ", rank, " is negative"));
  }
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Errno("cannot create the directory", dir);
  }
  const std::string path = absl::StrCat(dir, "/reports-rank", rank, ".spool");
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot open", path);
  absl::StatusOr<Replay> replay = Recover(fd, path);
  if (!replay.ok()) {
    close(fd);
    return replay.status();
  }
  return std::unique_ptr<ReportSpool>(new ReportSpool(
      path, fd, replay->valid_bytes,
      std::vector<v1::TimingReport>(replay->kept.begin(), replay->kept.end()),
      std::move(replay->tail_problem)));
}

ReportSpool::ReportSpool(std::string path, int fd, int64_t size,
                         std::vector<v1::TimingReport> recovered,
                         std::string tail_problem)
    : path_(std::move(path)),
      recovered_(std::move(recovered)),
      tail_problem_(std::move(tail_problem)),
      fd_(fd),
      size_(size),
      unsettled_(static_cast<int64_t>(recovered_.size())) {}

ReportSpool::~ReportSpool() { close(fd_); }

absl::Status ReportSpool::Write(absl::string_view body) {
  RETURN_IF_ERROR(broken_);
  const std::string record = Frame(body);
  absl::Status status = WriteAll(fd_, record, size_, path_);
  if (status.ok() && fdatasync(fd_) != 0)
    status = Errno("cannot fdatasync", path_);
  if (status.ok()) {
    size_ += static_cast<int64_t>(record.size());
    return status;
  }
  // A part of the record may be on disk: cut it off, or write no more
  // after it (a reader would stop there and lose what followed).
  if (!Truncate(fd_, size_, path_).ok()) {
    broken_ = absl::FailedPreconditionError(
        absl::StrCat("report spool: '", path_,
                     "' holds a record that could not be cut "
                     "off after a failed write (",
                     status.message(),
                     "); nothing more is "
                     "written to it"));
  }
  return status;
}

absl::Status ReportSpool::Append(const v1::TimingReport& report) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Write(absl::StrCat(absl::string_view(&kReport, 1),
                                     report.SerializeAsString())));
  ++unsettled_;
  return absl::OkStatus();
}

absl::Status ReportSpool::SettleOldest() {
  absl::MutexLock lock(&mu_);
  if (unsettled_ == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("report spool: '", path_, "' has no report to settle"));
  }
  if (unsettled_ == 1 && broken_.ok()) {
    // The last one: the file goes back to its header.
    RETURN_IF_ERROR(Truncate(fd_, kHeaderBytes, path_));
    size_ = kHeaderBytes;
  } else {
    RETURN_IF_ERROR(Write(absl::string_view(&kSettled, 1)));
  }
  --unsettled_;
  return absl::OkStatus();
}

int64_t ReportSpool::unsettled() const {
  absl::MutexLock lock(&mu_);
  return unsettled_;
}

}  // namespace dcp
