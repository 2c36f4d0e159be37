#ifndef DCP_COMM_COMMUNICATOR_H_
#define DCP_COMM_COMMUNICATOR_H_

#include <cstddef>

#include "absl/status/status.h"

namespace dcp {

/// The collectives of one communicator group, as a trainer runs them.
///
/// The interface, its implementations (Gloo, NCCL) and the cache that owns
/// formed groups all live in comm/, so that both the agent and the client
/// library can hand a group to a training loop.
///
/// Every collective is synchronous and must be called by all `size()` members
/// of the group in the same order. Errors come back as a status, never as an
/// exception: DEADLINE_EXCEEDED when a peer did not take part in time,
/// UNAVAILABLE when the transport failed, ABORTED after `Abort()`. After an
/// error the communicator is unusable; build a new one.
///
/// Thread-compatible: one thread at a time runs collectives; `Abort()` may be
/// called from any thread at any time. Owned through `std::unique_ptr`
/// (non-copyable, non-movable).
///
/// Pointers are host memory for CPU communicators (Gloo) and device memory
/// on the communicator's device for GPU communicators (NCCL).
class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  /// This member's rank within the group, in [0, size()).
  virtual int rank() const = 0;
  /// Number of members of the group.
  virtual int size() const = 0;

  /// `send` holds size() blocks of `count_per_peer` floats, block j for rank
  /// j; on return block i of `recv` holds what rank i sent to this rank.
  /// `send` and `recv` must not overlap.
  virtual absl::Status AllToAll(const float* send, float* recv,
                                size_t count_per_peer) = 0;

  /// In place: `data[i]` becomes the sum of `data[i]` over all members.
  virtual absl::Status AllReduceSum(float* data, size_t count) = 0;

  /// Returns once every member has entered the barrier.
  virtual absl::Status Barrier() = 0;

  /// Tears the communicator down so that peers blocked on it fail instead of
  /// hanging; every later call returns ABORTED. Idempotent.
  virtual void Abort() = 0;

 protected:
  Communicator() = default;
};

/// Whether a step's error says a peer is gone (UNAVAILABLE,
/// DEADLINE_EXCEEDED, INTERNAL or CANCELLED, from a collective or from
/// forming a group) rather than that the rank could not run its plan: what
/// the agent and a client_lib trainer answer by moving on to the next epoch.
inline bool IsPeerLoss(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) ||
         absl::IsInternal(status) || absl::IsCancelled(status);
}

}  // namespace dcp

#endif  // DCP_COMM_COMMUNICATOR_H_
