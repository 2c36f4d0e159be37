#include "scheduler/control/file_state_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dcp {
namespace {

absl::Status Errno(absl::string_view what, const std::string& path) {
  const int error = errno;
  return absl::ErrnoToStatus(error, absl::StrCat(what, " '", path, "'"));
}

/// Creates `dir` if missing and takes its lock file; returns the lock's
/// descriptor (held for the store's life).
absl::StatusOr<int> LockDir(const std::string& dir) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Errno("cannot create --state_dir", dir);
  }
  const std::string lock_path = dir + "/LOCK";
  const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot open", lock_path);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const bool held = errno == EWOULDBLOCK;
    const absl::Status status =
        held ? absl::FailedPreconditionError(absl::StrCat(
                   "--state_dir '", dir,
                   "' is in use by another process (a second dcp-scheduler "
                   "of the job?): its LOCK is held"))
             : Errno("cannot lock", lock_path);
    close(fd);
    return status;
  }
  return fd;
}

/// The state in the log at `path` and what reading it found; a new log
/// when there is none.
struct ReadState {
  DurableState state;
  StateRecovery recovery;
  int64_t valid_bytes = 0;
};

absl::StatusOr<ReadState> ReadLog(const std::string& path) {
  ReadState out;
  absl::StatusOr<RecordLogContents> contents =
      ReadRecordLog(path, kStateLogHeader);
  if (absl::IsNotFound(contents.status())) return out;
  RETURN_IF_ERROR(contents.status());
  out.recovery.existed = true;
  out.valid_bytes = contents->valid_bytes;
  if (!contents->tail_problem.empty()) {
    out.recovery.dropped_bytes = contents->file_bytes - contents->valid_bytes;
    out.recovery.tail_problem = contents->tail_problem;
  }
  for (const std::string& payload : contents->records) {
    state::StateRecord record;
    // The checksum held, so these are the bytes written: a record that
    // does not parse or apply is not a crash's doing. Refuse rather than
    // guess.
    if (!record.ParseFromString(payload)) {
      return absl::FailedPreconditionError(
          absl::StrCat("'", path, "': record ", out.recovery.records,
                       " is not a state record (a newer dcp's log?)"));
    }
    if (absl::Status applied = ApplyStateRecord(record, &out.state);
        !applied.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("'", path, "': record ", out.recovery.records, ": ",
                       applied.message()));
    }
    ++out.recovery.records;
  }
  return out;
}

std::vector<std::string> Serialized(
    const std::vector<state::StateRecord>& records) {
  std::vector<std::string> payloads;
  payloads.reserve(records.size());
  for (const state::StateRecord& r : records) {
    payloads.push_back(r.SerializeAsString());
  }
  return payloads;
}

}  // namespace

std::string FileStateStore::LogPath(const std::string& dir) {
  return dir + "/state.log";
}

absl::StatusOr<std::unique_ptr<FileStateStore>> FileStateStore::Open(
    FileStateStoreOptions options) {
  if (options.dir.empty()) {
    return absl::InvalidArgumentError("the state directory is empty");
  }
  if (options.compact_bytes <= 0) {
    return absl::InvalidArgumentError("compact_bytes must be positive");
  }
  ASSIGN_OR_RETURN(const int lock_fd, LockDir(options.dir));
  const std::string path = LogPath(options.dir);
  // A snapshot that a crash interrupted before its rename: never the log.
  std::remove((path + ".tmp").c_str());
  absl::StatusOr<ReadState> read = ReadLog(path);
  absl::StatusOr<RecordLogWriter> writer =
      !read.ok() ? absl::StatusOr<RecordLogWriter>(read.status())
      : read->recovery.existed
          ? RecordLogWriter::OpenForAppend(path, read->valid_bytes)
          : RecordLogWriter::Create(path, kStateLogHeader, {});
  if (!writer.ok()) {
    close(lock_fd);
    return writer.status();
  }
  return absl::WrapUnique(
      new FileStateStore(std::move(options), lock_fd, std::move(read->state),
                         std::move(read->recovery), *std::move(writer)));
}

FileStateStore::FileStateStore(FileStateStoreOptions options, int lock_fd,
                               DurableState state, StateRecovery recovery,
                               RecordLogWriter writer)
    : options_(std::move(options)),
      path_(LogPath(options_.dir)),
      lock_fd_(lock_fd),
      recovered_(state),
      recovery_(std::move(recovery)),
      live_(std::move(state)),
      writer_(std::move(writer)) {
  compacted_at_ = writer_.size();
  snapshot_bytes_ = writer_.size();
}

FileStateStore::~FileStateStore() { close(lock_fd_); }

absl::Status FileStateStore::Write(const state::StateRecord& record) {
  const std::string payload = record.SerializeAsString();
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!failed_.ok()) return failed_;
    // Checked against what the log holds before it joins the log: a record
    // that does not apply would make the log unreadable.
    RETURN_IF_ERROR(ApplyStateRecord(record, &live_));
    if (absl::Status appended = writer_.Append(payload); !appended.ok()) {
      failed_ = appended;
      return failed_;
    }
    sequence = ++appended_;
  }
  RETURN_IF_ERROR(SyncThrough(sequence));
  if (record.has_planned_step()) CompactIfDue();
  return absl::OkStatus();
}

absl::Status FileStateStore::SyncThrough(int64_t sequence) {
  while (true) {
    int64_t target = 0;
    {
      absl::MutexLock lock(&mu_);
      const auto settled = [this, sequence]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return synced_ >= sequence || !syncing_ || !failed_.ok();
      };
      mu_.Await(absl::Condition(&settled));
      if (synced_ >= sequence) return absl::OkStatus();
      if (!failed_.ok()) return failed_;
      // This write syncs for every record appended so far.
      syncing_ = true;
      target = appended_;
    }
    // `writer_` is not replaced while `syncing_`, and Sync only reads it.
    const absl::Status synced = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return writer_.Sync();
    }();
    absl::MutexLock lock(&mu_);
    syncing_ = false;
    if (!synced.ok()) {
      failed_ = synced;
      return failed_;
    }
    synced_ = std::max(synced_, target);
  }
}

void FileStateStore::CompactIfDue() {
  absl::MutexLock lock(&mu_);
  const int64_t grown = writer_.size() - compacted_at_;
  if (!failed_.ok() ||
      grown < std::max(options_.compact_bytes, 2 * snapshot_bytes_)) {
    return;
  }
  const auto idle = [this]()
                        ABSL_NO_THREAD_SAFETY_ANALYSIS { return !syncing_; };
  mu_.Await(absl::Condition(&idle));
  absl::StatusOr<RecordLogWriter> snapshot = RecordLogWriter::Create(
      path_, kStateLogHeader, Serialized(SnapshotRecords(live_)));
  if (!snapshot.ok()) {
    // The old log is whole and still in use; try again after as much
    // growth again.
    compacted_at_ = writer_.size();
    return;
  }
  writer_ = *std::move(snapshot);
  // The snapshot holds, durably, every record appended so far.
  synced_ = appended_;
  compacted_at_ = writer_.size();
  snapshot_bytes_ = writer_.size();
  ++compactions_;
}

int64_t FileStateStore::log_bytes() const {
  absl::MutexLock lock(&mu_);
  return writer_.size();
}

int64_t FileStateStore::compactions() const {
  absl::MutexLock lock(&mu_);
  return compactions_;
}

}  // namespace dcp
