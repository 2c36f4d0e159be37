#include "worker_agent/report_stream.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dcp {

std::shared_ptr<ReportStream> ReportStream::Open(v1::Scheduler::Stub* stub) {
  std::shared_ptr<ReportStream> stream(new ReportStream());
  stream->self_ = stream;
  stub->async()->StreamReports(&stream->context_, stream.get());
  // One read is always posted: answers flow back as they come, and the
  // call stays open until the scheduler ends it.
  stream->StartRead(&stream->result_);
  stream->StartCall();
  return stream;
}

bool ReportStream::Send(const v1::TimingReport& report, Done done) {
  absl::MutexLock lock(&mu_);
  if (ended_ || closing_) return false;
  to_write_.push_back(report);
  waiting_.push_back(std::move(done));
  PumpLocked();
  return true;
}

void ReportStream::Close() {
  absl::MutexLock lock(&mu_);
  if (closing_) return;
  closing_ = true;
  PumpLocked();
}

bool ReportStream::ended() const {
  absl::MutexLock lock(&mu_);
  return ended_ || closing_;
}

void ReportStream::PumpLocked() {
  if (ended_ || writing_) return;
  if (!to_write_.empty()) {
    writing_ = true;
    StartWrite(&to_write_.front());
  } else if (closing_ && !writes_done_) {
    writes_done_ = true;
    StartWritesDone();
  }
}

void ReportStream::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  if (!ok) {
    // The call is over; OnDone fails what waits.
    ended_ = true;
    return;
  }
  to_write_.pop_front();
  PumpLocked();
}

void ReportStream::OnReadDone(bool ok) {
  if (!ok) return;  // The call is ending; OnDone follows.
  Done done;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (waiting_.empty()) {
      // An answer to nothing: the scheduler broke the protocol.
      ended_ = true;
      context_.TryCancel();
      return;
    }
    done = std::move(waiting_.front());
    waiting_.pop_front();
    status = absl::Status(static_cast<absl::StatusCode>(result_.code()),
                          result_.message());
  }
  // Answered before the next read is posted, so answers run in order.
  done(status);
  StartRead(&result_);
}

void ReportStream::OnDone(const grpc::Status& status) {
  std::deque<Done> unanswered;
  {
    absl::MutexLock lock(&mu_);
    ended_ = true;
    unanswered.swap(waiting_);
    to_write_.clear();
  }
  const absl::Status why = absl::UnavailableError(
      absl::StrCat("the report stream ended before the scheduler answered (",
                   status.error_code(), ": ", status.error_message(), ")"));
  for (Done& done : unanswered) done(why);
  // The hold is dropped before waiters are told, not after: the client
  // context keeps a reference to the channel, and an owner that destroys
  // the channel once AwaitDone returns must not leave its last reference to
  // be dropped here, on one of gRPC's own threads (gRPC cannot tear its
  // callback threads down from one of them).
  const std::shared_ptr<absl::Notification> over = over_;
  std::shared_ptr<ReportStream> self = std::move(self_);
  self.reset();  // May destroy this object: nothing of it is used below.
  over->Notify();
}

}  // namespace dcp
