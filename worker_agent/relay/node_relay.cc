#include "worker_agent/relay/node_relay.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/channel_arguments.h"
#include "worker_agent/relay/relay_service.h"

namespace dcp {
namespace {

absl::Status CheckOptions(const NodeRelayOptions& options) {
  if (options.listen_address.empty()) {
    return absl::InvalidArgumentError("relay: the listen address is empty");
  }
  if (!IsLoopbackAddress(options.listen_address)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "relay: listen address '", options.listen_address,
        "' is not local: the relay serves its node's agents in plaintext, "
        "on a Unix socket (unix:PATH) or a loopback address only"));
  }
  if (options.scheduler_address.empty()) {
    return absl::InvalidArgumentError("relay: the scheduler address is empty");
  }
  if (options.max_message_bytes <= 0) {
    return absl::InvalidArgumentError(
        "relay: max_message_bytes must be positive");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<NodeRelay>> NodeRelay::Start(
    NodeRelayOptions options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateSecureChannel(
      options.scheduler_address, options.upstream_security, std::move(args));
  if (!channel.ok()) {
    return absl::Status(channel.status().code(),
                        absl::StrCat("relay: ", channel.status().message()));
  }
  std::unique_ptr<NodeRelay> relay(new NodeRelay());
  relay->service_ = std::make_unique<RelayService>(
      *std::move(channel),
      RelayServiceOptions{options.gather_window, options.clock,
                          options.report_linger});
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address,
                           grpc::InsecureServerCredentials(), &relay->port_);
  builder.RegisterService(relay->service_.get());
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  relay->server_ = builder.BuildAndStart();
  if (relay->server_ == nullptr) {
    relay->service_->Shutdown();
    return absl::UnavailableError(
        absl::StrCat("relay: cannot listen on '", options.listen_address, "'"));
  }
  return relay;
}

NodeRelay::~NodeRelay() { Shutdown(); }

void NodeRelay::Shutdown() {
  if (server_ == nullptr) return;
  std::call_once(shutdown_, [this] {
    // The local streams end first, so the server's shutdown waits for none.
    service_->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::seconds(2));
  });
}

void NodeRelay::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace dcp
