#ifndef DCP_COMM_COMM_KEY_H_
#define DCP_COMM_COMM_KEY_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace dcp {

/// What a group is for. The same members in the same epoch may form two
/// groups: a sequence-parallel group of a plan's task, and the
/// data-parallel group of the whole world that syncs gradients; they must
/// not be taken for each other (they meet under different store prefixes,
/// and a warm-up of one must not stand in for the other).
enum class CommPurpose {
  kSequenceParallel,
  kDataParallel,
};

/// Identifies one formation of a process group: its members (global
/// ranks, sorted and distinct), the epoch of the plan that formed it and
/// its purpose. A group re-formed in a later epoch (after a failure or a
/// re-plan) is a different group.
///
/// Build keys with `Make`, which sorts and validates; `IsValid` tells whether
/// a key built by hand is well formed.
///
///   ASSIGN_OR_RETURN(CommKey key, CommKey::Make({3, 1, 2}, /*epoch=*/7));
///   // key.ranks == {1, 2, 3}
struct CommKey {
  std::vector<int> ranks;
  int64_t epoch = 0;
  CommPurpose purpose = CommPurpose::kSequenceParallel;

  /// Sorts `ranks`. INVALID_ARGUMENT when they are empty, negative or
  /// repeated, or the epoch is negative.
  static absl::StatusOr<CommKey> Make(
      std::vector<int> ranks, int64_t epoch,
      CommPurpose purpose = CommPurpose::kSequenceParallel);

  /// OK when `ranks` is non-empty, sorted, distinct and non-negative and
  /// `epoch` is non-negative; INVALID_ARGUMENT saying what is wrong otherwise.
  absl::Status Validate() const;

  /// The position of `global_rank` in `ranks` (its rank within the group),
  /// or -1 when it is not a member.
  int GroupRank(int global_rank) const;

  /// "[0,1,2]@3" ("[0,1,2]@3/dp" for a data-parallel group), for logs and
  /// error messages.
  std::string ToString() const;

  friend bool operator==(const CommKey& a, const CommKey& b) {
    return a.epoch == b.epoch && a.purpose == b.purpose && a.ranks == b.ranks;
  }
  friend bool operator!=(const CommKey& a, const CommKey& b) {
    return !(a == b);
  }
  template <typename H>
  friend H AbslHashValue(H h, const CommKey& key) {
    return H::combine(std::move(h), key.ranks, key.epoch,
                      static_cast<int>(key.purpose));
  }
};

}  // namespace dcp

#endif  // DCP_COMM_COMM_KEY_H_
