#ifndef DCP_COMMON_STATUS_MACROS_H_
#define DCP_COMMON_STATUS_MACROS_H_

/// The two macros every dcp source uses to propagate `absl::Status`.
///
///   RETURN_IF_ERROR(WriteHeader(out));
///   ASSIGN_OR_RETURN(std::vector<int64_t> lengths, ReadAll(path));

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DCP_STATUS_CONCAT_INNER_(a, b) a##b
#define DCP_STATUS_CONCAT_(a, b) DCP_STATUS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                  \
  do {                                         \
    ::absl::Status dcp_status_ = (expr);       \
    if (!dcp_status_.ok()) return dcp_status_; \
  } while (0)

#define DCP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return std::move(tmp).status();   \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr)                                            \
  DCP_ASSIGN_OR_RETURN_IMPL_(DCP_STATUS_CONCAT_(dcp_statusor_, __LINE__), lhs, \
                             expr)

#endif  // DCP_COMMON_STATUS_MACROS_H_
