#include "scheduler/scheduler_service.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"

namespace dcp {
namespace {

/// Finishes a unary call with `result`, copying the value on success.
template <typename Response>
grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context,
                                absl::StatusOr<Response> result,
                                Response* response) {
  if (result.ok()) *response = *std::move(result);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(result.status()));
  return reactor;
}

grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context,
                                const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

class PlanStreamReactor;

/// What a plan stream shares with the wake callback it gave the control
/// plane. The callback may run on any thread at any time, also after the
/// RPC is over, so it holds this (by shared_ptr) instead of the reactor, and
/// reaches the reactor only under `mu` while `reactor` is not null.
/// `OnDone` nulls it under `mu` before deleting the reactor: a wake either
/// finishes its use of the reactor before that, or sees null.
struct StreamLink {
  absl::Mutex mu;
  PlanStreamReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
};

/// One StreamPlans call. All its state is guarded by `link_->mu`, taken by
/// every reaction and by wakes; gRPC runs no reaction inline from
/// `StartWrite` or `Finish` (write and done callbacks are not inlineable on
/// the server), so calling them under the lock cannot deadlock. Lock order:
/// `link_->mu`, then the control plane's lock (`NextForStream`), which never
/// calls a wake while held.
class PlanStreamReactor final
    : public grpc::ServerWriteReactor<v1::PlanUpdate> {
 public:
  PlanStreamReactor(ControlPlane* control_plane,
                    const v1::StreamPlansRequest& request)
      : control_plane_(control_plane), link_(std::make_shared<StreamLink>()) {
    {
      absl::MutexLock lock(&link_->mu);
      link_->reactor = this;
    }
    // Not under link_->mu: OpenStream may wake the rank's older stream. A
    // wake of this stream before the id is known finds it not open yet and
    // does nothing; the pump below catches up.
    absl::StatusOr<int64_t> id = control_plane_->OpenStream(
        request.rank(), request.session_id(), request.from_step(),
        [link = link_] { Wake(*link); });
    absl::MutexLock lock(&link_->mu);
    if (!id.ok()) {
      FinishLocked(ToGrpcStatus(id.status()));
      return;
    }
    stream_id_ = *id;
    PumpLocked();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&link_->mu);
    write_in_flight_ = false;
    if (finish_status_.has_value()) {
      // Finish was wanted while the write was in flight.
      Finish(*finish_status_);
      return;
    }
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED,
                                "the plan stream broke (client gone)"));
      return;
    }
    PumpLocked();
  }

  void OnCancel() override {
    absl::MutexLock lock(&link_->mu);
    FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED,
                              "the plan stream was cancelled"));
  }

  void OnDone() override {
    int64_t stream_id = 0;
    {
      absl::MutexLock lock(&link_->mu);
      link_->reactor = nullptr;  // From here on wakes do nothing.
      stream_id = stream_id_;
    }
    if (stream_id != 0) control_plane_->CloseStream(stream_id);
    delete this;
  }

 private:
  static void Wake(StreamLink& link) {
    absl::MutexLock lock(&link.mu);
    PlanStreamReactor* reactor = link.reactor;
    if (reactor == nullptr) return;
    reactor->link_->mu.AssertHeld();  // link is reactor->link_
    reactor->PumpLocked();
  }

  /// Starts the next write, or finishes, unless a write is in flight.
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_->mu) {
    if (stream_id_ == 0 || write_in_flight_ || finish_status_.has_value()) {
      return;
    }
    StreamNext next = control_plane_->NextForStream(stream_id_);
    switch (next.kind) {
      case StreamNext::Kind::kWait:
        return;
      case StreamNext::Kind::kSend:
        // The message must live until OnWriteDone; only one is in flight.
        current_ = std::move(next.update);
        write_in_flight_ = true;
        StartWrite(&current_);
        return;
      case StreamNext::Kind::kEnd:
        FinishLocked(ToGrpcStatus(next.end_status));
        return;
    }
  }

  /// Finishes once; after the write in flight, if any, completes.
  void FinishLocked(grpc::Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_->mu) {
    if (finish_status_.has_value()) return;
    finish_status_ = std::move(status);
    if (!write_in_flight_) Finish(*finish_status_);
  }

  ControlPlane* const control_plane_;
  const std::shared_ptr<StreamLink> link_;
  /// 0 until the control plane opened the stream.
  int64_t stream_id_ ABSL_GUARDED_BY(link_->mu) = 0;
  bool write_in_flight_ ABSL_GUARDED_BY(link_->mu) = false;
  /// Set once Finish is wanted; Finish runs when no write is in flight.
  std::optional<grpc::Status> finish_status_ ABSL_GUARDED_BY(link_->mu);
  v1::PlanUpdate current_ ABSL_GUARDED_BY(link_->mu);
};

}  // namespace

SchedulerService::SchedulerService(ControlPlane* control_plane)
    : control_plane_(control_plane) {}

grpc::ServerUnaryReactor* SchedulerService::Register(
    grpc::CallbackServerContext* context, const v1::RegisterRequest* request,
    v1::RegisterResponse* response) {
  return Reply(context, control_plane_->Register(*request), response);
}

grpc::ServerWriteReactor<v1::PlanUpdate>* SchedulerService::StreamPlans(
    grpc::CallbackServerContext* /*context*/,
    const v1::StreamPlansRequest* request) {
  return new PlanStreamReactor(control_plane_, *request);
}

grpc::ServerUnaryReactor* SchedulerService::ReportTimings(
    grpc::CallbackServerContext* context, const v1::TimingReport* request,
    v1::ReportAck* response) {
  return Reply(context, control_plane_->ReportTimings(*request), response);
}

grpc::ServerUnaryReactor* SchedulerService::ReportProfile(
    grpc::CallbackServerContext* context, const v1::ProfileReport* request,
    v1::ReportAck* response) {
  return Reply(context, control_plane_->ReportProfile(*request), response);
}

grpc::ServerUnaryReactor* SchedulerService::StoreSet(
    grpc::CallbackServerContext* context, const v1::StoreSetRequest* request,
    v1::StoreSetResponse* /*response*/) {
  return Reply(context,
               control_plane_->StoreSet(request->session_id(), request->key(),
                                        request->value()));
}

grpc::ServerUnaryReactor* SchedulerService::StoreGet(
    grpc::CallbackServerContext* context, const v1::StoreGetRequest* request,
    v1::StoreGetResponse* response) {
  const std::vector<std::string> keys(request->keys().begin(),
                                      request->keys().end());
  absl::StatusOr<std::vector<std::string>> values =
      control_plane_->StoreGet(request->session_id(), keys);
  if (values.ok()) {
    for (std::string& value : *values) response->add_values(std::move(value));
  }
  return Reply(context, values.status());
}

grpc::ServerUnaryReactor* SchedulerService::GetStatus(
    grpc::CallbackServerContext* context, const v1::StatusRequest* /*request*/,
    v1::StatusResponse* response) {
  *response = control_plane_->Status();
  return Reply(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* SchedulerService::Drain(
    grpc::CallbackServerContext* context, const v1::DrainRequest* request,
    v1::DrainResponse* response) {
  response->set_last_step(control_plane_->Drain(request->stop()));
  return Reply(context, absl::OkStatus());
}

}  // namespace dcp
