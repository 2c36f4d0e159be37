#ifndef DCP_SCHEDULER_SERVER_SCHEDULER_SERVER_H_
#define DCP_SCHEDULER_SERVER_SCHEDULER_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/security_options.h"
#include "scheduler/control/control_plane.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace dcp {

class CallAuthenticator;

class SchedulerService;

/// The health service name (grpc.health.v1.Health) that stays SERVING for
/// as long as the server runs, drain or not: what a liveness probe asks
/// for. "" and "dcp.v1.Scheduler" are the readiness names; see
/// `SchedulerServer`.
inline constexpr char kLivenessHealthService[] = "liveness";

/// Configuration of a `SchedulerServer`.
struct SchedulerServerOptions {
  /// Where to listen, "host:port"; port 0 picks a free port (see `port()`).
  std::string listen_address = "127.0.0.1:0";
  /// How the port is secured (common/security_options.h): TLS or mutual
  /// TLS, a bearer token and a job id that every request must carry. The
  /// default, plaintext, is only allowed on a loopback `listen_address`
  /// (else `insecure`).
  SecurityOptions security;
  /// Called for each request refused for its token or job id, with the
  /// method's short name and the refusal, for logs; on gRPC threads: quick,
  /// thread-safe, never blocking. May be empty.
  std::function<void(absl::string_view method, const absl::Status& status)>
      on_refused;
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
  /// Called as each unary RPC ends, with the method's short name (e.g.
  /// "ReportTimings") and the status code it ends with (gRPC's codes are
  /// absl's), for metrics; also once per report answered on a report
  /// stream ("StreamReports", or "StreamNodeReports" for a node's batch)
  /// with the report's status, and once per plan-stream call as it ends
  /// ("StreamPlans", "StreamNodePlans"; the messages of the plan streams,
  /// the latency-critical path, stay uninstrumented).
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
/// It also serves the standard gRPC health checking protocol
/// (grpc.health.v1.Health, libgrpc++'s default service, which Kubernetes'
/// `grpc:` probes call), without the token and job id check: the answers
/// say no more than whether the port takes work. The service names:
///   - "" and "dcp.v1.Scheduler" (readiness): SERVING from the moment the
///     server listens, which is before the start-up profile (agents must
///     register to answer it) and after a resumed job is loaded;
///     NOT_SERVING once a drain or stop was asked for (dcp-ctl, a signal,
///     the `max_steps`th step planned) or planning failed, and after
///     `Shutdown`. Open plan streams go on delivering meanwhile.
///   - `kLivenessHealthService`: SERVING until `Shutdown`.
/// Any other name is NOT_FOUND.
///
/// Thread-safe. Owns the control plane and the gRPC server; the destructor
/// shuts down. Its header carries no gRPC types.
class SchedulerServer {
 public:
  /// Starts the control plane and the gRPC server. INVALID_ARGUMENT for
  /// bad options (plaintext on a non-loopback address without
  /// `security.insecure` among them), NOT_FOUND for a certificate, key or
  /// token file that cannot be read, UNAVAILABLE when the address cannot be
  /// bound.
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
  /// How the port is secured, for logs, e.g. "mutual TLS, bearer token, job
  /// 'a'" or "plaintext (loopback)".
  const std::string& security() const { return security_; }

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
                  std::unique_ptr<ControlPlane> control_plane,
                  CallAuthenticator authenticator);

  /// Marks the health service names SERVING and starts `health_watcher_`.
  absl::Status StartHealth();

  const SchedulerServerOptions options_;
  int port_ = 0;
  std::string security_;
  // Destroyed in reverse order: the gRPC server (whose calls use the
  // services and the control plane) first.
  std::unique_ptr<ControlPlane> control_plane_;
  /// What the gRPC server serves, each call's token and job id checked.
  std::unique_ptr<SchedulerService> service_;
  std::unique_ptr<grpc::Server> server_;
  /// Waits for the drain (or stop, planning error, shutdown) and turns the
  /// readiness names NOT_SERVING; joined by `Shutdown` before the gRPC
  /// server stops.
  std::thread health_watcher_;

  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_SERVER_SCHEDULER_SERVER_H_
