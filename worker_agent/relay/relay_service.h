#ifndef DCP_WORKER_AGENT_RELAY_RELAY_SERVICE_H_
#define DCP_WORKER_AGENT_RELAY_RELAY_SERVICE_H_

#include <memory>

#include "absl/time/time.h"
#include "common/clock.h"
#include "grpcpp/channel.h"
#include "proto/scheduler_service.grpc.pb.h"

namespace dcp {

struct RelayCore;

/// Configuration of a `RelayService`.
struct RelayServiceOptions {
  /// StreamPlans calls that arrive within this long of the first one not
  /// yet sent upstream share one StreamNodePlans call.
  absl::Duration gather_window = absl::Milliseconds(20);
  /// Time of the gathering and the report batches; null: the real clock.
  Clock* clock = nullptr;
  /// How long the node's queued reports wait for a StreamReports call that
  /// has not yet reported the earliest queued step before they go without
  /// it (ReportBatcher); once every call has, they go at once.
  absl::Duration report_linger = absl::Milliseconds(5);
};

/// The `dcp.v1.Scheduler` service as a node's dcp-agents see it, relayed to
/// the real scheduler over `upstream`:
/// - StreamPlans calls are multiplexed onto StreamNodePlans calls
///   (`PlanMux`): the ranks that subscribe together share one upstream
///   stream, each local call gets exactly its rank's part and ends with the
///   status of its part (or of the upstream call, e.g. the scheduler's
///   UNAUTHENTICATED), one rank's end ending only it;
/// - StreamReports calls share one StreamNodeReports call (`ReportBatcher`):
///   a batch goes once every call has reported the earliest queued step
///   (or after `report_linger`), one batch write in flight, each result
///   back to its call; when the upstream call breaks, the local calls with
///   reports outstanding end with its status, and the agents resend over
///   ReportTimings;
/// - the unary methods are forwarded as they are, with the caller's
///   deadline and cancellation, waiting for the upstream connection up to
///   the deadline; the scheduler's status comes back unchanged. The node
///   methods (StreamNodePlans, StreamNodeReports) are the relay's own to
///   the scheduler: locally they answer UNIMPLEMENTED.
/// Upstream calls carry the relay's own credentials (the channel's).
///
/// Thread-safe: one lock over the multiplexing state, never held while
/// blocking (gRPC runs no reaction inline from Start*/Finish). Owns a
/// gathering thread. `Shutdown` (or the destructor) ends the local streams
/// with UNAVAILABLE and waits for the upstream calls to end; shut the
/// grpc::Server down after it.
///
///   RelayService relay(channel, {});
///   builder.RegisterService(&relay);
class RelayService final : public v1::Scheduler::CallbackService {
 public:
  RelayService(std::shared_ptr<grpc::ChannelInterface> upstream,
               RelayServiceOptions options);
  ~RelayService() override;
  RelayService(const RelayService&) = delete;
  RelayService& operator=(const RelayService&) = delete;

  /// Idempotent.
  void Shutdown();

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const v1::RegisterRequest* request,
                                     v1::RegisterResponse* response) override;
  grpc::ServerWriteReactor<v1::PlanUpdate>* StreamPlans(
      grpc::CallbackServerContext* context,
      const v1::StreamPlansRequest* request) override;
  grpc::ServerUnaryReactor* ReportTimings(grpc::CallbackServerContext* context,
                                          const v1::TimingReport* request,
                                          v1::ReportAck* response) override;
  grpc::ServerBidiReactor<v1::TimingReport, v1::ReportResult>* StreamReports(
      grpc::CallbackServerContext* context) override;
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
  template <typename Request, typename Response>
  using AsyncMethod = void (v1::Scheduler::Stub::async::*)(
      grpc::ClientContext*, const Request*, Response*,
      std::function<void(grpc::Status)>);

  /// Forwards one unary call.
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Forward(grpc::CallbackServerContext* context,
                                    const Request* request, Response* response,
                                    AsyncMethod<Request, Response> method);

  std::unique_ptr<v1::Scheduler::Stub> stub_;
  std::unique_ptr<RelayCore> core_;
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_RELAY_RELAY_SERVICE_H_
