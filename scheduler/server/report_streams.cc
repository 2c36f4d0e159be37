#include "scheduler/server/report_streams.h"

#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"

namespace dcp {
namespace {

/// Answers one report of a stream as ReportTimings would.
void Answer(ControlPlane& control_plane, const OnStreamRpc& on_report,
            absl::string_view method, const v1::TimingReport& report,
            v1::ReportResult& result) {
  const absl::StatusOr<v1::ReportAck> ack = control_plane.ReportTimings(report);
  if (on_report) on_report(method, ack.status().code());
  result.set_step(report.step());
  result.set_rank(report.rank());
  result.set_code(static_cast<int32_t>(ack.status().code()));
  if (ack.ok()) {
    *result.mutable_ack() = *ack;
  } else {
    result.set_message(std::string(ack.status().message()));
  }
}

/// Answers a report of a StreamReports call.
void Answer(ControlPlane& control_plane, const OnStreamRpc& on_report,
            const v1::TimingReport& report, v1::ReportResult& result) {
  Answer(control_plane, on_report, "StreamReports", report, result);
}

/// Answers every report of a batch, in order; a malformed batch with one
/// INVALID_ARGUMENT result.
void Answer(ControlPlane& control_plane, const OnStreamRpc& on_report,
            const v1::TimingReportBatch& batch, v1::ReportResultBatch& out) {
  if (batch.reports().empty() || batch.reports_size() > kMaxRanksPerCall) {
    v1::ReportResult& result = *out.add_results();
    result.set_rank(-1);
    result.set_code(static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
    result.set_message(absl::StrCat("a TimingReportBatch carries ",
                                    batch.reports_size(),
                                    " reports; it needs 1 to ",
                                    kMaxRanksPerCall));
    if (on_report) {
      on_report("StreamNodeReports", absl::StatusCode::kInvalidArgument);
    }
    return;
  }
  for (const v1::TimingReport& report : batch.reports()) {
    Answer(control_plane, on_report, "StreamNodeReports", report,
           *out.add_results());
  }
}

/// One StreamReports call (TimingReport in, ReportResult out) or
/// StreamNodeReports call (a batch in, a batch of results out): reads one
/// message at a time, answers it on the reading thread (`Answer`: as the
/// unary handler would; the control plane only validates and records,
/// refits run on its planner) and queues the answer; writes answers one at
/// a time, in order. Reading pauses while `kMaxQueuedResults` answers wait,
/// so an agent that stops reading cannot make the scheduler buffer without
/// bound. All state is under `mu_`: read and write reactions may run at once
/// on different threads.
template <typename Request, typename Response>
class ReportStreamReactor final
    : public grpc::ServerBidiReactor<Request, Response>,
      public EndableStream {
 public:
  static constexpr size_t kMaxQueuedResults = 64;

  /// Registers with `open` (the service's set), which `OnDone` leaves.
  ReportStreamReactor(ControlPlane* control_plane,
                      const OnStreamRpc* on_report, ReportStreams* open)
      : control_plane_(control_plane), on_report_(on_report), open_(open) {
    // Lock order: the set's lock, then a reactor's (`End`); never both here.
    bool refused = false;
    {
      absl::MutexLock lock(&open_->mu);
      refused = open_->shut_down;
      open_->reactors.insert(this);
    }
    absl::MutexLock lock(&mu_);
    if (refused) FinishLocked(ShuttingDown());
    // Ended meanwhile by `End` (a shutdown), or refused: no reading.
    if (finish_status_.has_value()) return;
    read_in_flight_ = true;
    this->StartRead(&request_);
  }

  void End() override {
    absl::MutexLock lock(&mu_);
    FinishLocked(ShuttingDown());
  }

  void OnReadDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    read_in_flight_ = false;
    if (finish_status_.has_value()) return;
    if (!ok) {
      // The agent half-closed (or the call broke): finish once every
      // result is written.
      reads_done_ = true;
      PumpLocked();
      return;
    }
    Answer(*control_plane_, *on_report_, request_, results_.emplace_back());
    PumpLocked();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (finish_status_.has_value()) {
      // Finish was wanted while the write was in flight.
      FinishNowLocked();
      return;
    }
    if (!ok) {
      FinishLocked(ToGrpcStatus(
          absl::CancelledError("the report stream broke (client gone)")));
      return;
    }
    results_.pop_front();
    PumpLocked();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    FinishLocked(
        ToGrpcStatus(absl::CancelledError("the report stream was cancelled")));
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&open_->mu);
      open_->reactors.erase(this);
    }
    delete this;
  }

 private:
  static grpc::Status ShuttingDown() {
    return ToGrpcStatus(
        absl::UnavailableError("the scheduler is shutting down; resend reports "
                               "without an answer over ReportTimings"));
  }

  /// Starts the next write and the next read when they are due, or
  /// finishes after the last result of a half-closed stream.
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finish_status_.has_value()) return;
    if (!write_in_flight_ && !results_.empty()) {
      write_in_flight_ = true;
      this->StartWrite(&results_.front());
    }
    if (!reads_done_ && !read_in_flight_ &&
        results_.size() < kMaxQueuedResults) {
      read_in_flight_ = true;
      this->StartRead(&request_);
    }
    if (reads_done_ && !write_in_flight_ && results_.empty()) {
      FinishLocked(grpc::Status::OK);
    }
  }

  /// Finishes once, after the write in flight, if any, completes.
  void FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finish_status_.has_value()) return;
    finish_status_ = std::move(status);
    if (!write_in_flight_) FinishNowLocked();
  }

  void FinishNowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    this->Finish(*finish_status_);
  }

  ControlPlane* const control_plane_;
  /// The service's `on_stream_rpc` and set of open streams (they
  /// outlive every call).
  const OnStreamRpc* const on_report_;
  ReportStreams* const open_;
  absl::Mutex mu_;
  /// The message being read; the control plane is done with it before the
  /// next read starts.
  Request request_ ABSL_GUARDED_BY(mu_);
  /// Answers not yet written; the front one is in flight when
  /// `write_in_flight_` (a deque: the message must not move while written).
  std::deque<Response> results_ ABSL_GUARDED_BY(mu_);
  bool read_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  /// Set once Finish is wanted; `finished_` once it was called.
  std::optional<grpc::Status> finish_status_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerBidiReactor<v1::TimingReport, v1::ReportResult>* NewReportStream(
    ControlPlane* control_plane, const OnStreamRpc* on_report,
    ReportStreams* open) {
  return new ReportStreamReactor<v1::TimingReport, v1::ReportResult>(
      control_plane, on_report, open);
}

grpc::ServerBidiReactor<v1::TimingReportBatch, v1::ReportResultBatch>*
NewNodeReportStream(ControlPlane* control_plane,
                    const OnStreamRpc* on_report, ReportStreams* open) {
  return new ReportStreamReactor<v1::TimingReportBatch, v1::ReportResultBatch>(
      control_plane, on_report, open);
}

}  // namespace dcp
