#ifndef DCP_COMMON_DATA_FILES_H_
#define DCP_COMMON_DATA_FILES_H_

// Finding the bundled data (data/lengths, data/models) and a user's files
// named on a command line from any working directory: in the source tree,
// under `bazel run`, as a bazel-bin binary run from elsewhere, and installed
// (/opt/dcp/bin next to /opt/dcp/data, as deploy/container lays it out).

#include <string>
#include <vector>

namespace dcp {

/// The user's working directory under `bazel run` (BUILD_WORKING_DIRECTORY),
/// or "" when not run by Bazel.
std::string BazelWorkingDirectory();

/// `path` made absolute against `working_dir` when it is relative and
/// `working_dir` is not empty (for files a command writes).
std::string ResolvePath(const std::string& path,
                        const std::string& working_dir);

/// Where a process looks for a relative path, besides its working
/// directory.
struct DataFileRoots {
  /// The user's directory under `bazel run` ($BUILD_WORKING_DIRECTORY);
  /// empty otherwise.
  std::string user_dir;
  /// The running binary (/proc/self/exe, links resolved); empty if unknown.
  std::string executable;
  /// $RUNFILES_DIR; empty when unset.
  std::string runfiles_dir;

  /// This process's roots.
  static DataFileRoots OfThisProcess();
};

/// The places `path` is looked for, in order: `path` itself when it is
/// absolute; else `user_dir`/path, path (from the working directory), the
/// runfiles (`runfiles_dir`/dcp/path, `executable`.runfiles/dcp/path), and
/// path under each folder above the executable's, nearest first.
std::vector<std::string> DataFileCandidates(const std::string& path,
                                            const DataFileRoots& roots);

/// The first candidate that exists; when none does, `path` against
/// `user_dir` (what the user typed, so the caller's error names it).
///
///   // From any directory, and installed as /opt/dcp/bin/dcp-train:
///   LoadModelConfig(FindDataFile("data/models/cpu-tiny.json"));
std::string FindDataFile(const std::string& path, const DataFileRoots& roots);
std::string FindDataFile(const std::string& path);

/// An input file named on a command line: `FindDataFile` with this
/// process's roots and `working_dir` as the user's directory (the callers
/// pass `BazelWorkingDirectory()`).
std::string ResolveInput(const std::string& path,
                         const std::string& working_dir);

}  // namespace dcp

#endif  // DCP_COMMON_DATA_FILES_H_
