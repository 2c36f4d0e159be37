#include "worker_agent/relay/report_batcher.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dcp {

ReportBatcher::StepKey ReportBatcher::KeyOf(const v1::TimingReport& report) {
  return {report.epoch(), report.step()};
}

void ReportBatcher::Open(int64_t origin) {
  open_.try_emplace(origin, std::nullopt);
  Refresh();
}

void ReportBatcher::Close(int64_t origin) {
  open_.erase(origin);
  Refresh();
}

void ReportBatcher::Add(int64_t origin, v1::TimingReport report,
                        absl::Time now) {
  auto call = open_.find(origin);
  if (call != open_.end()) {
    const StepKey key = KeyOf(report);
    if (!call->second.has_value() || *call->second < key) call->second = key;
  }
  queued_.push_back(Queued{origin, std::move(report), now});
  Refresh();
}

void ReportBatcher::Refresh() {
  due_.reset();
  if (queued_.empty()) return;
  if (queued_.size() >= static_cast<size_t>(kMaxReportsPerBatch)) {
    due_ = absl::InfinitePast();
    return;
  }
  StepKey earliest = KeyOf(queued_.front().report);
  for (const Queued& queued : queued_) {
    earliest = std::min(earliest, KeyOf(queued.report));
  }
  const bool all_reported =
      std::all_of(open_.begin(), open_.end(), [&](const auto& call) {
        return call.second.has_value() && *call.second >= earliest;
      });
  due_ = all_reported ? absl::InfinitePast() : queued_.front().arrived + linger_;
}

std::optional<absl::Time> ReportBatcher::Due() const { return due_; }

std::optional<v1::TimingReportBatch> ReportBatcher::TakeBatch(absl::Time now) {
  if (!due_.has_value() || *due_ > now) return std::nullopt;
  v1::TimingReportBatch batch;
  std::vector<int64_t>& origins = awaiting_.emplace_back();
  while (!queued_.empty() && batch.reports_size() < kMaxReportsPerBatch) {
    Queued& next = queued_.front();
    origins.push_back(next.origin);
    *batch.add_reports() = std::move(next.report);
    queued_.pop_front();
  }
  Refresh();
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
  for (const Queued& queued : queued_) note(queued.origin);
  awaiting_.clear();
  queued_.clear();
  Refresh();
  return failed;
}

}  // namespace dcp
