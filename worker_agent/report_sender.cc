#include "worker_agent/report_sender.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "grpcpp/client_context.h"
#include "common/backoff.h"
#include "common/rpc_timeout.h"
#include "common/status_macros.h"

namespace dcp {
namespace {

absl::Status ShutDownError() {
  return absl::UnavailableError("the agent is shut down");
}

absl::Status Explained(const absl::Status& status, int64_t step) {
  return absl::Status(
      status.code(),
      absl::StrCat("reporting timings of step ", step, ": ", status.message()));
}

}  // namespace

ReportSender::ReportSender(v1::Scheduler::Stub* stub,
                           Registration* registration,
                           ReportSenderOptions options)
    : stub_(stub),
      registration_(registration),
      options_(std::move(options)),
      clock_(options_.clock) {
  if (options_.spool == nullptr || options_.spool->recovered().empty()) return;
  absl::MutexLock lock(&mu_);
  kept_.assign(options_.spool->recovered().begin(),
               options_.spool->recovered().end());
  resender_ = std::thread([this] { ResendKept(); });
}

absl::Status ReportSender::CheckRank(const v1::TimingReport& report) const {
  if (report.rank() == options_.rank) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("agent of rank ", options_.rank,
                   " cannot send a report of rank ", report.rank()));
}

std::shared_ptr<ReportStream> ReportSender::CurrentStream() {
  if (!options_.report_stream) return nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return nullptr;
    if (!streams_.empty() && !streams_.back()->ended()) return streams_.back();
  }
  // Opened outside the lock: gRPC may run the call's reactions at once.
  std::shared_ptr<ReportStream> opened = ReportStream::Open(stub_);
  absl::MutexLock lock(&mu_);
  // Streams whose calls are over need no waiting for at shutdown.
  streams_.erase(std::remove_if(streams_.begin(), streams_.end(),
                                [](const std::shared_ptr<ReportStream>& s) {
                                  return s->AwaitDone(absl::ZeroDuration());
                                }),
                 streams_.end());
  streams_.push_back(opened);
  if (cancelled_) {
    // `CloseStreams` may have closed the others already: this one is never
    // used.
    opened->Cancel();
    return nullptr;
  }
  return opened;
}

void ReportSender::CloseStreams() {
  std::vector<std::shared_ptr<ReportStream>> streams;
  {
    absl::MutexLock lock(&mu_);
    streams = streams_;
  }
  // A half-close lets the scheduler answer what it read; then cancel.
  for (const std::shared_ptr<ReportStream>& s : streams) s->Close();
  for (const std::shared_ptr<ReportStream>& s : streams) {
    if (!s->AwaitDone(options_.rpc_timeout)) {
      s->Cancel();
      s->AwaitDone(absl::InfiniteDuration());
    }
  }
}

std::optional<absl::Status> ReportSender::ReportOnStream(
    const v1::TimingReport& report) {
  std::shared_ptr<ReportStream> stream = CurrentStream();
  if (stream == nullptr) return std::nullopt;
  struct Answer {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    absl::Status status ABSL_GUARDED_BY(mu);
  };
  auto answer = std::make_shared<Answer>();
  if (!stream->Send(report, [answer](absl::Status status) {
        absl::MutexLock lock(&answer->mu);
        answer->status = std::move(status);
        answer->done = true;
      })) {
    return std::nullopt;
  }
  absl::Status status;
  {
    absl::MutexLock lock(&answer->mu);
    if (!clock_->AwaitWithTimeout(&answer->mu, absl::Condition(&answer->done),
                                  options_.rpc_timeout)) {
      return std::nullopt;  // ReportTimings: ALREADY_EXISTS if it got there.
    }
    status = answer->status;
  }
  return SettleStreamAnswer(status, report.step());
}

std::optional<absl::Status> ReportSender::SettleStreamAnswer(
    const absl::Status& answer, int64_t step) {
  if (answer.ok() || absl::IsAlreadyExists(answer)) {
    absl::MutexLock lock(&mu_);
    ++sent_;
    return absl::OkStatus();
  }
  if (absl::IsInvalidArgument(answer)) return Explained(answer, step);
  return std::nullopt;
}

void ReportSender::CountUnaryTaken() {
  absl::MutexLock lock(&mu_);
  ++sent_;
  if (options_.report_stream) ++fallbacks_;
}

