#include "tests/rank_processes.h"

#include <unistd.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "common/model_spec.h"
#include "grpcpp/grpcpp.h"

namespace dcp::testing_ranks {

std::string SelfPath() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, n) : "";
}

absl::StatusOr<std::unique_ptr<SchedulerServer>> StartRendezvousServer(
    int world, const std::string& session) {
  SchedulerServerOptions options;
  ControlPlaneOptions& cp = options.control_plane;
  cp.lengths = std::vector<int32_t>(64, 1024);
  cp.window = 4096;
  absl::StatusOr<ModelSpec> model = BuiltinModel("llama3-8b");
  if (!model.ok()) return model.status();
  cp.model = *model;
  cp.world_size = world;
  cp.tokens_per_step = 8192;
  cp.session_id = session;
  cp.start_planner_thread = false;  // Only the store is used.
  options.shutdown_grace = absl::Milliseconds(200);
  return SchedulerServer::Start(std::move(options));
}

absl::StatusOr<RankGroups> ConnectRankGroups(const std::string& address,
                                             const std::string& session,
                                             int rank, absl::Duration timeout) {
  RankGroups out;
  SchedulerRendezvousStore::Options store_options;
  store_options.session_id = session;
  absl::StatusOr<std::unique_ptr<SchedulerRendezvousStore>> store =
      SchedulerRendezvousStore::Create(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials()),
          store_options);
  if (!store.ok()) return store.status();
  out.store = *std::move(store);
  ProcessGroups::Options group_options;
  group_options.rank = rank;
  group_options.timeout = timeout;
  absl::StatusOr<std::unique_ptr<ProcessGroups>> groups =
      ProcessGroups::Create(out.store.get(), group_options);
  if (!groups.ok()) return groups.status();
  out.groups = *std::move(groups);
  return out;
}

}  // namespace dcp::testing_ranks
