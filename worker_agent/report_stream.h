#ifndef DCP_WORKER_AGENT_REPORT_STREAM_H_
#define DCP_WORKER_AGENT_REPORT_STREAM_H_

#include <deque>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/client_callback.h"
#include "proto/scheduler_service.grpc.pb.h"

namespace dcp {

/// One StreamReports call to the scheduler: an agent's timing reports on a
/// long-lived stream instead of a unary call a step (several times cheaper
/// for the scheduler at a thousand agents). Reports are written one at a
/// time in the order sent; the scheduler answers each, in that order, and
/// each answer goes to the `done` of its report.
///
/// A stream that ends (scheduler gone, cancelled) fails every report still
/// waiting with UNAVAILABLE and takes no more: the caller resends those over
/// ReportTimings, where ALREADY_EXISTS means the stream's copy was taken.
///
/// Thread-safe. Owned through the shared_ptr `Open` returns; the call keeps
/// itself alive until gRPC is done with it. The stub must outlive the call:
/// `Close` or `Cancel`, then `AwaitDone`, before destroying it.
///
///   std::shared_ptr<ReportStream> s = ReportStream::Open(stub);
///   if (!s->Send(report, [](absl::Status st) { ... })) { /* unary */ }
///   s->Close();
///   s->AwaitDone(absl::Seconds(5));
class ReportStream final
    : public grpc::ClientBidiReactor<v1::TimingReport, v1::ReportResult> {
 public:
  using Done = std::function<void(absl::Status)>;

  /// Starts the call on `stub` (not owned).
  static std::shared_ptr<ReportStream> Open(v1::Scheduler::Stub* stub);

  ReportStream(const ReportStream&) = delete;
  ReportStream& operator=(const ReportStream&) = delete;

  /// Queues `report`; `done` runs once, on a gRPC thread, in the order
  /// sent, with the
  /// scheduler's answer (OK, ALREADY_EXISTS or its rejection) or UNAVAILABLE
  /// when the stream ended first. `done` must not block. Returns false, and
  /// never calls `done`, when the stream has ended or is closing.
  bool Send(const v1::TimingReport& report, Done done);

  /// Half-closes: the scheduler answers every report written, then ends the
  /// call. Reports sent after this are refused. Idempotent.
  void Close();

  /// Ends the call now; reports without an answer fail with UNAVAILABLE.
  void Cancel() { context_.TryCancel(); }

  /// Whether the call ended (or is closing): `Send` refuses.
  bool ended() const;

  /// Blocks until gRPC is done with the call (every `done` has run, and
  /// the call released its hold on this object) or `timeout` passed;
  /// returns whether it is done.
  bool AwaitDone(absl::Duration timeout) const {
    return over_->WaitForNotificationWithTimeout(timeout);
  }

  void OnWriteDone(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnWritesDoneDone(bool ok) override {}
  void OnDone(const grpc::Status& status) override;

 private:
  ReportStream() = default;

  /// Starts the next write, or the half-close, when due.
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  grpc::ClientContext context_;
  mutable absl::Mutex mu_;
  /// Written or waiting to be, in order; the front is in flight while
  /// `writing_` (a deque: it must not move while written).
  std::deque<v1::TimingReport> to_write_ ABSL_GUARDED_BY(mu_);
  /// The `done` of every report sent and not yet answered, in order.
  std::deque<Done> waiting_ ABSL_GUARDED_BY(mu_);
  v1::ReportResult result_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  /// Notified at the very end of `OnDone`, after the call dropped `self_`;
  /// shared so that it outlives this object when that was the last owner.
  const std::shared_ptr<absl::Notification> over_ =
      std::make_shared<absl::Notification>();
  /// Keeps the call alive from `Open` until `OnDone`.
  std::shared_ptr<ReportStream> self_;
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_REPORT_STREAM_H_
