#ifndef DCP_WORKER_AGENT_AGENT_SERVICE_H_
#define DCP_WORKER_AGENT_AGENT_SERVICE_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/agent_service.grpc.pb.h"
#include "worker_agent/agent.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace dcp {

/// The gRPC face of an `Agent` for the training process beside it
/// (`dcp.v1.Agent`, callback API). It only translates:
///
/// - `NextStep` never blocks a gRPC thread: it hands the request to
///   `Agent::NextStepAsync`, which answers at once when the step is queued
///   and otherwise later, from the agent's own thread, when the step
///   arrives, the job drains or the call's deadline (capped at `max_wait`)
///   passes. A call the client cancels is withdrawn from the agent
///   (`CancelNextStep`) and finished as CANCELLED.
/// - `ReportTimings` is forwarded with the scheduler stub's callback API
///   (`Agent::ReportTimingsAsync`) and finished from its completion.
///
/// Thread-safe. Does not own the agent, which must outlive the gRPC server
/// (shut the agent down first: that answers every waiting NextStep).
///
///   AgentService service(agent.get(), absl::Minutes(10));
///   builder.RegisterService(&service);
class AgentService final : public v1::Agent::CallbackService {
 public:
  /// `max_wait` bounds how long a NextStep waits when the client set no
  /// (or a later) deadline.
  AgentService(Agent* agent, absl::Duration max_wait);

  grpc::ServerUnaryReactor* NextStep(grpc::CallbackServerContext* context,
                                     const v1::NextStepRequest* request,
                                     v1::NextStepResponse* response) override;
  grpc::ServerUnaryReactor* ReportTimings(grpc::CallbackServerContext* context,
                                          const v1::TimingReport* request,
                                          v1::AgentAck* response) override;

 private:
  Agent* const agent_;
  const absl::Duration max_wait_;
};

/// Configuration of an `AgentServer`.
struct AgentServerOptions {
  /// The Unix-domain socket to serve on, as a path ("/run/dcp/agent.sock")
  /// or a gRPC address ("unix:/run/dcp/agent.sock"). A stale socket file is
  /// replaced. Required.
  std::string socket_path;
  /// The agent to serve. Required; not owned; must outlive the server.
  Agent* agent = nullptr;
  /// Longest NextStep wait (see `AgentService`).
  absl::Duration max_wait = absl::Minutes(10);
  /// How long `Shutdown` lets in-flight calls finish before cancelling them.
  absl::Duration shutdown_grace = absl::Seconds(2);
};

/// dcp-agent's sidecar server: an `AgentService` on a Unix-domain socket,
/// so only processes on the same host (with access to the file) reach it.
///
///   AgentServerOptions options;
///   options.socket_path = "/tmp/dcp-agent-3.sock";
///   options.agent = agent.get();
///   ASSIGN_OR_RETURN(std::unique_ptr<AgentServer> server,
///                    AgentServer::Start(options));
///   ... agent->WaitForDrainDelivered(...);
///   agent->Shutdown();
///   server->Shutdown();
///
/// Thread-safe; the destructor shuts down.
class AgentServer {
 public:
  /// INVALID_ARGUMENT for a missing path or agent; UNAVAILABLE when the
  /// socket cannot be bound.
  static absl::StatusOr<std::unique_ptr<AgentServer>> Start(
      AgentServerOptions options);

  ~AgentServer();
  AgentServer(const AgentServer&) = delete;
  AgentServer& operator=(const AgentServer&) = delete;

  /// The gRPC address clients connect to, "unix:/path".
  const std::string& address() const { return address_; }

  /// Stops serving (in-flight calls get `shutdown_grace`) and removes the
  /// socket file. Idempotent.
  void Shutdown();

 private:
  AgentServer(AgentServerOptions options, std::string address);

  const AgentServerOptions options_;
  const std::string address_;
  std::unique_ptr<AgentService> service_;
  std::unique_ptr<grpc::Server> server_;

  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_AGENT_SERVICE_H_
