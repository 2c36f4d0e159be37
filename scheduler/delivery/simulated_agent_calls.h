#ifndef DCP_SCHEDULER_DELIVERY_SIMULATED_AGENT_CALLS_H_
#define DCP_SCHEDULER_DELIVERY_SIMULATED_AGENT_CALLS_H_

// What the simulated agent library's files share (simulated_agent.cc: the
// stubs, the registration, the queue threads and the fleet;
// simulated_agent_members.cc: the fleet's members, the agents themselves):
// the completion-queue tag every handler is, the client end of a report
// stream, and the constructors of the two kinds of member. Private to the
// simulated_agent library.

#include <deque>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "grpcpp/client_context.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/support/async_stream.h"
#include "proto/scheduler_service.grpc.pb.h"
#include "scheduler/delivery/simulated_agent.h"

namespace dcp::plan_delivery {

/// A completion-queue tag.
class Handler {
 public:
  virtual ~Handler() = default;
  virtual void Proceed(bool ok) = 0;
};

/// A tag that runs a member function of `T` on the queue's thread.
template <typename T>
struct MemberTag final : Handler {
  MemberTag(T* self, void (T::*fn)(bool)) : self(self), fn(fn) {}
  void Proceed(bool ok) override { (self->*fn)(ok); }
  T* self;
  void (T::*fn)(bool);
};

/// The client end of a report stream (StreamReports or StreamNodeReports):
/// one write in flight (the front of the queue), one read of results always
/// posted, and a half-close once asked for and everything queued is
/// written. `on_result` gets each result and `on_end` the call's status,
/// on the queue's thread, the only one that touches it once started.
template <typename Report, typename Result>
class ReportChannel {
 public:
  using Stream = grpc::ClientAsyncReaderWriter<Report, Result>;

  ReportChannel(std::function<void(const Result&)> on_result,
                std::function<void(const grpc::Status&)> on_end)
      : on_result_(std::move(on_result)),
        on_end_(std::move(on_end)),
        started_tag_(this, &ReportChannel::OnStarted),
        written_tag_(this, &ReportChannel::OnWritten),
        read_tag_(this, &ReportChannel::OnRead),
        writes_done_tag_(this, &ReportChannel::OnWritesDone),
        finished_tag_(this, &ReportChannel::OnFinished) {}

  grpc::ClientContext* context() { return &context_; }

  /// Starts `stream`, prepared on `context()`.
  void Start(std::unique_ptr<Stream> stream) {
    stream_ = std::move(stream);
    stream_->StartCall(&started_tag_);
  }

  void Send(Report report) {
    to_write_.push_back(std::move(report));
    WriteNext();
  }

  /// Half-closes once everything queued is written (the server then ends
  /// the call after its last result).
  void Close() {
    close_wanted_ = true;
    MaybeClose();
  }

  /// The call is over (`on_end` ran).
  bool done() const { return done_; }

 private:
  void OnStarted(bool ok) {
    if (!ok) {
      stream_->Finish(&status_, &finished_tag_);
      return;
    }
    started_ = true;
    stream_->Read(&result_, &read_tag_);
    WriteNext();
  }

  void WriteNext() {
    if (!started_ || writing_ || to_write_.empty()) return;
    writing_ = true;
    stream_->Write(to_write_.front(), &written_tag_);
  }

  void OnWritten(bool ok) {
    writing_ = false;
    if (!ok) return;  // The read fails too and finishes the call.
    to_write_.pop_front();
    WriteNext();
    MaybeClose();
  }

  void MaybeClose() {
    if (!close_wanted_ || closed_ || !started_ || writing_ ||
        !to_write_.empty()) {
      return;
    }
    closed_ = true;
    stream_->WritesDone(&writes_done_tag_);
  }

  void OnRead(bool ok) {
    if (!ok) {
      stream_->Finish(&status_, &finished_tag_);
      return;
    }
    on_result_(result_);
    stream_->Read(&result_, &read_tag_);
  }

  void OnWritesDone(bool /*ok*/) {}

  void OnFinished(bool /*ok*/) {
    done_ = true;
    to_write_.clear();
    on_end_(status_);
  }

  const std::function<void(const Result&)> on_result_;
  const std::function<void(const grpc::Status&)> on_end_;
  grpc::ClientContext context_;
  std::unique_ptr<Stream> stream_;
  std::deque<Report> to_write_;
  Result result_;
  grpc::Status status_;
  MemberTag<ReportChannel> started_tag_, written_tag_, read_tag_,
      writes_done_tag_, finished_tag_;
  bool started_ = false;
  bool writing_ = false;
  bool close_wanted_ = false;
  bool closed_ = false;
  bool done_ = false;
};

/// The agent of rank `rank` alone: its StreamPlans stream, and its reports
/// on a StreamReports stream or (without `AgentRun::report_stream`) a
/// ReportTimings call each.
std::unique_ptr<SimulatedAgent> MakeRankAgent(int rank,
                                              v1::Scheduler::Stub* stub,
                                              grpc::CompletionQueue* cq,
                                              AgentRun* run);

/// The agent of `ranks` (a node's) on one StreamNodePlans and one
/// StreamNodeReports stream.
std::unique_ptr<SimulatedAgent> MakeNodeAgent(std::vector<int> ranks,
                                              v1::Scheduler::Stub* stub,
                                              grpc::CompletionQueue* cq,
                                              AgentRun* run);

}  // namespace dcp::plan_delivery

#endif  // DCP_SCHEDULER_DELIVERY_SIMULATED_AGENT_CALLS_H_
