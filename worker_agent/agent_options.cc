#include "worker_agent/agent_options.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dcp {

absl::Status CheckAgentOptions(const AgentOptions& o) {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("agent options: ", what));
  };
  if (o.scheduler_address.empty()) return bad("scheduler_address is empty");
  if (o.rank < 0) return bad(absl::StrCat("rank must be >= 0, not ", o.rank));
  if (o.world_size < 0) return bad("world_size must be >= 0 (0 = any)");
  if (o.world_size > 0 && o.rank >= o.world_size) {
    return bad(absl::StrCat("rank ", o.rank, " is outside the world of ",
                            o.world_size));
  }
  if (o.prefetch_depth < 1) return bad("prefetch_depth must be at least 1");
  if (o.max_outage < absl::ZeroDuration()) {
    return bad("max_outage must be >= 0");
  }
  if (o.max_pending_reports < 0) {
    return bad("max_pending_reports must be >= 0");
  }
  if (o.max_reconnect_attempts < 0) {
    return bad("max_reconnect_attempts must be >= 0");
  }
  if (o.world_timeout < absl::ZeroDuration()) {
    return bad("world_timeout must be >= 0");
  }
  if (o.rendezvous_timeout <= absl::ZeroDuration() ||
      o.connect_timeout <= absl::ZeroDuration() ||
      o.rpc_timeout <= absl::ZeroDuration() ||
      o.initial_backoff <= absl::ZeroDuration() ||
      o.max_backoff < o.initial_backoff) {
    return bad(
        "timeouts and backoffs must be positive and max_backoff >= "
        "initial_backoff");
  }
  return absl::OkStatus();
}

absl::Duration GroupFormTimeout(const AgentOptions& options,
                                int64_t registered_epoch, int64_t epoch) {
  if (epoch <= registered_epoch) return options.rendezvous_timeout;
  return options.world_timeout > absl::ZeroDuration()
             ? options.world_timeout
             : 3 * options.rendezvous_timeout;
}

}  // namespace dcp
