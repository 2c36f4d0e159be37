#include "worker_agent/report_spool.h"

#include <errno.h>
#include <sys/stat.h>

#include <cstring>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dcp {
namespace {

constexpr absl::string_view kHeader = "DCPSPOOL";
static_assert(kHeader.size() == kRecordLogHeaderBytes);
constexpr char kReport = 'R';
constexpr char kSettled = 'S';

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat("report spool: ", what, " '", path, "': ", strerror(errno)));
}

/// The spool's error for a failure of its log (the disk).
absl::Status LogError(const absl::Status& status) {
  return absl::UnavailableError(
      absl::StrCat("report spool: ", status.message()));
}

/// What a broken spool answers: it writes no more after `what` failed.
absl::Status Broken(const std::string& path, absl::string_view what,
                    const absl::Status& cause) {
  return absl::FailedPreconditionError(
      absl::StrCat("report spool: '", path, "' writes no more after ", what,
                   " failed (", cause.message(), ")"));
}

/// What a spool file holds: the kept reports not settled, oldest first,
/// and how much of the file is trusted.
struct Replay {
  std::deque<v1::TimingReport> kept;
  int64_t valid_bytes = kRecordLogHeaderBytes;
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

/// Replays the good records of the log, stopping at the first that makes
/// no sense: its checksum held, yet it is garbled all the same.
Replay ReplayRecords(const RecordLogContents& contents) {
  Replay replay;
  replay.tail_problem = contents.tail_problem;
  for (const std::string& body : contents.records) {
    if (!ApplyRecord(body, replay)) {
      replay.tail_problem =
          absl::StrCat("record at byte ", replay.valid_bytes,
                       " is garbled: not a report nor a settle of one");
      break;
    }
    replay.valid_bytes += kRecordFrameBytes + static_cast<int64_t>(body.size());
  }
  return replay;
}

/// Reads the spool at `path` (a new one when there is none) and opens it
/// for appending after what is trusted, or after its header when nothing
/// is unsettled.
absl::StatusOr<std::pair<Replay, RecordLogWriter>> Recover(
    const std::string& path) {
  absl::StatusOr<RecordLogContents> contents = ReadRecordLog(path, kHeader);
  if (absl::IsNotFound(contents.status())) {
    absl::StatusOr<RecordLogWriter> log =
        RecordLogWriter::Create(path, kHeader, {});
    if (!log.ok()) return LogError(log.status());
    return std::make_pair(Replay{}, *std::move(log));
  }
  if (absl::IsFailedPrecondition(contents.status())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "report spool: '", path, "' is not a report spool (no \"", kHeader,
        "\" header); move it away or pick another --report_spool_dir"));
  }
  if (!contents.ok()) return LogError(contents.status());
  Replay replay = ReplayRecords(*contents);
  if (replay.kept.empty()) replay.valid_bytes = kRecordLogHeaderBytes;
  absl::StatusOr<RecordLogWriter> log =
      RecordLogWriter::OpenForAppend(path, replay.valid_bytes);
  if (!log.ok()) return LogError(log.status());
  return std::make_pair(std::move(replay), *std::move(log));
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
  ASSIGN_OR_RETURN(auto recovered, Recover(path));
  Replay& replay = recovered.first;
  return std::unique_ptr<ReportSpool>(new ReportSpool(
      path, std::move(recovered.second),
      std::vector<v1::TimingReport>(replay.kept.begin(), replay.kept.end()),
      std::move(replay.tail_problem)));
}

ReportSpool::ReportSpool(std::string path, RecordLogWriter log,
                         std::vector<v1::TimingReport> recovered,
                         std::string tail_problem)
    : path_(std::move(path)),
      recovered_(std::move(recovered)),
      tail_problem_(std::move(tail_problem)),
      log_(std::move(log)),
      unsettled_(static_cast<int64_t>(recovered_.size())) {}

ReportSpool::~ReportSpool() = default;

absl::Status ReportSpool::Write(absl::string_view body) {
  RETURN_IF_ERROR(broken_);
  const absl::Status appended = log_.Append(body);
  if (appended.ok()) return appended;
  // The log refuses appends after a failed one: it cut the part-record
  // off, or could not (DATA_LOSS), and a reader would stop there.
  broken_ = Broken(path_, "a write", appended);
  return absl::IsDataLoss(appended) ? broken_ : LogError(appended);
}

absl::Status ReportSpool::Append(const v1::TimingReport& report) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Write(absl::StrCat(absl::string_view(&kReport, 1),
                                     report.SerializeAsString())));
  ++unsettled_;
  return absl::OkStatus();
}

absl::Status ReportSpool::SettleOldest() {
  {
    absl::MutexLock lock(&mu_);
    if (unsettled_ == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("report spool: '", path_, "' has no report to settle"));
    }
    RETURN_IF_ERROR(broken_);
    if (unsettled_ == 1) {
      // The last one: the file goes back to its header.
      if (absl::Status cleared = log_.Clear(); !cleared.ok()) {
        if (absl::IsDataLoss(cleared)) {
          broken_ = Broken(path_, "a cut", cleared);
        }
        return LogError(cleared);
      }
    } else {
      RETURN_IF_ERROR(Write(absl::string_view(&kSettled, 1)));
    }
    --unsettled_;
  }
  return Sync();
}

absl::Status ReportSpool::Sync() {
  absl::MutexLock sync(&sync_mu_);
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(broken_);
  }
  const absl::Status synced = log_.Sync();
  if (synced.ok()) return synced;
  absl::MutexLock lock(&mu_);
  broken_ = Broken(path_, "an fdatasync", synced);
  return LogError(synced);
}

int64_t ReportSpool::unsettled() const {
  absl::MutexLock lock(&mu_);
  return unsettled_;
}

}  // namespace dcp
