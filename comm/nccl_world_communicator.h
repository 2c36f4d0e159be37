#ifndef DCP_COMM_NCCL_WORLD_COMMUNICATOR_H_
#define DCP_COMM_NCCL_WORLD_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "comm/comm_key.h"
#include "comm/nccl_communicator.h"
#include "comm/rendezvous_store.h"
#include "comm/world_communicator.h"

namespace dcp {

/// The NCCL world of one epoch that `SplitGroupFormer` splits groups from:
/// an `NcclCommunicator` of the epoch's members (every rank of the job, or
/// after a shrink the ranks not failed), formed through a rendezvous store,
/// whose `Split` is `ncclCommSplit`. NCCL numbers the members densely:
/// `rank()` is this member's index in the world's ranks (in the world of
/// [0, 2, 3], global rank 3 is rank 2). The groups split off use the world's
/// device and `options` (each its own stream); they do not share the
/// world's resources (`splitShare` stays off), so they outlive it.
///
/// Without CUDA, `Create` returns UNIMPLEMENTED (NcclCommunicator's stub).
/// Thread-compatible like any communicator.
///
///   ASSIGN_OR_RETURN(CommKey world, CommKey::Make(members, epoch));
///   ASSIGN_OR_RETURN(std::unique_ptr<WorldCommunicator> comm,
///                    NcclWorldCommunicator::Create(world, rank,
///                                                  "s/e3/world/", store,
///                                                  options));
class NcclWorldCommunicator final : public WorldCommunicator {
 public:
  /// `NcclCommunicator::Create` of `world` (the epoch's members, ascending
  /// global ranks) as global rank `my_rank`; INVALID_ARGUMENT for a
  /// malformed key or a rank outside it.
  static absl::StatusOr<std::unique_ptr<WorldCommunicator>> Create(
      const CommKey& world, int my_rank, const std::string& prefix,
      RendezvousStoreInterface* store,
      const NcclCommunicator::Options& options);

  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  absl::Status AllReduceSumHost(float* data, size_t count) override;
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color,
                                                      int key) override;
  void Abort() override { comm_->Abort(); }

 private:
  NcclWorldCommunicator(std::unique_ptr<NcclCommunicator> comm,
                        const NcclCommunicator::Options& options)
      : comm_(std::move(comm)), options_(options) {}

  const std::unique_ptr<NcclCommunicator> comm_;
  const NcclCommunicator::Options options_;
};

}  // namespace dcp

#endif  // DCP_COMM_NCCL_WORLD_COMMUNICATOR_H_
