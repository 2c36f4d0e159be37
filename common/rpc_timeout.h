#ifndef DCP_COMMON_RPC_TIMEOUT_H_
#define DCP_COMMON_RPC_TIMEOUT_H_

#include "absl/time/time.h"
#include "grpc/support/time.h"
#include "grpcpp/client_context.h"

namespace dcp {

/// Gives `context` a deadline `timeout` from now, as a duration gRPC counts
/// down itself: no reading of a wall clock here.
inline void SetRpcTimeout(grpc::ClientContext& context,
                          absl::Duration timeout) {
  context.set_deadline(
      gpr_time_from_millis(absl::ToInt64Milliseconds(timeout), GPR_TIMESPAN));
}

}  // namespace dcp

#endif  // DCP_COMMON_RPC_TIMEOUT_H_
