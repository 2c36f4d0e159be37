#include "common/current_build_info.h"

#include "common/build_stamp.h"

namespace dcp {

BuildInfo CurrentBuildInfo() { return {kDcpVersion, DCP_BUILD_COMMIT}; }

}  // namespace dcp
