#ifndef DCP_COMMON_GRPC_STATUS_H_
#define DCP_COMMON_GRPC_STATUS_H_

/// The one place where dcp converts between `absl::Status` and `grpc::Status`.
///
/// Cores return `absl::Status`; gRPC service classes and clients call these at
/// the edge so the code and message survive the wire unchanged. The two enums
/// share their numeric values (both follow google.rpc.Code), and each code is
/// mapped by name so a mismatch would not compile silently. Error details are
/// not carried.
///
///   reactor->Finish(ToGrpcStatus(core.Register(request).status()));
///   absl::Status s = FromGrpcStatus(stub->Register(&ctx, request, &response));
///
/// Pure functions; thread-safe. Includes grpc++ headers: include it only from
/// `.cc` files of gRPC edges, never from widely included headers.

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace dcp {

/// `status` as a gRPC status with the same code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

/// `status` as an absl status with the same code and message. Codes gRPC
/// may produce that absl does not know become UNKNOWN.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace dcp

#endif  // DCP_COMMON_GRPC_STATUS_H_
