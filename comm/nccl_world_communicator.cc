#include "comm/nccl_world_communicator.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dcp {

absl::StatusOr<std::unique_ptr<WorldCommunicator>>
NcclWorldCommunicator::Create(const CommKey& world, int my_rank,
                              const std::string& prefix,
                              RendezvousStoreInterface* store,
                              const NcclCommunicator::Options& options) {
  RETURN_IF_ERROR(world.Validate());
  if (world.GroupRank(my_rank) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", my_rank, " is not a member of the world ",
                     world.ToString(), " (left out of the epoch)"));
  }
  // NCCL ranks the members by their place in `world.ranks`: a shrunk
  // world's survivors are renumbered densely, as SplitGroupFormer expects.
  ASSIGN_OR_RETURN(
      std::unique_ptr<NcclCommunicator> comm,
      NcclCommunicator::Create(world, my_rank, prefix, store, options));
  return std::unique_ptr<WorldCommunicator>(
      new NcclWorldCommunicator(std::move(comm), options));
}

absl::Status NcclWorldCommunicator::AllReduceSumHost(float* data,
                                                     size_t count) {
  return comm_->AllReduceSumHost(data, count);
}

absl::StatusOr<std::unique_ptr<Communicator>> NcclWorldCommunicator::Split(
    int color, int key) {
  ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> child,
                   NcclCommunicator::Split(*comm_, color, key, options_));
  return std::unique_ptr<Communicator>(std::move(child));
}

}  // namespace dcp
