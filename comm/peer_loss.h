#ifndef DCP_COMM_PEER_LOSS_H_
#define DCP_COMM_PEER_LOSS_H_

#include "absl/status/status.h"

namespace dcp {

/// Whether a step's error says a peer is gone (UNAVAILABLE,
/// DEADLINE_EXCEEDED, INTERNAL or CANCELLED, from a collective or from
/// forming a group) rather than that the rank could not run its plan: what
/// the agent and a client_lib trainer answer by moving on to the next epoch.
inline bool IsPeerLoss(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) ||
         absl::IsInternal(status) || absl::IsCancelled(status);
}

}  // namespace dcp

#endif  // DCP_COMM_PEER_LOSS_H_
