#ifndef DCP_WORKER_AGENT_RELAY_REPORT_BATCHER_H_
#define DCP_WORKER_AGENT_RELAY_REPORT_BATCHER_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/scheduler_service.pb.h"

namespace dcp {

/// The most reports one batch carries (the scheduler's limit).
inline constexpr int kMaxReportsPerBatch = 4096;

/// The batching of a node's StreamReports calls onto one StreamNodeReports
/// call upstream: reports queue as they arrive, and whatever is queued when
/// the previous batch has been written goes as the next batch (so at most
/// one write is in flight and a step's reports of a node travel together).
/// The results of a batch come back in its order; each goes to the local
/// call (`origin`) its report came from.
///
/// Pure: no gRPC, no threads. Not thread-safe (the relay holds one lock
/// around it).
///
///   batcher.Add(origin, report);
///   if (auto batch = batcher.TakeBatch()) /* write *batch */;
///   // per ReportResultBatch read:
///   for (auto& [origin, result] : *batcher.Answer(results)) ...
class ReportBatcher {
 public:
  /// Queues `report` of local call `origin`.
  void Add(int64_t origin, v1::TimingReport report);
  /// Everything queued (at most kMaxReportsPerBatch), now awaiting its
  /// results; nullopt when nothing is queued.
  std::optional<v1::TimingReportBatch> TakeBatch();
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
  std::deque<std::pair<int64_t, v1::TimingReport>> queued_;
  /// The origins of each batch written, oldest first.
  std::deque<std::vector<int64_t>> awaiting_;
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_RELAY_REPORT_BATCHER_H_
