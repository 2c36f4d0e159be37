#include "examples/rendezvous_ranks.h"

#include <utility>
#include <vector>

#include "grpcpp/grpcpp.h"

namespace dcp::examples {

absl::StatusOr<std::unique_ptr<SchedulerServer>> StartRendezvousServer(
    int world, const std::string& session, const ModelSpec& model,
    int64_t window) {
  SchedulerServerOptions options;
  ControlPlaneOptions& cp = options.control_plane;
  cp.lengths = std::vector<int32_t>(64, static_cast<int32_t>(window));
  cp.window = window;
  cp.model = model;
  cp.world_size = world;
  cp.tokens_per_step = 2 * window;
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

}  // namespace dcp::examples
