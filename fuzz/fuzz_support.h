#ifndef DCP_FUZZ_FUZZ_SUPPORT_H_
#define DCP_FUZZ_FUZZ_SUPPORT_H_

// What the fuzz targets share: an in-memory file for the readers that take a
// path, and the checks that turn a broken contract into a crash that
// libFuzzer (or the corpus regression test) reports with its input.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace dcp {
namespace fuzz {

/// Prints `problem` and aborts: libFuzzer saves the input as a crash, the
/// corpus test fails naming the file.
[[noreturn]] void Fail(absl::string_view problem);

/// Fails unless `status` is OK or a clean error: one of `allowed` codes
/// (never INTERNAL or UNKNOWN, which mean a bug) with a message a person can
/// act on. `what` names the call in the failure.
void CheckClean(const absl::Status& status,
                std::initializer_list<absl::StatusCode> allowed,
                absl::string_view what);

/// `data` of a fuzz input as text.
inline absl::string_view AsText(const uint8_t* data, size_t size) {
  return absl::string_view(reinterpret_cast<const char*>(data), size);
}

/// A file whose contents the fuzzer replaces on every input, for readers
/// that open a path (the length readers, plan files): a memfd, opened by
/// "/proc/self/fd/N", or a temporary file where memfds are not available.
/// Not thread-safe; one per process (`Get`), never destroyed.
class ScratchFile {
 public:
  static ScratchFile& Get();

  /// Makes `contents` the whole file.
  void Replace(absl::string_view contents);
  const std::string& path() const { return path_; }

 private:
  ScratchFile();

  int fd_ = -1;
  std::string path_;
};

}  // namespace fuzz
}  // namespace dcp

/// Fails with the condition's text and the message pieces (absl::StrCat
/// arguments) when `cond` is false.
#define DCP_FUZZ_CHECK(cond, ...)                                  \
  do {                                                             \
    if (!(cond)) {                                                 \
      ::dcp::fuzz::Fail(                                           \
          absl::StrCat("check failed: " #cond ": ", __VA_ARGS__)); \
    }                                                              \
  } while (0)

#endif  // DCP_FUZZ_FUZZ_SUPPORT_H_
