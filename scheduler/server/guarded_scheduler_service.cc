#include "scheduler/server/guarded_scheduler_service.h"

#include <utility>

#include "common/grpc_status.h"

namespace dcp {
namespace {

/// A stream reactor that ends its call with `status` as soon as it is
/// bound, and deletes itself when gRPC is done with it.
template <typename Reactor>
class Refusal final : public Reactor {
 public:
  explicit Refusal(const absl::Status& status) {
    this->Finish(ToGrpcStatus(status));
  }
  void OnDone() override { delete this; }
};

}  // namespace

GuardedSchedulerService::GuardedSchedulerService(
    v1::Scheduler::CallbackService* inner, CallAuthenticator authenticator,
    RefusedCallback on_refused)
    : inner_(inner),
      authenticator_(std::move(authenticator)),
      on_refused_(std::move(on_refused)) {}

absl::Status GuardedSchedulerService::Admit(
    absl::string_view method,
    const grpc::CallbackServerContext& context) const {
  absl::Status status = authenticator_.Check(context.client_metadata());
  if (!status.ok() && on_refused_) on_refused_(method, status);
  return status;
}

grpc::ServerUnaryReactor* GuardedSchedulerService::Refuse(
    grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* GuardedSchedulerService::Register(
    grpc::CallbackServerContext* context, const v1::RegisterRequest* request,
    v1::RegisterResponse* response) {
  if (absl::Status s = Admit("Register", *context); !s.ok()) {
    return Refuse(context, s);
  }
  return inner_->Register(context, request, response);
}

grpc::ServerWriteReactor<v1::PlanUpdate>* GuardedSchedulerService::StreamPlans(
    grpc::CallbackServerContext* context,
    const v1::StreamPlansRequest* request) {
  if (absl::Status s = Admit("StreamPlans", *context); !s.ok()) {
    return new Refusal<grpc::ServerWriteReactor<v1::PlanUpdate>>(s);
  }
  return inner_->StreamPlans(context, request);
}

grpc::ServerWriteReactor<v1::NodePlanUpdate>*
GuardedSchedulerService::StreamNodePlans(grpc::CallbackServerContext* context,
                                         const v1::NodePlansRequest* request) {
  if (absl::Status s = Admit("StreamNodePlans", *context); !s.ok()) {
    return new Refusal<grpc::ServerWriteReactor<v1::NodePlanUpdate>>(s);
  }
  return inner_->StreamNodePlans(context, request);
}

grpc::ServerUnaryReactor* GuardedSchedulerService::ReportTimings(
    grpc::CallbackServerContext* context, const v1::TimingReport* request,
    v1::ReportAck* response) {
  if (absl::Status s = Admit("ReportTimings", *context); !s.ok()) {
    return Refuse(context, s);
  }
  return inner_->ReportTimings(context, request, response);
}

grpc::ServerBidiReactor<v1::TimingReport, v1::ReportResult>*
GuardedSchedulerService::StreamReports(grpc::CallbackServerContext* context) {
  if (absl::Status s = Admit("StreamReports", *context); !s.ok()) {
    return new Refusal<
        grpc::ServerBidiReactor<v1::TimingReport, v1::ReportResult>>(s);
  }
  return inner_->StreamReports(context);
}

grpc::ServerBidiReactor<v1::TimingReportBatch, v1::ReportResultBatch>*
GuardedSchedulerService::StreamNodeReports(
    grpc::CallbackServerContext* context) {
  if (absl::Status s = Admit("StreamNodeReports", *context); !s.ok()) {
    return new Refusal<grpc::ServerBidiReactor<v1::TimingReportBatch,
                                               v1::ReportResultBatch>>(s);
  }
  return inner_->StreamNodeReports(context);
}

grpc::ServerUnaryReactor* GuardedSchedulerService::ReportProfile(
    grpc::CallbackServerContext* context, const v1::ProfileReport* request,
    v1::ReportAck* response) {
  if (absl::Status s = Admit("ReportProfile", *context); !s.ok()) {
    return Refuse(context, s);
  }
  return inner_->ReportProfile(context, request, response);
}

grpc::ServerUnaryReactor* GuardedSchedulerService::StoreSet(
    grpc::CallbackServerContext* context, const v1::StoreSetRequest* request,
    v1::StoreSetResponse* response) {
  if (absl::Status s = Admit("StoreSet", *context); !s.ok()) {
    return Refuse(context, s);
  }
  return inner_->StoreSet(context, request, response);
}

grpc::ServerUnaryReactor* GuardedSchedulerService::StoreGet(
    grpc::CallbackServerContext* context, const v1::StoreGetRequest* request,
    v1::StoreGetResponse* response) {
  if (absl::Status s = Admit("StoreGet", *context); !s.ok()) {
    return Refuse(context, s);
  }
  return inner_->StoreGet(context, request, response);
}

grpc::ServerUnaryReactor* GuardedSchedulerService::GetStatus(
    grpc::CallbackServerContext* context, const v1::StatusRequest* request,
    v1::StatusResponse* response) {
  if (absl::Status s = Admit("GetStatus", *context); !s.ok()) {
    return Refuse(context, s);
  }
  return inner_->GetStatus(context, request, response);
}

grpc::ServerUnaryReactor* GuardedSchedulerService::Drain(
    grpc::CallbackServerContext* context, const v1::DrainRequest* request,
    v1::DrainResponse* response) {
  if (absl::Status s = Admit("Drain", *context); !s.ok()) {
    return Refuse(context, s);
  }
  return inner_->Drain(context, request, response);
}

}  // namespace dcp
