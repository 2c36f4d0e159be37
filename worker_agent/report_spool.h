#ifndef DCP_WORKER_AGENT_REPORT_SPOOL_H_
#define DCP_WORKER_AGENT_REPORT_SPOOL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "common/record_log.h"
#include "proto/scheduler_service.pb.h"

namespace dcp {

/// The reports a sidecar agent keeps while the scheduler is unreachable,
/// on disk, so that they outlive the agent process (dcp-agent
/// --report_spool_dir). `ReportSender` appends each report it keeps and
/// marks the oldest one settled once it was delivered (or refused for
/// good); an agent started on the same directory delivers the reports
/// `recovered()` first. A report delivered but not yet marked when the
/// agent died is sent again: the scheduler answers ALREADY_EXISTS, which
/// counts as delivered. So a report reaches the scheduler at least once
/// and is counted there once.
///
/// The file, `<dir>/reports-rank<rank>.spool`, is a record log
/// (common/record_log.h) with the header "DCPSPOOL", appended to only:
/// each record's body is 'R' and a serialized `TimingReport` (kept) or 'S'
/// (the oldest kept one is settled). A torn or garbled record (a crash
/// mid-write) ends what is trusted: it and what follows are cut off at
/// `Open` and named in `tail_problem()`. Once every kept report is settled
/// the file is cut back to its header, so it stays as small as the
/// outage's backlog.
///
/// Writes are durable once `Sync` returned: `Append` only writes, so that a
/// caller can order its appends under its own lock and sync after it.
///
/// Thread-safe.
///
///   ASSIGN_OR_RETURN(std::unique_ptr<ReportSpool> spool,
///                    ReportSpool::Open("/var/spool/dcp", rank));
///   options.report_spool = spool.get();  // AgentOptions; outlives the agent
class ReportSpool {
 public:
  /// Opens (or creates, with the directory) the spool of `rank` in `dir`.
  /// INVALID_ARGUMENT for an empty `dir` or a negative rank;
  /// FAILED_PRECONDITION when the file is not a spool; UNAVAILABLE naming
  /// the path when it cannot be read, repaired or written.
  static absl::StatusOr<std::unique_ptr<ReportSpool>> Open(
      const std::string& dir, int rank);

  ~ReportSpool();
  ReportSpool(const ReportSpool&) = delete;
  ReportSpool& operator=(const ReportSpool&) = delete;

  /// The reports an earlier agent kept and did not settle, oldest first.
  const std::vector<v1::TimingReport>& recovered() const { return recovered_; }
  /// Why the end of the file was cut off at `Open`; empty when it was
  /// whole.
  const std::string& tail_problem() const { return tail_problem_; }
  const std::string& path() const { return path_; }

  /// Adds `report` after the ones added before; durable once a later
  /// `Sync` returned OK. UNAVAILABLE naming the file when it cannot be
  /// written (the file is cut back to what it held, when it can be). A
  /// failed write or `Sync` breaks the spool: from then on every call
  /// but `unsettled` answers FAILED_PRECONDITION and writes nothing.
  absl::Status Append(const v1::TimingReport& report) ABSL_LOCKS_EXCLUDED(mu_);
  /// Settles the oldest report not yet settled (recovered ones first), and
  /// syncs. FAILED_PRECONDITION when none is; errors as `Append` and
  /// `Sync`.
  absl::Status SettleOldest() ABSL_LOCKS_EXCLUDED(sync_mu_, mu_);
  /// Makes every append and settle so far durable (fdatasync), without
  /// holding up `Append` meanwhile. UNAVAILABLE when it fails, which breaks
  /// the spool: what the kernel failed to write may be gone from its
  /// cache, and a later fdatasync would not say so.
  absl::Status Sync() ABSL_LOCKS_EXCLUDED(sync_mu_, mu_);
  /// Reports appended or recovered and not settled.
  int64_t unsettled() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  ReportSpool(std::string path, RecordLogWriter log,
              std::vector<v1::TimingReport> recovered,
              std::string tail_problem);

  /// Appends one record with `body`.
  absl::Status Write(absl::string_view body) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  const std::vector<v1::TimingReport> recovered_;
  const std::string tail_problem_;

  /// Held across a sync, so that a failed one breaks the spool before the
  /// next starts: the kernel reports a lost write to one fdatasync only.
  absl::Mutex sync_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  /// Appended to and cleared under `mu_`; synced under `sync_mu_` alone,
  /// which RecordLogWriter allows.
  RecordLogWriter log_;
  int64_t unsettled_ ABSL_GUARDED_BY(mu_);
  /// Set after a failed write or sync: nothing more is written.
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_REPORT_SPOOL_H_
