#ifndef DCP_EXAMPLES_RENDEZVOUS_RANKS_H_
#define DCP_EXAMPLES_RENDEZVOUS_RANKS_H_

// Rank processes that meet without a planning scheduler: a SchedulerServer
// serves only its rendezvous store, and each rank forms its c10d groups
// through it. What dcp-train-bench and the training tests share.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/process_groups.h"
#include "comm/scheduler_rendezvous_store.h"
#include "common/model_spec.h"
#include "scheduler/server/scheduler_server.h"

namespace dcp::examples {

/// A SchedulerServer on 127.0.0.1:0 for `world` ranks of session `session`
/// whose only use is its rendezvous store: no planner thread; `model` and
/// `window` only fill in the options it checks.
absl::StatusOr<std::unique_ptr<SchedulerServer>> StartRendezvousServer(
    int world, const std::string& session, const ModelSpec& model,
    int64_t window);

/// One rank's groups over the store at `address`. Move-only; the store
/// outlives the groups that use it (members are destroyed in reverse).
struct RankGroups {
  std::unique_ptr<SchedulerRendezvousStore> store;
  std::unique_ptr<ProcessGroups> groups;
};

/// Connects rank `rank` of session `session` to the store at `address`;
/// `timeout` bounds the groups' formation and collectives.
absl::StatusOr<RankGroups> ConnectRankGroups(const std::string& address,
                                             const std::string& session,
                                             int rank, absl::Duration timeout);

}  // namespace dcp::examples

#endif  // DCP_EXAMPLES_RENDEZVOUS_RANKS_H_
