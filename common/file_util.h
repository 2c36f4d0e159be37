#ifndef DCP_COMMON_FILE_UTIL_H_
#define DCP_COMMON_FILE_UTIL_H_

#include <string>

#include "absl/status/status.h"

namespace dcp {

/// Writes `text` to `path` through `path + ".tmp"` and a rename, so that a
/// reader (a test or script polling a port file) never sees it half
/// written. UNAVAILABLE naming the file when either step fails.
absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& text);

}  // namespace dcp

#endif  // DCP_COMMON_FILE_UTIL_H_
