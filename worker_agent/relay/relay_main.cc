// dcp-node-relay: one per node, in front of the dcp-scheduler for the
// node's dcp-agents. The agents point --scheduler at it; their per-rank
// plan streams go upstream as StreamNodePlans calls (the ranks that start
// together share one), their report streams as one StreamNodeReports call,
// and the unary calls as they are: the scheduler writes a step once per
// node instead of once per rank.
//
//   dcp-node-relay --listen=unix:/run/dcp/relay.sock
//     --scheduler=scheduler.example:50051 --tls_ca=/etc/dcp/ca.crt
//     --auth_token_file=/etc/dcp/token --job_id=llama-70b-run-7
//   dcp-agent --scheduler=unix:/run/dcp/relay.sock --rank=3 ...
//
// The security flags (common/security_flags.h) secure the upstream
// connection: the relay calls the scheduler with its own credentials. The
// local side is plaintext on a Unix socket or loopback only; whoever may
// open the socket acts for the node's ranks.
//
// SIGINT/SIGTERM: the agents' streams end with UNAVAILABLE (they reconnect
// to the relay's next incarnation as to a restarted scheduler) and it exits.

#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/file_util.h"
#include "common/grpc_credentials.h"
#include "common/security_flags.h"
#include "common/signal_watcher.h"
#include "common/status_macros.h"
#include "worker_agent/relay/node_relay.h"

ABSL_FLAG(std::string, listen, "",
          "Where the node's agents reach the relay: unix:PATH or a loopback "
          "HOST:PORT (port 0: any, see --port_file).");
ABSL_FLAG(std::string, scheduler, "", "The dcp-scheduler's HOST:PORT.");
ABSL_FLAG(std::string, port_file, "",
          "Write the bound TCP port here once serving (for --listen=...:0).");
ABSL_FLAG(absl::Duration, gather_window, absl::Milliseconds(20),
          "Plan subscriptions arriving within this long of each other share "
          "one upstream StreamNodePlans call.");
ABSL_FLAG(absl::Duration, report_linger, absl::Milliseconds(5),
          "The node's reports go upstream as one batch once each agent's "
          "report stream has reported the earliest queued step, or when the "
          "oldest has waited this long (a lagging or silent agent holds the "
          "others no longer).");

namespace dcp {
namespace {

absl::Status Run() {
  NodeRelayOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.scheduler_address = absl::GetFlag(FLAGS_scheduler);
  options.upstream_security = SecurityOptionsFromFlags();
  options.gather_window = absl::GetFlag(FLAGS_gather_window);
  if (options.gather_window < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--gather_window must not be negative");
  }
  options.report_linger = absl::GetFlag(FLAGS_report_linger);
  if (options.report_linger < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--report_linger must not be negative");
  }
  SignalWatcher::BlockSignals();
  ASSIGN_OR_RETURN(std::unique_ptr<NodeRelay> relay, NodeRelay::Start(options));
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    RETURN_IF_ERROR(WriteFileAtomically(absl::GetFlag(FLAGS_port_file),
                                        absl::StrCat(relay->port(), "\n")));
  }
  std::fprintf(stderr, "dcp-node-relay: serving %s%s for %s (%s)\n",
               options.listen_address.c_str(),
               relay->port() > 0
                   ? absl::StrCat(" (port ", relay->port(), ")").c_str()
                   : "",
               options.scheduler_address.c_str(),
               DescribeChannelSecurity(options.upstream_security).c_str());
  NodeRelay* r = relay.get();
  SignalWatcher watcher([r](int signal, int count) {
    if (count > 1) return;
    std::fprintf(stderr, "dcp-node-relay: signal %d, stopping\n", signal);
    r->Shutdown();
  });
  relay->Wait();
  return absl::OkStatus();
}

}  // namespace
}  // namespace dcp

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(absl::StrCat(
      "The dcp node relay: a node's agents reach the scheduler through it.\n"
      "  dcp-node-relay --listen=unix:PATH|127.0.0.1:PORT "
      "--scheduler=HOST:PORT\n"
      "    [--port_file=FILE] [--gather_window=20ms] [--report_linger=5ms]\n",
      dcp::kSecurityFlagsUsage));
  absl::ParseCommandLine(argc, argv);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const absl::Status status = dcp::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "dcp-node-relay: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
