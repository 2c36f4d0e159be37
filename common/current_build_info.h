#ifndef DCP_COMMON_CURRENT_BUILD_INFO_H_
#define DCP_COMMON_CURRENT_BUILD_INFO_H_

#include "common/build_info.h"

namespace dcp {

/// This binary's build info: `kDcpVersion` and the commit Bazel stamped
/// (tools/workspace_status.sh; "unknown" outside a git checkout).
BuildInfo CurrentBuildInfo();

}  // namespace dcp

#endif  // DCP_COMMON_CURRENT_BUILD_INFO_H_
