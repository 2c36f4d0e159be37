#ifndef DCP_COMMON_CUDA_STATUS_H_
#define DCP_COMMON_CUDA_STATUS_H_

/// `CUDA_RETURN_IF_ERROR`: every CUDA runtime call of dcp goes through it, so
/// a CUDA error becomes an `absl::Status` naming the call and the place.
/// Built only with `--config=cuda`.
///
///   CUDA_RETURN_IF_ERROR(cudaSetDevice(device));

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dcp {

/// The status of a failed CUDA call `expr` at `file`:`line`.
inline absl::Status CudaErrorStatus(cudaError_t error, const char* expr,
                                    const char* file, int line) {
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (error) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      code = absl::StatusCode::kFailedPrecondition;
      break;
    case cudaErrorMemoryAllocation:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
      code = absl::StatusCode::kInvalidArgument;
      break;
    default:
      break;
  }
  return absl::Status(code, absl::StrCat(expr, " failed at ", file, ":", line,
                                         ": ", cudaGetErrorName(error), " (",
                                         cudaGetErrorString(error), ")"));
}

}  // namespace dcp

#define CUDA_RETURN_IF_ERROR(expr)                                    \
  do {                                                                \
    const cudaError_t dcp_cuda_error_ = (expr);                       \
    if (dcp_cuda_error_ != cudaSuccess) {                             \
      return ::dcp::CudaErrorStatus(dcp_cuda_error_, #expr, __FILE__, \
                                    __LINE__);                        \
    }                                                                 \
  } while (0)

#endif  // DCP_COMMON_CUDA_STATUS_H_
