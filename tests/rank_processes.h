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
#include "examples/rendezvous_ranks.h"
#include "scheduler/server/scheduler_server.h"

namespace dcp::testing_ranks {

/// This process's binary (/proc/self/exe), for re-running it as a rank;
/// empty when it cannot be read.
std::string SelfPath();

/// A SchedulerServer on 127.0.0.1:0 for `world` ranks of session `session`
/// whose only use is its rendezvous store: no planner thread, a placeholder
/// model and trace.
absl::StatusOr<std::unique_ptr<SchedulerServer>> StartRendezvousServer(
    int world, const std::string& session);

/// One rank's groups over a store (examples/rendezvous_ranks.h).
using examples::ConnectRankGroups;
using examples::RankGroups;

}  // namespace dcp::testing_ranks

#endif  // DCP_TESTS_RANK_PROCESSES_H_
