#ifndef DCP_TESTS_RANK_PROCESSES_H_
#define DCP_TESTS_RANK_PROCESSES_H_

// What the training tests share to run ranks as processes (testonly): the
// test binary re-runs itself as each rank, the ranks form their groups
// through the rendezvous store of a SchedulerServer the test serves on
// 127.0.0.1:0.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/scheduler_rendezvous_store.h"
#include "scheduler/server/scheduler_server.h"
#include "train/process_groups.h"

namespace dcp::testing_ranks {

/// This process's binary (/proc/self/exe), for re-running it as a rank;
/// empty when it cannot be read.
std::string SelfPath();

/// A SchedulerServer on 127.0.0.1:0 for `world` ranks of session `session`
/// whose only use is its rendezvous store: no planner thread, a placeholder
/// model and trace.
absl::StatusOr<std::unique_ptr<SchedulerServer>> StartRendezvousServer(
    int world, const std::string& session);

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

}  // namespace dcp::testing_ranks

#endif  // DCP_TESTS_RANK_PROCESSES_H_
