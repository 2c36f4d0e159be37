#ifndef DCP_SCHEDULER_SERVER_SCHEDULER_SERVER_H_
#define DCP_SCHEDULER_SERVER_SCHEDULER_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/control/control_plane.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace dcp {

class SchedulerService;

/// Configuration of a `SchedulerServer`.
struct SchedulerServerOptions {
  /// Where to listen, "host:port"; port 0 picks a free port (see `port()`).
  std::string listen_address = "127.0.0.1:0";
  /// The control plane it serves. Its `max_message_bytes` also bounds the
  /// messages the server accepts.
  ControlPlaneOptions control_plane;
  /// After a Drain with stop, how long `Wait` lets the plan streams deliver
  /// their last steps and drain message before it returns anyway.
  absl::Duration stop_grace = absl::Seconds(30);
  /// How long `Shutdown` lets in-flight RPCs finish before cancelling them.
  absl::Duration shutdown_grace = absl::Seconds(2);
  /// Threads that pump woken plan streams, off the planner thread
  /// (`SchedulerServiceOptions::fanout_threads`): -1 auto (a pool on hosts
  /// with 8 cores or more), 0 none, N threads.
  int fanout_threads = -1;
  /// Server-side keepalive pings on idle connections, so a vanished agent's
  /// stream ends instead of lingering. Zero disables them.
  absl::Duration keepalive = absl::Seconds(30);
  /// Called as each unary RPC ends (not StreamPlans: the plan streams, the
  /// latency-critical path, stay uninstrumented), with the method's short
  /// name (e.g. "ReportTimings") and the status code it ends with (gRPC's
  /// codes are absl's), for metrics; also once per report answered on a
  /// StreamReports stream, as "StreamReports" with the report's status.
  /// Runs on gRPC threads: thread-safe,
  /// quick, never blocking; whatever it uses must outlive the server.
  /// Empty: nothing is intercepted.
  std::function<void(absl::string_view method, absl::StatusCode code)>
      on_rpc_done;
};

/// dcp-scheduler's server: a `ControlPlane` behind the `dcp.v1.Scheduler`
/// gRPC service. The daemon's main parses flags into the options, starts
/// it, waits and shuts it down:
///
///   ASSIGN_OR_RETURN(std::unique_ptr<SchedulerServer> server,
///                    SchedulerServer::Start(std::move(options)));
///   std::printf("listening on %d\n", server->port());
///   server->Wait();      // until `dcp-ctl stop` has drained every stream
///   server->Shutdown();
///
/// Thread-safe. Owns the control plane and the gRPC server; the destructor
/// shuts down. Its header carries no gRPC types.
class SchedulerServer {
 public:
  /// Starts the control plane and the gRPC server. INVALID_ARGUMENT for
  /// bad options, UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<SchedulerServer>> Start(
      SchedulerServerOptions options);

  ~SchedulerServer();
  SchedulerServer(const SchedulerServer&) = delete;
  SchedulerServer& operator=(const SchedulerServer&) = delete;

  /// The bound port.
  int port() const { return port_; }
  /// The listen address with the bound port, e.g. "127.0.0.1:40123".
  std::string address() const;
  ControlPlane& control_plane() { return *control_plane_; }

  /// Blocks until the daemon should exit: a Drain with stop has ended every
  /// plan stream (or `stop_grace` passed since the stop), or `Shutdown` was
  /// called.
  void Wait();

  /// Ends the open plan streams with UNAVAILABLE, stops the gRPC server
  /// (in-flight calls get `shutdown_grace`) and the planner. Idempotent;
  /// concurrent callers return once it is done.
  void Shutdown();

 private:
  SchedulerServer(SchedulerServerOptions options,
                  std::unique_ptr<ControlPlane> control_plane);

  const SchedulerServerOptions options_;
  int port_ = 0;
  // Destroyed in reverse order: the gRPC server (whose calls use the
  // service and the control plane) first.
  std::unique_ptr<ControlPlane> control_plane_;
  std::unique_ptr<SchedulerService> service_;
  std::unique_ptr<grpc::Server> server_;

  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_SERVER_SCHEDULER_SERVER_H_
