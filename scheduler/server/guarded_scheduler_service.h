#ifndef DCP_SCHEDULER_SERVER_GUARDED_SCHEDULER_SERVICE_H_
#define DCP_SCHEDULER_SERVER_GUARDED_SCHEDULER_SERVICE_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/grpc_credentials.h"
#include "proto/scheduler_service.grpc.pb.h"

namespace dcp {

/// The `dcp.v1.Scheduler` service the server registers: every call must
/// pass a `CallAuthenticator` (bearer token, job id) on its metadata before
/// it reaches the inner service; one that does not ends at once with the
/// authenticator's status (UNAUTHENTICATED, PERMISSION_DENIED), unary or
/// stream alike, and nothing of it reaches the control plane.
///
/// gRPC's auth metadata processors only run on TLS ports, and its server
/// interceptors cannot end a call, so the check sits here, in front of
/// the service, for plaintext and TLS ports alike. A method added to the
/// proto and not forwarded here answers UNIMPLEMENTED: the guard fails
/// closed (//tests:security_test calls every method of the service).
///
/// Thread-safe. Does not own the inner service, which must outlive it.
///
///   GuardedSchedulerService guarded(&service, security.authenticator);
///   builder.RegisterService(&guarded);
class GuardedSchedulerService final : public v1::Scheduler::CallbackService {
 public:
  /// `on_refused`, when set, is called with the method's short name and the
  /// refusal, on a gRPC thread: quick, never blocking.
  using RefusedCallback =
      std::function<void(absl::string_view method, const absl::Status&)>;

  GuardedSchedulerService(v1::Scheduler::CallbackService* inner,
                          CallAuthenticator authenticator,
                          RefusedCallback on_refused = nullptr);

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const v1::RegisterRequest* request,
                                     v1::RegisterResponse* response) override;
  grpc::ServerWriteReactor<v1::PlanUpdate>* StreamPlans(
      grpc::CallbackServerContext* context,
      const v1::StreamPlansRequest* request) override;
  grpc::ServerWriteReactor<v1::NodePlanUpdate>* StreamNodePlans(
      grpc::CallbackServerContext* context,
      const v1::NodePlansRequest* request) override;
  grpc::ServerUnaryReactor* ReportTimings(grpc::CallbackServerContext* context,
                                          const v1::TimingReport* request,
                                          v1::ReportAck* response) override;
  grpc::ServerBidiReactor<v1::TimingReport, v1::ReportResult>* StreamReports(
      grpc::CallbackServerContext* context) override;
  grpc::ServerBidiReactor<v1::TimingReportBatch, v1::ReportResultBatch>*
  StreamNodeReports(grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* ReportProfile(grpc::CallbackServerContext* context,
                                          const v1::ProfileReport* request,
                                          v1::ReportAck* response) override;
  grpc::ServerUnaryReactor* StoreSet(grpc::CallbackServerContext* context,
                                     const v1::StoreSetRequest* request,
                                     v1::StoreSetResponse* response) override;
  grpc::ServerUnaryReactor* StoreGet(grpc::CallbackServerContext* context,
                                     const v1::StoreGetRequest* request,
                                     v1::StoreGetResponse* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const v1::StatusRequest* request,
                                      v1::StatusResponse* response) override;
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* context,
                                  const v1::DrainRequest* request,
                                  v1::DrainResponse* response) override;

 private:
  /// OK, or the refusal (reported to `on_refused_`).
  absl::Status Admit(absl::string_view method,
                     const grpc::CallbackServerContext& context) const;
  /// Finishes a unary call with `status`.
  static grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* context,
                                          const absl::Status& status);

  v1::Scheduler::CallbackService* const inner_;
  const CallAuthenticator authenticator_;
  const RefusedCallback on_refused_;
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_SERVER_GUARDED_SCHEDULER_SERVICE_H_