absl::Status ReportSender::Report(const v1::TimingReport& report) {
  if (absl::Status rank = CheckRank(report); !rank.ok()) return rank;
  if (std::optional<absl::Status> streamed = ReportOnStream(report);
      streamed.has_value()) {
    return *streamed;
  }
  // The stream could not deliver it: unary calls, with retries.
  return ReportUnary(report);
}

absl::Status ReportSender::ReportUnary(const v1::TimingReport& report) {
  Backoff backoff(options_.initial_backoff, options_.max_backoff);
  absl::Status status;
  constexpr int kAttempts = 5;
  // Set when the rank registered again after a FAILED_PRECONDITION: the
  // scheduler is back, the report is sent again at once.
  bool registered_again = false;
  for (int attempt = 0;; ++attempt) {
    // Beyond a few attempts, only while the plan stream is reconnecting: a
    // scheduler that restarts (on durable state) takes this report once it
    // is back, and the reader's `max_reconnect_attempts` says when it is
    // gone for good.
    if (attempt >= kAttempts && !registered_again &&
        !registration_->reconnecting()) {
      break;
    }
    // Drawn on every attempt: the first retry waits twice `initial_backoff`.
    const absl::Duration sleep = backoff.Next();
    {
      absl::MutexLock lock(&mu_);
      if (cancelled_) return ShutDownError();
      if (attempt > 0 && !registered_again) {
        clock_->AwaitWithTimeout(&mu_, absl::Condition(&cancelled_), sleep);
      }
    }
    registered_again = false;
    const int64_t registrations = registration_->count();
    grpc::ClientContext context;
    SetRpcTimeout(context, options_.rpc_timeout);
    v1::ReportAck ack;
    status = FromGrpcStatus(stub_->ReportTimings(&context, report, &ack));
    if (status.ok() || absl::IsAlreadyExists(status)) {
      CountUnaryTaken();
      return absl::OkStatus();
    }
    if (absl::IsFailedPrecondition(status)) {
      // A scheduler that came back does not know this rank before the
      // reader registers again: wait for that, then retry.
      if (!registration_->AwaitRegisteredAgain(registrations,
                                               options_.rpc_timeout)) {
        break;
      }
      registered_again = true;
      continue;
    }
    if (!absl::IsUnavailable(status) && !absl::IsDeadlineExceeded(status)) {
      break;
    }
  }
  return Explained(status, report.step());
}

void ReportSender::ReportAsync(const v1::TimingReport& report,
                               std::function<void(absl::Status)> answer) {
  if (absl::Status rank = CheckRank(report); !rank.ok()) {
    answer(rank);
    return;
  }
  // Runs before the callbacks' count drops, so the sender is alive.
  auto done = [this, report, answer = std::move(answer)](absl::Status status) {
    if (Undelivered(status)) status = Keep(report, std::move(status));
    answer(std::move(status));
  };
  std::shared_ptr<ReportStream> stream = CurrentStream();
  if (stream != nullptr) {
    {
      absl::MutexLock count(&async_calls_->mu);
      ++async_calls_->in_flight;
    }
    // Shared with the answer: `done` runs in exactly one place.
    auto pending = std::make_shared<std::function<void(absl::Status)>>(done);
    const bool sent = stream->Send(
        report,
        [this, report, pending, calls = async_calls_](absl::Status status) {
          if (std::optional<absl::Status> settled =
                  SettleStreamAnswer(status, report.step());
              settled.has_value()) {
            (*pending)(*std::move(settled));
          } else {
            // Not delivered (or a stale registration): one unary call.
            ReportUnaryAsync(report, std::move(*pending));
          }
          // Last: once the count is zero the sender may be destroyed.
          absl::MutexLock lock(&calls->mu);
          --calls->in_flight;
        });
    if (sent) return;
    absl::MutexLock count(&async_calls_->mu);
    --async_calls_->in_flight;
  }
  ReportUnaryAsync(report, std::move(done));
}

