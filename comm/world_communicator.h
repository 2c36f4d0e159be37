#ifndef DCP_COMM_WORLD_COMMUNICATOR_H_
#define DCP_COMM_WORLD_COMMUNICATOR_H_

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace dcp {

/// A communicator of every rank of the world that groups are split from,
/// as `SplitGroupFormer` uses it: NCCL's (`NcclWorldCommunicator`) in a
/// job, a fake one (`FakeWorld`) in tests that run the split logic on the
/// CPU.
///
/// Like `Communicator`: collectives must be called by every rank in the
/// same order; thread-compatible, `Abort()` from any thread at any time;
/// after an error the world is unusable. Owned through `std::unique_ptr`.
class WorldCommunicator {
 public:
  /// Color of a rank that takes part in a `Split` but joins no group.
  static constexpr int kNoColor = -1;

  virtual ~WorldCommunicator() = default;
  WorldCommunicator(const WorldCommunicator&) = delete;
  WorldCommunicator& operator=(const WorldCommunicator&) = delete;

  /// This rank's global rank, in [0, size()).
  virtual int rank() const = 0;
  virtual int size() const = 0;

  /// In place: `data[i]` becomes the sum over every rank. `data` is host
  /// memory (control data; NCCL copies it through the device).
  virtual absl::Status AllReduceSumHost(float* data, size_t count) = 0;

  /// A collective of every rank (`ncclCommSplit`): the ranks passing the
  /// same `color` >= 0 form one new communicator, ranked by `key`; a rank
  /// passing kNoColor gets null. The new communicator does not depend on
  /// the world: it may outlive it.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Split(int color,
                                                              int key) = 0;

  /// Tears the world down so that peers blocked on it fail instead of
  /// hanging; later calls fail with ABORTED. Idempotent.
  virtual void Abort() = 0;

 protected:
  WorldCommunicator() = default;
};

}  // namespace dcp

#endif  // DCP_COMM_WORLD_COMMUNICATOR_H_
