#ifndef DCP_SCHEDULER_SERVER_SCHEDULER_SERVICE_H_
#define DCP_SCHEDULER_SERVER_SCHEDULER_SERVICE_H_

#include <functional>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/grpc_credentials.h"
#include "proto/scheduler_service.grpc.pb.h"
#include "scheduler/control/control_plane.h"

namespace dcp {

class StreamFanOut;
struct ReportStreams;

/// Configuration of a `SchedulerService`.
struct SchedulerServiceOptions {
  /// Threads of the fan-out pool that pumps woken plan streams, so the
  /// control plane's planner thread only enqueues them. 0: no pool, a wake
  /// pumps its stream on the waking thread. -1 (auto): cores / 4, at most 8,
  /// on hosts with 8 cores or more, else no pool.
  int fanout_threads = -1;
  /// Called with the method and status of every report answered on a
  /// StreamReports or StreamNodeReports stream, and of every StreamPlans or
  /// StreamNodePlans call as it ends, on a gRPC thread (metrics). Quick and
  /// non-blocking; may be empty.
  std::function<void(absl::string_view method, absl::StatusCode)> on_stream_rpc;
  /// The check every call must pass on its metadata (bearer token, job id)
  /// before anything of it reaches the control plane; a call that fails it
  /// ends at once with the check's status (UNAUTHENTICATED,
  /// PERMISSION_DENIED), unary or stream alike. gRPC's auth metadata
  /// processors only run on TLS ports, and its server interceptors cannot
  /// end a call, so the check sits in each method, for plaintext and TLS
  /// ports alike (//tests:security_test calls every method). Unset: no
  /// check, for tests of the service alone; `SchedulerServer` always sets
  /// it.
  std::optional<CallAuthenticator> authenticator;
  /// Called with the method's short name and the refusal of each call the
  /// check refuses, on a gRPC thread: quick, never blocking. May be empty.
  std::function<void(absl::string_view method, const absl::Status&)> on_refused;
};

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
/// With a fan-out pool (`SchedulerServiceOptions::fanout_threads`), a wake
/// only queues its stream on one of the pool's shards, and a queued stream
/// is not queued again, so a step published to N streams costs the planner
/// thread N enqueues; the pool's threads run the pumps (the writes). The
/// destructor stops and joins the pool; wakes after that are dropped.
/// Without one, a wake pumps its stream on the waking thread.
///
/// Every method first checks the call (`SchedulerServiceOptions::
/// authenticator`); a method added to the proto and not implemented here
/// answers UNIMPLEMENTED, so the check fails closed.
///
/// Thread-safe. Owns the fan-out pool; does not own the control plane, which
/// must outlive the service: destroy the `grpc::Server` (after `Shutdown`)
/// before either.
/// Included only by the server and tests: it pulls in grpc++.
///
///   SchedulerService service(control_plane.get());
///   builder.RegisterService(&service);
class SchedulerService final : public v1::Scheduler::CallbackService {
 public:
  explicit SchedulerService(ControlPlane* control_plane,
                            SchedulerServiceOptions options = {});
  ~SchedulerService() override;
  SchedulerService(const SchedulerService&) = delete;
  SchedulerService& operator=(const SchedulerService&) = delete;

  /// Ends every open StreamReports call with UNAVAILABLE (after its write
  /// in flight) and refuses new ones, so that the server's shutdown need
  /// not wait for agents to close them. Plan streams end through
  /// `ControlPlane::Shutdown`. Idempotent.
  void Shutdown();

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
  /// OK, or why the call is refused (reported to `on_refused_`).
  absl::Status Admit(absl::string_view method,
                     const grpc::CallbackServerContext& context) const;

  ControlPlane* const control_plane_;
  const std::optional<CallAuthenticator> authenticator_;
  const std::function<void(absl::string_view, const absl::Status&)> on_refused_;
  const std::function<void(absl::string_view, absl::StatusCode)> on_stream_rpc_;
  const std::unique_ptr<ReportStreams> report_streams_;
  /// Shared with the wakes handed to the control plane, which may outlive
  /// the service; stopped by the destructor. Null without a pool.
  const std::shared_ptr<StreamFanOut> fanout_;
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_SERVER_SCHEDULER_SERVICE_H_
