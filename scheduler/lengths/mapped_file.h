#ifndef DCP_SCHEDULER_LENGTHS_MAPPED_FILE_H_
#define DCP_SCHEDULER_LENGTHS_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

// The binary readers load little-endian values with plain memcpy.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "scheduler/lengths assumes a little-endian host"
#endif

namespace dcp {
namespace lengths_internal {

/// A whole file mapped read-only, for the binary length formats (npy, idx).
///
/// Thread-safe to read. Owns the mapping and unmaps it on destruction.
class MappedFile {
 public:
  /// Maps `path`, which must be a regular file that starts with `magic`.
  /// Otherwise INVALID_ARGUMENT at byte offset 0 says what a file of the
  /// format (`description`, e.g. "a NumPy .npy file") starts with.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(
      const std::string& path, absl::string_view magic,
      absl::string_view description);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return static_cast<const uint8_t*>(data_); }
  size_t size() const { return size_; }

 private:
  MappedFile(void* data, size_t size) : data_(data), size_(size) {}

  void* const data_;
  const size_t size_;
};

/// The value of type T stored little-endian at `p` (need not be aligned).
template <typename T>
T LoadLittleEndian(const uint8_t* p) {
  T value;
  memcpy(&value, p, sizeof(T));
  return value;
}

}  // namespace lengths_internal
}  // namespace dcp

#endif  // DCP_SCHEDULER_LENGTHS_MAPPED_FILE_H_
