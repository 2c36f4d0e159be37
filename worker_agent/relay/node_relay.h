#ifndef DCP_WORKER_AGENT_RELAY_NODE_RELAY_H_
#define DCP_WORKER_AGENT_RELAY_NODE_RELAY_H_

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/security_options.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace dcp {

class RelayService;

/// Configuration of a `NodeRelay`.
struct NodeRelayOptions {
  /// Where the node's agents reach the relay: a Unix socket
  /// ("unix:/run/dcp/relay.sock") or a loopback "host:port" (port 0 picks
  /// one, see `port()`). Plaintext and local only: whoever may open it acts
  /// for the node's ranks, as with the agent's own serve socket.
  std::string listen_address;
  /// The scheduler, as an agent's --scheduler would name it.
  std::string scheduler_address;
  /// How the relay reaches the scheduler: its TLS files, bearer token and
  /// job id, sent with every upstream call in place of the agents' own.
  SecurityOptions upstream_security;
  /// See `RelayServiceOptions::gather_window`.
  absl::Duration gather_window = absl::Milliseconds(20);
  /// See `RelayServiceOptions::report_linger`.
  absl::Duration report_linger = absl::Milliseconds(5);
  /// Largest message accepted from either side, in bytes (a plan's step).
  int max_message_bytes = 64 << 20;
  /// null: the real clock.
  Clock* clock = nullptr;
};

/// dcp-node-relay's server: a `RelayService` on `listen_address` in front
/// of the scheduler (see relay_service.h for what it relays and how).
/// Agents need no change but `--scheduler=<listen_address>`.
///
/// Thread-safe. Move-only handle; destroying it shuts it down.
///
///   NodeRelayOptions options;
///   options.listen_address = "unix:/run/dcp/relay.sock";
///   options.scheduler_address = "scheduler.example:50051";
///   ASSIGN_OR_RETURN(std::unique_ptr<NodeRelay> relay,
///                    NodeRelay::Start(std::move(options)));
///   relay->Wait();
class NodeRelay {
 public:
  /// INVALID_ARGUMENT for an empty or non-local listen address, an empty
  /// scheduler address or bad security options (naming the problem);
  /// UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<NodeRelay>> Start(
      NodeRelayOptions options);
  ~NodeRelay();
  NodeRelay(const NodeRelay&) = delete;
  NodeRelay& operator=(const NodeRelay&) = delete;

  /// The TCP port bound (0 for a Unix socket).
  int port() const { return port_; }
  /// Ends the agents' streams with UNAVAILABLE and the upstream calls, then
  /// stops serving. Idempotent; any thread.
  void Shutdown();
  /// Blocks until `Shutdown`.
  void Wait();

 private:
  NodeRelay() = default;

  std::unique_ptr<RelayService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::once_flag shutdown_;
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_RELAY_NODE_RELAY_H_
