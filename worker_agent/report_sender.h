#ifndef DCP_WORKER_AGENT_REPORT_SENDER_H_
#define DCP_WORKER_AGENT_REPORT_SENDER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/scheduler_service.grpc.pb.h"
#include "worker_agent/registration.h"
#include "worker_agent/report_spool.h"
#include "worker_agent/report_stream.h"

namespace dcp {

/// Configuration of a `ReportSender`.
struct ReportSenderOptions {
  /// The rank whose reports this sends; others are refused.
  int rank = -1;
  /// Deadline of each ReportTimings call, and how long a report waits for
  /// its answer on the report stream.
  absl::Duration rpc_timeout = absl::Seconds(10);
  /// Sleep before a retry of ReportTimings; doubles up to `max_backoff`.
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  /// Use a StreamReports stream first; false: unary calls only.
  bool report_stream = true;
  /// What the waits (back-off, a streamed report's answer) are on. Not
  /// owned; required.
  Clock* clock = nullptr;
  /// `ReportAsync` reports kept while the scheduler is unreachable, at most
  /// (see the class comment).
  int max_pending_reports = 1024;
  /// Where kept reports are also written, so they outlive the agent: the
  /// ones it recovered are kept first, at construction. Null: memory only.
  /// Not owned; must outlive the sender.
  ReportSpool* spool = nullptr;
};

/// Sends the rank's timing reports: on the open report stream (opened again
/// when it ended), falling back to ReportTimings for a report the stream
/// cannot deliver; with unary calls only when `report_stream` is off. The
/// blocking path retries UNAVAILABLE / DEADLINE_EXCEEDED (a few times, and
/// for as long as the plan stream is reconnecting), and
/// FAILED_PRECONDITION at once when the rank registered again after a
/// scheduler came back (`Registration::AwaitRegisteredAgain`).
///
/// `ReportAsync` (the sidecar's path) makes one attempt; a report it could
/// not deliver because the scheduler is unreachable (UNAVAILABLE,
/// DEADLINE_EXCEEDED, or FAILED_PRECONDITION while the plan stream is
/// reconnecting: a restarted scheduler that does not know the rank yet) is
/// kept, up to `max_pending_reports`, and answered OK; a thread of the
/// sender's, started with the first such report, delivers the kept ones in
/// order through `Report`, backing off while the scheduler stays away.
/// Past the bound, RESOURCE_EXHAUSTED. Kept reports not delivered by
/// `Cancel` are lost (`pending()` says how many), unless a `spool` holds
/// them: then a report is answered OK only once durable there (else the
/// spool's error is the answer; one written but not made durable is still
/// delivered while the agent runs), settled there once delivered, and an
/// agent started again on the spool delivers them.
///
/// Thread-safe. Borrows the stub and the registration, which must outlive
/// it. Shut down in order: `Cancel` (refuse, end back-offs), `CloseStreams`
/// (after which nothing opens one), `AwaitCallbacks`.
class ReportSender {
 public:
  ReportSender(v1::Scheduler::Stub* stub, Registration* registration,
               ReportSenderOptions options);

  /// See `Agent::ReportTimings`.
  absl::Status Report(const v1::TimingReport& report) ABSL_LOCKS_EXCLUDED(mu_);
  /// See `Agent::ReportTimingsAsync`.
  void ReportAsync(const v1::TimingReport& report,
                   std::function<void(absl::Status)> done)
      ABSL_LOCKS_EXCLUDED(mu_);

  /// Refuses later reports (UNAVAILABLE) and ends back-offs. Idempotent.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);
  /// Ends every report stream (a half-close, then a cancel after
  /// `rpc_timeout`) and waits until gRPC is done with them. After `Cancel`.
  void CloseStreams() ABSL_LOCKS_EXCLUDED(mu_);
  /// Blocks until no `ReportAsync` callback is pending or running.
  void AwaitCallbacks();

