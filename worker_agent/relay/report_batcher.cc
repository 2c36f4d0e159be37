#include "worker_agent/relay/report_batcher.h"

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dcp {

void ReportBatcher::Add(int64_t origin, v1::TimingReport report) {
  queued_.emplace_back(origin, std::move(report));
}

std::optional<v1::TimingReportBatch> ReportBatcher::TakeBatch() {
  if (queued_.empty()) return std::nullopt;
  v1::TimingReportBatch batch;
  std::vector<int64_t>& origins = awaiting_.emplace_back();
  while (!queued_.empty() && batch.reports_size() < kMaxReportsPerBatch) {
    origins.push_back(queued_.front().first);
    *batch.add_reports() = std::move(queued_.front().second);
    queued_.pop_front();
  }
  return batch;
}

absl::StatusOr<std::vector<std::pair<int64_t, v1::ReportResult>>>
ReportBatcher::Answer(const v1::ReportResultBatch& results) {
  if (awaiting_.empty()) {
    return absl::InternalError(
        "the scheduler answered a report batch the relay did not send");
  }
  const std::vector<int64_t> origins = std::move(awaiting_.front());
  awaiting_.pop_front();
  if (static_cast<int>(origins.size()) != results.results_size()) {
    return absl::InternalError(
        absl::StrCat("the scheduler answered a batch of ", origins.size(),
                     " reports with ", results.results_size(), " results",
                     results.results_size() == 1
                         ? absl::StrCat(": ", results.results(0).message())
                         : ""));
  }
  std::vector<std::pair<int64_t, v1::ReportResult>> routed;
  routed.reserve(origins.size());
  for (size_t i = 0; i < origins.size(); ++i) {
    routed.emplace_back(origins[i], results.results(static_cast<int>(i)));
  }
  return routed;
}

std::vector<int64_t> ReportBatcher::Fail() {
  std::vector<int64_t> failed;
  absl::flat_hash_set<int64_t> seen;
  auto note = [&](int64_t origin) {
    if (seen.insert(origin).second) failed.push_back(origin);
  };
  for (const std::vector<int64_t>& batch : awaiting_) {
    for (int64_t origin : batch) note(origin);
  }
  for (const auto& [origin, report] : queued_) note(origin);
  awaiting_.clear();
  queued_.clear();
  return failed;
}

}  // namespace dcp
