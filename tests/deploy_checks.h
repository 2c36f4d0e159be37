#ifndef DCP_TESTS_DEPLOY_CHECKS_H_
#define DCP_TESTS_DEPLOY_CHECKS_H_

// What the tests of deploy/ share (testonly): finding system programs,
// running them, the flags a dcp binary defines and the ones a file uses,
// and the Debian packages a binary's libraries come from.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace dcp {
namespace testing_process {

/// `name` on PATH or in the sbin directories (Bazel's strict action
/// environment leaves those off PATH; Debian puts daemons there).
std::optional<std::string> FindProgram(const std::string& name);

/// How a command ended.
struct CommandResult {
  /// -1 when killed by a signal or at the deadline.
  int exit_code = -1;
  bool timed_out = false;
  std::string out;
  std::string err;
};
/// Runs `argv` to completion (SIGKILLed after `timeout`), as `name` for
/// its output files under TEST_TMPDIR. Records no test failure: the caller
/// judges the result.
CommandResult RunCommand(const std::string& name,
                         const std::vector<std::string>& argv,
                         absl::Duration timeout = absl::Seconds(30));

/// The last `lines` lines of `text`.
std::string TailLines(const std::string& text, int lines);

/// The flags `binary --helpfull` lists, by name (no dashes), with their
/// defaults as printed ("0.0.0.0:50051"; "" for an empty string). Empty
/// when the binary lists none.
std::map<std::string, std::string> DefinedFlags(const std::string& binary);

/// The names of the flags in `text`: every word `--name` or
/// `--name=value` (a name of letters, digits and underscores).
std::vector<std::string> FlagsUsed(const std::string& text);

/// The Debian package of every shared library `binary` names as NEEDED
/// (readelf -d), resolved as the dynamic loader resolves it here (ldd) and
/// looked up with dpkg -S; "" for a library no package owns.
std::map<std::string, std::string> NeededPackages(const std::string& binary);

/// What every Debian image has, slim ones included: the Essential packages
/// and those of priority "required", with everything they depend on, as
/// installed here (libc6, libgcc-s1, libstdc++6, zlib1g, ...).
std::set<std::string> RequiredPackages();

}  // namespace testing_process
}  // namespace dcp

#endif  // DCP_TESTS_DEPLOY_CHECKS_H_
