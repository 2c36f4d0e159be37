#ifndef DCP_SCHEDULER_LENGTHS_READER_SUPPORT_H_
#define DCP_SCHEDULER_LENGTHS_READER_SUPPORT_H_

// What every length format reader shares: the bounds on a length, the
// parsing of a decimal length and the error messages that name the file and
// the line or byte offset. Internal to scheduler/lengths.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dcp {
namespace lengths_internal {

/// The largest length a reader returns; `ReadAllLengths` stores int32.
inline constexpr int64_t kMaxLength = std::numeric_limits<int32_t>::max();

/// Bounds the memory one line (CSV: one record) of a text format may take.
inline constexpr size_t kMaxLineBytes = size_t{256} << 20;

/// Quotes `text` for an error message: control bytes escaped, long text cut
/// so that a garbage line cannot flood the log.
std::string Quote(absl::string_view text);

/// A number as an error message shows it: as written, or quoted and cut when
/// it is pathologically long.
std::string ShownNumber(absl::string_view text);

/// "`what` must be positive, got `shown`".
std::string NotPositive(absl::string_view what, absl::string_view shown);

/// "`what` `shown` is larger than the int32 maximum 2147483647".
std::string TooLarge(absl::string_view what, absl::string_view shown);

/// INVALID_ARGUMENT "path:line: problem" (text formats, 1-based lines).
absl::Status AtLine(absl::string_view path, int64_t line,
                    absl::string_view problem);

/// INVALID_ARGUMENT "path: byte offset N: problem" (binary formats).
absl::Status AtOffset(absl::string_view path, uint64_t offset,
                      absl::string_view problem);

/// The status of a failed system call: the errno's code (NOT_FOUND, ...) and
/// "cannot `action` `path`".
absl::Status ErrnoError(int error_number, absl::string_view action,
                        absl::string_view path);

/// Opens `path` read-only (retrying on EINTR); the caller closes the
/// descriptor.
absl::StatusOr<int> OpenReadOnly(const std::string& path);

/// Parses a positive decimal int32 such as "347". Otherwise returns
/// INVALID_ARGUMENT with a problem (no location) in which `what` names the
/// value ("length", "value").
absl::StatusOr<int64_t> ParsePositiveInt(absl::string_view text,
                                         absl::string_view what);

}  // namespace lengths_internal
}  // namespace dcp

#endif  // DCP_SCHEDULER_LENGTHS_READER_SUPPORT_H_
