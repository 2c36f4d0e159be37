#include "worker_agent/agent_service.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"

namespace dcp {
namespace {

/// One NextStep call: waits in the agent (never on a gRPC thread) and
/// finishes exactly once, from the agent's answer or from a cancellation
/// that withdrew the wait first.
class NextStepReactor final : public grpc::ServerUnaryReactor {
 public:
  NextStepReactor(Agent* agent, v1::NextStepResponse* response)
      : agent_(agent), response_(response) {}

  void Begin(int64_t after_step, absl::Time deadline) {
    const int64_t id = agent_->NextStepAsync(
        after_step, deadline,
        [this](absl::StatusOr<NextStepResult> result) { Answer(result); });
    absl::MutexLock lock(&mu_);
    waiter_ = id;
  }

  void OnCancel() override {
    int64_t id = 0;
    {
      absl::MutexLock lock(&mu_);
      id = waiter_;
    }
    // 0: answered inline. Otherwise only the side that removes the wait
    // finishes the call.
    if (id != 0 && agent_->CancelNextStep(id)) {
      Finish(ToGrpcStatus(
          absl::CancelledError("NextStep cancelled by the client")));
    }
  }

  void OnDone() override { delete this; }

 private:
  void Answer(const absl::StatusOr<NextStepResult>& result) {
    if (!result.ok()) {
      Finish(ToGrpcStatus(result.status()));
      return;
    }
    response_->set_drained(result->drained);
    if (!result->drained) *response_->mutable_step() = result->step;
    Finish(grpc::Status::OK);
  }

  Agent* const agent_;
  v1::NextStepResponse* const response_;
  absl::Mutex mu_;
  int64_t waiter_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

AgentService::AgentService(Agent* agent, absl::Duration max_wait)
    : agent_(agent), max_wait_(max_wait) {}

grpc::ServerUnaryReactor* AgentService::NextStep(
    grpc::CallbackServerContext* context, const v1::NextStepRequest* request,
    v1::NextStepResponse* response) {
  // The client's deadline is on the system clock; what is left of it is
  // counted from now on the agent's.
  absl::Duration wait = max_wait_;
  const auto client_deadline = context->deadline();
  if (client_deadline != std::chrono::system_clock::time_point::max()) {
    wait = std::min(wait, absl::FromChrono(client_deadline) - absl::Now());
  }
  const absl::Time deadline = agent_->clock()->Now() + wait;
  auto* reactor = new NextStepReactor(agent_, response);
  reactor->Begin(request->after_step(), deadline);
  return reactor;
}

grpc::ServerUnaryReactor* AgentService::ReportTimings(
    grpc::CallbackServerContext* context, const v1::TimingReport* request,
    v1::AgentAck* /*response*/) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  agent_->ReportTimingsAsync(*request, [reactor](absl::Status status) {
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

absl::StatusOr<std::unique_ptr<AgentServer>> AgentServer::Start(
    AgentServerOptions options) {
  if (options.agent == nullptr) {
    return absl::InvalidArgumentError("agent server: no agent");
  }
  std::string path(absl::StripPrefix(options.socket_path, "unix:"));
  if (path.empty()) {
    return absl::InvalidArgumentError("agent server: socket_path is empty");
  }
  if (options.max_wait <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("agent server: max_wait must be > 0");
  }
  struct stat info;
  if (lstat(path.c_str(), &info) == 0) {
    if (!S_ISSOCK(info.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("agent server: '", path,
                       "' exists and is not a socket; not "
                       "replacing it"));
    }
    unlink(path.c_str());  // A stale socket of an earlier agent.
  }
  std::unique_ptr<AgentServer> server(
      new AgentServer(std::move(options), absl::StrCat("unix:", path)));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(server->address_, grpc::InsecureServerCredentials());
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("agent server: cannot listen on '", server->address_,
                     "' (directory missing or not writable, or path too long "
                     "for a Unix socket?)"));
  }
  return server;
}

AgentServer::AgentServer(AgentServerOptions options, std::string address)
    : options_(std::move(options)),
      address_(std::move(address)),
      service_(
          std::make_unique<AgentService>(options_.agent, options_.max_wait)) {}

AgentServer::~AgentServer() { Shutdown(); }

void AgentServer::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(options_.shutdown_grace));
    server_->Wait();
    unlink(std::string(absl::StripPrefix(address_, "unix:")).c_str());
  }
}

}  // namespace dcp
