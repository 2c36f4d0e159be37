#include "scheduler/server/scheduler_server.h"

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_credentials.h"
#include "common/status_macros.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/server_interceptor.h"
#include "scheduler/server/scheduler_service.h"

namespace dcp {
namespace {

using RpcDoneCallback =
    std::function<void(absl::string_view, absl::StatusCode)>;

/// The readiness names of the health service, besides "".
constexpr char kSchedulerHealthService[] = "dcp.v1.Scheduler";

/// Reports the status a unary RPC ends with to `SchedulerServerOptions::
/// on_rpc_done`; one per RPC.
class RpcDoneInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcDoneInterceptor(std::string method, const RpcDoneCallback* on_done)
      : method_(std::move(method)), on_done_(on_done) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      (*on_done_)(method_, static_cast<absl::StatusCode>(
                               methods->GetSendStatus().error_code()));
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  const RpcDoneCallback* const on_done_;
};

class RpcDoneInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcDoneInterceptorFactory(const RpcDoneCallback* on_done)
      : on_done_(on_done) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    // Streams are left alone: every message of an intercepted stream goes
    // through the interceptor, and the plan streams are the hot path.
    if (info->type() != grpc::experimental::ServerRpcInfo::Type::UNARY) {
      return nullptr;
    }
    // So are health checks: a probe every few seconds is no scheduler RPC.
    const absl::string_view full = info->method();
    if (absl::StartsWith(full, "/grpc.health.v1.Health/")) return nullptr;
    // "/dcp.v1.Scheduler/ReportTimings" -> "ReportTimings".
    const size_t slash = full.rfind('/');
    return new RpcDoneInterceptor(
        std::string(slash == absl::string_view::npos ? full
                                                     : full.substr(slash + 1)),
        on_done_);
  }

 private:
  const RpcDoneCallback* const on_done_;
};

/// The service's options: the fan-out pool, and the answers of report
/// streams and the ends of plan streams going to `on_rpc_done` under their
/// methods' names.
SchedulerServiceOptions ServiceOptions(const SchedulerServerOptions& options,
                                       CallAuthenticator authenticator) {
  SchedulerServiceOptions service;
  service.authenticator = std::move(authenticator);
  service.on_refused = options.on_refused;
  service.fanout_threads = options.fanout_threads;
  if (options.on_rpc_done) {
    const RpcDoneCallback* on_done = &options.on_rpc_done;
    service.on_stream_rpc = [on_done](absl::string_view method,
                                      absl::StatusCode code) {
      (*on_done)(method, code);
    };
  }
  return service;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SchedulerServer>> SchedulerServer::Start(
    SchedulerServerOptions options) {
  if (options.listen_address.empty()) {
    return absl::InvalidArgumentError("listen address is empty");
  }
  if (options.fanout_threads < -1) {
    return absl::InvalidArgumentError(
        "fanout_threads must be -1 (auto), 0 (none) or a thread count");
  }
  if (options.control_plane.max_message_bytes > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError("max_message_bytes must be <= 1 GiB");
  }
  // Before anything starts: bad security options or files fail at once.
  ASSIGN_OR_RETURN(
      ServerSecurity security,
      MakeServerSecurity(options.security, options.listen_address));
  ControlPlaneOptions cp_options = std::move(options.control_plane);
  options.control_plane = ControlPlaneOptions();
  const int max_message_bytes = static_cast<int>(cp_options.max_message_bytes);
  ASSIGN_OR_RETURN(std::unique_ptr<ControlPlane> control_plane,
                   ControlPlane::Start(std::move(cp_options)));
  std::unique_ptr<SchedulerServer> server(
      new SchedulerServer(std::move(options), std::move(control_plane),
                          std::move(security.authenticator)));
  server->security_ = security.description;

  // libgrpc++'s health service (grpc.health.v1.Health) in every server
  // built from here on: a process-wide switch, and the only way to it, as
  // the service's class is not in the installed headers.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(server->options_.listen_address,
                           security.credentials, &server->port_);
  builder.RegisterService(server->service_.get());
  builder.SetMaxReceiveMessageSize(max_message_bytes);
  // A second scheduler on a fixed port must fail, not share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (server->options_.keepalive > absl::ZeroDuration()) {
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                               static_cast<int>(absl::ToInt64Milliseconds(
                                   server->options_.keepalive)));
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  if (server->options_.on_rpc_done) {
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(std::make_unique<RpcDoneInterceptorFactory>(
        &server->options_.on_rpc_done));
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
  }
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    server->control_plane_->Shutdown();
    const bool tls = !server->options_.security.tls_cert.empty();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on '", server->options_.listen_address,
                     "' (address in use or not local?",
                     tls ? " Or the TLS certificate and key do not load: is "
                           "--tls_key the key "
                           "of --tls_cert?)"
                         : ")"));
  }
  RETURN_IF_ERROR(server->StartHealth());
  return server;
}

absl::Status SchedulerServer::StartHealth() {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) {
    return absl::InternalError("the gRPC server has no health service");
  }
  health->SetServingStatus("", true);
  health->SetServingStatus(kSchedulerHealthService, true);
  health->SetServingStatus(kLivenessHealthService, true);
  health_watcher_ = std::thread([this, health] {
    // Returns once planning can go no further: a drain or stop was asked
    // for, the last of `max_steps` was planned, planning failed, or the
    // control plane shut down. A resumed job that is already drained
    // returns at once.
    control_plane_->AwaitPlanned(std::numeric_limits<int64_t>::max(),
                                 absl::InfiniteDuration());
    // The service first: whoever sees the server ("") not serving then
    // finds the service not serving either.
    health->SetServingStatus(kSchedulerHealthService, false);
    health->SetServingStatus("", false);
  });
  return absl::OkStatus();
}

SchedulerServer::SchedulerServer(SchedulerServerOptions options,
                                 std::unique_ptr<ControlPlane> control_plane,
                                 CallAuthenticator authenticator)
    : options_(std::move(options)),
      control_plane_(std::move(control_plane)),
      service_(std::make_unique<SchedulerService>(
          control_plane_.get(),
          ServiceOptions(options_, std::move(authenticator)))) {}

SchedulerServer::~SchedulerServer() { Shutdown(); }

std::string SchedulerServer::address() const {
  const std::string& listen = options_.listen_address;
  const size_t colon = listen.rfind(':');
  const std::string host =
      colon == std::string::npos ? listen : listen.substr(0, colon);
  return absl::StrCat(host, ":", port_);
}

void SchedulerServer::Wait() {
  control_plane_->WaitForStop(options_.stop_grace);
}

void SchedulerServer::Shutdown() {
  absl::MutexLock lock(&shutdown_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  // Ends the plan and report streams first: gRPC's Shutdown waits for open
  // calls.
  control_plane_->Shutdown();
  // Woken by the control plane's shutdown; done before the gRPC server
  // (and its health service) goes.
  if (health_watcher_.joinable()) health_watcher_.join();
  service_->Shutdown();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(options_.shutdown_grace));
    server_->Wait();
  }
}

}  // namespace dcp