void ReportSender::ReportUnaryAsync(const v1::TimingReport& report,
                                    std::function<void(absl::Status)> done) {
  struct Call {
    grpc::ClientContext context;
    v1::TimingReport report;
    v1::ReportAck ack;
  };
  bool cancelled = false;
  {
    absl::MutexLock lock(&mu_);
    cancelled = cancelled_;
    if (!cancelled) {
      absl::MutexLock count(&async_calls_->mu);
      ++async_calls_->in_flight;
    }
  }
  if (cancelled) {
    done(ShutDownError());  // Without the lock: `done` may keep the report.
    return;
  }
  auto call = std::make_shared<Call>();
  call->report = report;
  SetRpcTimeout(call->context, options_.rpc_timeout);
  stub_->async()->ReportTimings(
      &call->context, &call->report, &call->ack,
      [this, call, calls = async_calls_,
       done = std::move(done)](grpc::Status grpc_status) mutable {
        const absl::Status status = FromGrpcStatus(grpc_status);
        const bool accepted = status.ok() || absl::IsAlreadyExists(status);
        if (accepted) CountUnaryTaken();
        done(accepted ? absl::OkStatus()
                      : Explained(status, call->report.step()));
        // The call's context holds a reference to the channel: dropped here,
        // while the agent (which holds another) is surely alive, not when
        // gRPC destroys this callback on its own thread.
        call.reset();
        // Last: once the count is zero the sender may be destroyed.
        absl::MutexLock lock(&calls->mu);
        --calls->in_flight;
      });
}

void ReportSender::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
}

ReportSender::~ReportSender() {
  std::thread resender;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    resender = std::move(resender_);
  }
  if (resender.joinable()) resender.join();
}

bool ReportSender::Undelivered(const absl::Status& status) const {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) ||
         (absl::IsFailedPrecondition(status) && registration_->reconnecting());
}

absl::Status ReportSender::Keep(const v1::TimingReport& report,
                                absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return status;
    if (static_cast<int64_t>(kept_.size()) >= options_.max_pending_reports) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the scheduler is unreachable and ", kept_.size(),
          " reports wait for it already (the agent's max_pending_reports); "
          "step ", report.step(), ": ", status.message()));
    }
    // Written under the lock, so that the spool holds the reports in the
    // order of `kept_`: a settle there is of the oldest.
    if (options_.spool != nullptr) {
      RETURN_IF_ERROR(options_.spool->Append(report));
    }
    kept_.push_back(report);
    if (!resender_.joinable()) {
      resender_ = std::thread([this] { ResendKept(); });
    }
  }
  // Durable before the trainer hears OK; the fdatasync, slow on a busy
  // disk, outside the lock that the streams' callbacks take.
  return options_.spool != nullptr ? options_.spool->Sync()
                                   : absl::OkStatus();
}

bool ReportSender::AwaitFirstRegistration() {
  absl::MutexLock lock(&mu_);
  while (registration_->count() == 0) {
    if (cancelled_) return false;
    clock_->AwaitWithTimeout(&mu_, absl::Condition(&cancelled_),
                             options_.initial_backoff);
  }
  return true;
}

void ReportSender::ResendKept() {
  if (!AwaitFirstRegistration()) return;
  Backoff backoff(options_.initial_backoff, options_.max_backoff);
  while (true) {
    v1::TimingReport report;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return cancelled_ || !kept_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (cancelled_) return;
      report = kept_.front();
    }
    // The blocking path: the stream, then unary calls with retries.
    const absl::Status status = Report(report);
    if (!status.ok() && Undelivered(status)) {
      absl::MutexLock lock(&mu_);
      clock_->AwaitWithTimeout(&mu_, absl::Condition(&cancelled_),
                               backoff.Next());
      continue;
    }
    // Taken, or refused for good (a stale epoch): not kept either way.
    {
      absl::MutexLock lock(&mu_);
      kept_.pop_front();
    }
    // Settled (and synced) outside the lock: only this thread settles, so
    // in the order of `kept_`. One not settled is sent again after a
    // restart: ALREADY_EXISTS.
    if (options_.spool != nullptr) {
      options_.spool->SettleOldest().IgnoreError();
    }
    backoff.Reset();
  }
}

void ReportSender::AwaitCallbacks() {
  AsyncCalls& calls = *async_calls_;
  absl::MutexLock lock(&calls.mu);
  auto idle = [&calls]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(calls.mu) {
    return calls.in_flight == 0;
  };
  calls.mu.Await(absl::Condition(&idle));
}

int64_t ReportSender::sent() const {
  absl::MutexLock lock(&mu_);
  return sent_;
}

int64_t ReportSender::fallbacks() const {
  absl::MutexLock lock(&mu_);
  return fallbacks_;
}

int64_t ReportSender::pending() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(kept_.size());
}

}  // namespace dcp
