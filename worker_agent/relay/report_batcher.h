#ifndef DCP_WORKER_AGENT_RELAY_REPORT_BATCHER_H_
#define DCP_WORKER_AGENT_RELAY_REPORT_BATCHER_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/scheduler_service.pb.h"

namespace dcp {

/// The most reports one batch carries (the scheduler's limit).
inline constexpr int kMaxReportsPerBatch = 4096;

/// The batching of a node's StreamReports calls onto one StreamNodeReports
/// call upstream. Reports queue as they arrive; the queue goes as one batch
/// when it is due: at once when it is full or every open local call has
/// reported the earliest step queued (each rank of the node is done with
/// it: the usual end of a step; a report already sent in an earlier batch
/// counts), else once its oldest report has waited `linger` (a rank that
/// lags or reports no more holds the others that long at most). At most
/// one batch write is in flight (the caller's rule), so what queues
/// meanwhile goes together too. The results of a batch come back in its
/// order; each goes to the local call (`origin`) its report came from.
///
/// Pure: no gRPC, no threads, time passed in. Not thread-safe (the relay
/// holds one lock around it).
///
///   batcher.Open(origin);                    // a local call began
///   batcher.Add(origin, report, now);
///   if (auto batch = batcher.TakeBatch(now)) /* write *batch */;
///   else if (auto due = batcher.Due()) /* come back at *due */;
///   // per ReportResultBatch read:
///   for (auto& [origin, result] : *batcher.Answer(results)) ...
///   batcher.Close(origin);                   // it sends no more
class ReportBatcher {
 public:
  /// `linger`: how long the oldest queued report waits for the node's
  /// other calls; zero: every report is due at once.
  explicit ReportBatcher(absl::Duration linger = absl::ZeroDuration())
      : linger_(linger) {}

  /// Local call `origin` may send reports: a batch is due at once only
  /// when it has reported the batch's earliest step too. Idempotent.
  void Open(int64_t origin);
  /// It sends no more (half-closed or ended); its queued reports stay
  /// queued. Idempotent.
  void Close(int64_t origin);

  /// Queues `report` of local call `origin`, arrived at `now`.
  void Add(int64_t origin, v1::TimingReport report, absl::Time now);
  /// When the queue is due as a batch: InfinitePast when at once, else the
  /// oldest report's arrival + linger; nullopt when nothing is queued.
  std::optional<absl::Time> Due() const;
  /// If the queue is due at `now`: all of it (at most kMaxReportsPerBatch),
  /// now awaiting its results; else nullopt.
  std::optional<v1::TimingReportBatch> TakeBatch(absl::Time now);
  /// The results of the oldest batch awaiting them, each with its origin,
  /// in the batch's order. INTERNAL when none awaits or the count differs
  /// (the batch was refused as a whole: the upstream call is unusable).
  absl::StatusOr<std::vector<std::pair<int64_t, v1::ReportResult>>> Answer(
      const v1::ReportResultBatch& results);
  /// The upstream call ended: the origins of every report queued or
  /// awaiting a result, once each, in first-report order; forgets them.
  std::vector<int64_t> Fail();

  /// Whether batches await results.
  bool awaiting() const { return !awaiting_.empty(); }

 private:
  struct Queued {
    int64_t origin;
    v1::TimingReport report;
    absl::Time arrived;
  };

  /// (epoch, step) of a report: the order of steps.
  using StepKey = std::pair<int64_t, int64_t>;
  static StepKey KeyOf(const v1::TimingReport& report);

  /// Recomputes `due_` after a change.
  void Refresh();

  const absl::Duration linger_;
  std::deque<Queued> queued_;
  /// The open calls, each with the latest step it reported (nullopt: none
  /// yet).
  absl::flat_hash_map<int64_t, std::optional<StepKey>> open_;
  /// What `Due` returns.
  std::optional<absl::Time> due_;
  /// The origins of each batch written, oldest first.
  std::deque<std::vector<int64_t>> awaiting_;
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_RELAY_REPORT_BATCHER_H_
