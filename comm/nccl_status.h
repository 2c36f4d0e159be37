#ifndef DCP_COMM_NCCL_STATUS_H_
#define DCP_COMM_NCCL_STATUS_H_

/// `NCCL_RETURN_IF_ERROR`: every NCCL call of the agent goes through it, so an
/// NCCL error becomes an `absl::Status` naming the call, the place and NCCL's
/// own explanation. Built only with `--config=cuda`.
///
/// dcp's communicators are nonblocking (`ncclConfig_t::blocking = 0`), so
/// `ncclInProgress` is not an error here: the operation continues in the
/// background and its end is polled with `ncclCommGetAsyncError`.
///
///   NCCL_RETURN_IF_ERROR(ncclCommInitRankConfig(&comm, n, id, rank, &cfg));

#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dcp {

/// The status code that best describes an NCCL result.
inline absl::StatusCode NcclStatusCode(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
    case ncclInProgress:
      return absl::StatusCode::kOk;
    case ncclInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case ncclInvalidUsage:
      return absl::StatusCode::kFailedPrecondition;
    case ncclSystemError:
    case ncclRemoteError:
      return absl::StatusCode::kUnavailable;
    case ncclUnhandledCudaError:
    case ncclInternalError:
      return absl::StatusCode::kInternal;
    default:
      return absl::StatusCode::kUnknown;
  }
}

/// The status of NCCL call `expr`, which returned `result`, at `file`:`line`.
inline absl::Status NcclErrorStatus(ncclResult_t result, const char* expr,
                                    const char* file, int line) {
  return absl::Status(NcclStatusCode(result),
                      absl::StrCat(expr, " failed at ", file, ":", line, ": ",
                                   ncclGetErrorString(result), " (",
                                   ncclGetLastError(nullptr), ")"));
}

}  // namespace dcp

#define NCCL_RETURN_IF_ERROR(expr)                                     \
  do {                                                                 \
    const ncclResult_t dcp_nccl_result_ = (expr);                      \
    if (dcp_nccl_result_ != ncclSuccess &&                             \
        dcp_nccl_result_ != ncclInProgress) {                          \
      return ::dcp::NcclErrorStatus(dcp_nccl_result_, #expr, __FILE__, \
                                    __LINE__);                         \
    }                                                                  \
  } while (0)

#endif  // DCP_COMM_NCCL_STATUS_H_
