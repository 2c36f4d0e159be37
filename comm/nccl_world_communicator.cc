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
  if (world.ranks.front() != 0 ||
      world.ranks.back() != static_cast<int>(world.ranks.size()) - 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a world communicator holds ranks 0..n-1, not ", world.ToString()));
  }
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
