#ifndef DCP_COMMON_TEST_FILES_H_
#define DCP_COMMON_TEST_FILES_H_

#include <string>

#include "absl/strings/string_view.h"

namespace dcp {

// Files of unit tests that damage what code under test wrote (testonly).

/// `name` under the test's TEST_TMPDIR (/tmp outside Bazel).
std::string TestTmpPath(absl::string_view name);

/// The bytes of the file at `path`; empty when it cannot be read.
std::string ReadWholeFile(const std::string& path);

/// Replaces the file at `path` with `bytes` (created when absent).
void OverwriteFile(const std::string& path, absl::string_view bytes);

}  // namespace dcp

#endif  // DCP_COMMON_TEST_FILES_H_
