#ifndef DCP_SCHEDULER_SCHEDULER_SERVICE_H_
#define DCP_SCHEDULER_SCHEDULER_SERVICE_H_

#include "proto/scheduler_service.grpc.pb.h"
#include "scheduler/control_plane.h"

namespace dcp {

/// The gRPC face of a `ControlPlane` (callback API). It only translates:
/// requests go to the control plane, `absl::Status` comes back through
/// `ToGrpcStatus`. Unary RPCs finish before the handler returns (nothing
/// blocks; StoreGet answers NOT_FOUND for keys not set yet and callers poll).
///
/// `StreamPlans` runs one reactor per stream that keeps one write in flight:
/// it asks `ControlPlane::NextForStream` for the next message when a write
/// completes and when the control plane wakes it, so steps are sent in
/// order, once, and the stream ends with the drain message and OK (or with
/// the status the control plane gives, e.g. ABORTED when replaced).
///
/// Thread-safe. Does not own the control plane, which must outlive every
/// RPC: destroy the `grpc::Server` (after `Shutdown`) before either.
/// Included only by the server and tests: it pulls in grpc++.
///
///   SchedulerService service(control_plane.get());
///   builder.RegisterService(&service);
class SchedulerService final : public v1::Scheduler::CallbackService {
 public:
  explicit SchedulerService(ControlPlane* control_plane);

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const v1::RegisterRequest* request,
                                     v1::RegisterResponse* response) override;
  grpc::ServerWriteReactor<v1::PlanUpdate>* StreamPlans(
      grpc::CallbackServerContext* context,
      const v1::StreamPlansRequest* request) override;
  grpc::ServerUnaryReactor* ReportTimings(grpc::CallbackServerContext* context,
                                          const v1::TimingReport* request,
                                          v1::ReportAck* response) override;
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
  ControlPlane* const control_plane_;
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_SCHEDULER_SERVICE_H_
