#ifndef DCP_COMMON_BUILD_INFO_H_
#define DCP_COMMON_BUILD_INFO_H_

#include <string>

namespace dcp {

/// What a dcp binary was built from, for the daemons' `*_build_info`
/// metrics. Plain value type.
struct BuildInfo {
  /// dcp's version (`kDcpVersion`).
  std::string version;
  /// The git commit of the checkout Bazel built, or "unknown" outside a git
  /// checkout (tools/workspace_status.sh stamps it).
  std::string commit;
};

/// dcp's release version; "-dev" until a release is cut.
inline constexpr char kDcpVersion[] = "0.1.0-dev";

}  // namespace dcp

#endif  // DCP_COMMON_BUILD_INFO_H_
