#ifndef DCP_SCHEDULER_CONTROL_FILE_STATE_STORE_H_
#define DCP_SCHEDULER_CONTROL_FILE_STATE_STORE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/record_log.h"
#include "scheduler/control/state.pb.h"
#include "scheduler/control/state_store.h"

namespace dcp {

/// Configuration of a `FileStateStore`.
struct FileStateStoreOptions {
  /// The directory (created if missing, not its parents). Required.
  std::string dir;
  /// Rewrite the log as a snapshot of what is live once it has grown by
  /// this many bytes since the last snapshot, and by at least twice that
  /// snapshot's size. Positive.
  int64_t compact_bytes = int64_t{64} << 20;
};

/// What `FileStateStore::Open` found in the directory.
struct StateRecovery {
  /// Whether a log was there (false: a new state).
  bool existed = false;
  /// Records read and applied.
  int64_t records = 0;
  /// The torn or corrupt tail that was cut off: its bytes and why; 0 and
  /// empty when the log was whole.
  int64_t dropped_bytes = 0;
  std::string tail_problem;
};

/// What "state.log" starts with: "DCPLOG" and its format version, 1
/// (little-endian).
inline constexpr absl::string_view kStateLogHeader("DCPLOG\1\0", 8);

/// A `StateStoreInterface` on a directory: one append-only record log
/// (common/record_log.h), "state.log", fsync'd before every `Write` returns, and a
/// lock file ("LOCK", flock) that keeps a second scheduler off the
/// directory. Concurrent writes share fsyncs (group commit): a write waits
/// for at most the sync in progress and the one after it.
///
/// Opening reads the log to its first bad record: a torn or corrupt tail
/// (what a crash mid-write leaves) is reported in `recovery()`, cut off
/// and never trusted. Nothing of it was acted on: every record is durable
/// before the control plane lets its effect out of the process.
///
/// The log grows with every plan and report; a planned-step write that
/// finds it past `compact_bytes` rewrites it as a snapshot of the live
/// state (atomically: a new file renamed over the old one), on the calling
/// thread (the control plane's planner thread). A failed snapshot leaves
/// the old log in use and is retried later.
///
/// Thread-safe. The lock is released when the store is destroyed (or its
/// process dies).
///
///   ASSIGN_OR_RETURN(std::unique_ptr<FileStateStore> store,
///                    FileStateStore::Open({.dir = "/var/lib/dcp/job7"}));
///   if (store->recovered().job.has_value()) ... resume ...
///   RETURN_IF_ERROR(store->Write(record));
class FileStateStore final : public StateStoreInterface {
 public:
  /// Opens (or creates) the state in `options.dir`. FAILED_PRECONDITION
  /// when another process holds the directory, when "state.log" is not a
  /// state log, or when its records do not make a state (see
  /// `ApplyStateRecord`); the I/O error otherwise.
  static absl::StatusOr<std::unique_ptr<FileStateStore>> Open(
      FileStateStoreOptions options);

  ~FileStateStore() override;
  FileStateStore(const FileStateStore&) = delete;
  FileStateStore& operator=(const FileStateStore&) = delete;

  const DurableState& recovered() const override { return recovered_; }
  absl::Status Write(const state::StateRecord& record) override
      ABSL_LOCKS_EXCLUDED(mu_);

  const StateRecovery& recovery() const { return recovery_; }
  /// The log's size and how many snapshots replaced it so far.
  int64_t log_bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t compactions() const ABSL_LOCKS_EXCLUDED(mu_);

  /// The log file in `dir`.
  static std::string LogPath(const std::string& dir);

 private:
  FileStateStore(FileStateStoreOptions options, int lock_fd, DurableState state,
                 StateRecovery recovery, RecordLogWriter writer);

  /// Waits until the records up to `sequence` are durable, fsyncing them
  /// itself unless another write's sync covers them.
  absl::Status SyncThrough(int64_t sequence) ABSL_LOCKS_EXCLUDED(mu_);
  /// Rewrites the log as a snapshot when it is due.
  void CompactIfDue() ABSL_LOCKS_EXCLUDED(mu_);

  const FileStateStoreOptions options_;
  const std::string path_;
  const int lock_fd_;
  const DurableState recovered_;
  const StateRecovery recovery_;

  mutable absl::Mutex mu_;
  /// What the log holds (records appended, synced or not).
  DurableState live_ ABSL_GUARDED_BY(mu_);
  /// Replaced only by a snapshot, which waits until no sync is in flight;
  /// a sync reads it without the lock.
  RecordLogWriter writer_ ABSL_GUARDED_BY(mu_);
  /// Records appended, and the last of them known durable.
  int64_t appended_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t synced_ ABSL_GUARDED_BY(mu_) = 0;
  bool syncing_ ABSL_GUARDED_BY(mu_) = false;
  /// The first I/O error; every write after it fails with it.
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  /// The log's size after the last snapshot (or at open), and the
  /// snapshot's size.
  int64_t compacted_at_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t snapshot_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t compactions_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_CONTROL_FILE_STATE_STORE_H_