  /// Reports the scheduler took, and those of them taken by ReportTimings
  /// after the stream could not deliver them.
  int64_t sent() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t fallbacks() const ABSL_LOCKS_EXCLUDED(mu_);
  /// Reports kept for delivery after an outage, not yet delivered.
  int64_t pending() const ABSL_LOCKS_EXCLUDED(mu_);

  /// Ends the resend thread (after `Cancel`) and joins it.
  ~ReportSender();

 private:
  /// Counts ReportAsync calls whose callback has not finished; shared with
  /// the callbacks so it outlives the last of them.
  struct AsyncCalls {
    absl::Mutex mu;
    int in_flight ABSL_GUARDED_BY(mu) = 0;
  };

  absl::Status CheckRank(const v1::TimingReport& report) const;
  /// The open report stream, opened now if there is none or it ended; null
  /// after `Cancel` or with `report_stream` off.
  std::shared_ptr<ReportStream> CurrentStream() ABSL_LOCKS_EXCLUDED(mu_);
  /// Sends `report` on the stream and waits up to `rpc_timeout` for its
  /// answer: OK (taken, or ALREADY_EXISTS), an INVALID_ARGUMENT rejection,
  /// or nullopt when ReportTimings should take over.
  std::optional<absl::Status> ReportOnStream(const v1::TimingReport& report);
  /// What a stream's answer means: OK (counted in `sent`), an
  /// INVALID_ARGUMENT rejection naming the step, or nullopt when
  /// ReportTimings should take over.
  std::optional<absl::Status> SettleStreamAnswer(const absl::Status& answer,
                                                 int64_t step)
      ABSL_LOCKS_EXCLUDED(mu_);
  /// ReportTimings calls with retries (the blocking path's fallback).
  absl::Status ReportUnary(const v1::TimingReport& report)
      ABSL_LOCKS_EXCLUDED(mu_);
  /// One ReportTimings call without blocking.
  void ReportUnaryAsync(const v1::TimingReport& report,
                        std::function<void(absl::Status)> done)
      ABSL_LOCKS_EXCLUDED(mu_);
  /// Counts a report the scheduler took over ReportTimings.
  void CountUnaryTaken() ABSL_LOCKS_EXCLUDED(mu_);
  /// Whether `status` means the scheduler was away, not that it refused.
  bool Undelivered(const absl::Status& status) const;
  /// What `ReportAsync` answers for a report it could not deliver
  /// (`status`): OK once kept for the resend thread, RESOURCE_EXHAUSTED
  /// when full, `status` after `Cancel`.
  absl::Status Keep(const v1::TimingReport& report, absl::Status status)
      ABSL_LOCKS_EXCLUDED(mu_);
  /// The resend thread's loop.
  void ResendKept() ABSL_LOCKS_EXCLUDED(mu_);
  /// Waits until the rank has registered (a scheduler refuses the reports
  /// of a rank it does not know: the spool's are sent from construction
  /// on); false after `Cancel`.
  bool AwaitFirstRegistration() ABSL_LOCKS_EXCLUDED(mu_);

  v1::Scheduler::Stub* const stub_;
  Registration* const registration_;
  const ReportSenderOptions options_;
  Clock* const clock_;
  const std::shared_ptr<AsyncCalls> async_calls_ =
      std::make_shared<AsyncCalls>();

  mutable absl::Mutex mu_ ABSL_ACQUIRED_BEFORE(async_calls_->mu);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  /// Every report stream opened whose call may not be over yet, the
  /// current one last.
  std::vector<std::shared_ptr<ReportStream>> streams_ ABSL_GUARDED_BY(mu_);
  int64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t fallbacks_ ABSL_GUARDED_BY(mu_) = 0;
  /// Reports kept for the resend thread, oldest first; the front one may be
  /// in delivery.
  std::deque<v1::TimingReport> kept_ ABSL_GUARDED_BY(mu_);
  std::thread resender_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_REPORT_SENDER_H_
