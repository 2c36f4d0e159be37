#ifndef DCP_WORKER_AGENT_COMMUNICATOR_H_
#define DCP_WORKER_AGENT_COMMUNICATOR_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/communicator.h"

namespace dcp {

// `Communicator`, the interface every group implements, is declared in
// kernels/communicator.h so that kernels can run over it without depending on
// the agent; this header adds what the agent keys its groups by.

/// Identifies one formation of a communicator group: its members (global
/// ranks, sorted and distinct) and the epoch of the plan that formed it. A
/// group re-formed in a later epoch (after a failure or a re-plan) is a
/// different communicator.
///
/// Build keys with `Make`, which sorts and validates; `IsValid` tells whether
/// a key built by hand is well formed.
///
///   ASSIGN_OR_RETURN(CommKey key, CommKey::Make({3, 1, 2}, /*epoch=*/7));
///   // key.ranks == {1, 2, 3}
struct CommKey {
  std::vector<int> ranks;
  int64_t epoch = 0;

  /// Sorts `ranks`. INVALID_ARGUMENT when they are empty, negative or
  /// repeated, or the epoch is negative.
  static absl::StatusOr<CommKey> Make(std::vector<int> ranks, int64_t epoch);

  /// OK when `ranks` is non-empty, sorted, distinct and non-negative and
  /// `epoch` is non-negative; INVALID_ARGUMENT saying what is wrong otherwise.
  absl::Status Validate() const;

  /// The position of `global_rank` in `ranks` (its rank within the group),
  /// or -1 when it is not a member.
  int GroupRank(int global_rank) const;

  /// "[0,1,2]@3", for logs and error messages.
  std::string ToString() const;

  friend bool operator==(const CommKey& a, const CommKey& b) {
    return a.epoch == b.epoch && a.ranks == b.ranks;
  }
  friend bool operator!=(const CommKey& a, const CommKey& b) {
    return !(a == b);
  }
  template <typename H>
  friend H AbslHashValue(H h, const CommKey& key) {
    return H::combine(std::move(h), key.ranks, key.epoch);
  }
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_COMMUNICATOR_H_
