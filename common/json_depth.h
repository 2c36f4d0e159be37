#ifndef DCP_COMMON_JSON_DEPTH_H_
#define DCP_COMMON_JSON_DEPTH_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace dcp {

/// The deepest nesting of arrays and objects the JSON that dcp reads (model
/// configs, plan files) may have; the length readers' JSON Lines share it.
inline constexpr int kMaxJsonDepth = 512;

/// INVALID_ARGUMENT ("nested more than 512 levels deep at byte 1234") when
/// `text` opens more than `max_depth` arrays and objects inside one another,
/// counting brackets outside strings; OK otherwise, also for text that is
/// not valid JSON (the parser says what is wrong with it). Checked before
/// nlohmann-json parses: its parser keeps its own stack, but a document's
/// `dump()`, which error messages quote from, recurses once a level, and a
/// line of a few hundred kilobytes of brackets overflows the thread's stack.
absl::Status CheckJsonDepth(absl::string_view text,
                            int max_depth = kMaxJsonDepth);

}  // namespace dcp

#endif  // DCP_COMMON_JSON_DEPTH_H_
