#ifndef DCP_SCHEDULER_LENGTHS_MAPPED_ARRAY_READER_H_
#define DCP_SCHEDULER_LENGTHS_MAPPED_ARRAY_READER_H_

// What the binary format readers (npy_reader.cc, idx_reader.cc) share once
// they have checked a header: streaming the lengths out of an integer array
// in the mapped file. Private to the length_reader target.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "scheduler/lengths/length_reader.h"
#include "scheduler/lengths/mapped_file.h"

namespace dcp {
namespace lengths_internal {

/// The element types of a length array.
enum class ElementType { kInt32, kInt64, kUint32, kUint16 };

/// Bytes per element of `type`.
size_t ElementSize(ElementType type);

/// A reader of the `count` little-endian `type` elements at byte `offset` of
/// `file` (the caller has checked that they fit). A value outside [1, int32
/// max] is an error naming `path`, its byte offset and element index.
std::unique_ptr<LengthReader> NewMappedArrayReader(
    std::string path, std::unique_ptr<MappedFile> file, size_t offset,
    uint64_t count, ElementType type);

}  // namespace lengths_internal
}  // namespace dcp

#endif  // DCP_SCHEDULER_LENGTHS_MAPPED_ARRAY_READER_H_
