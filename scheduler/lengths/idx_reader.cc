// kMegatronIdx: the sequence lengths of a Megatron-LM indexed dataset's .idx,
// memory-mapped.

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "scheduler/lengths/format_readers.h"
#include "scheduler/lengths/mapped_array_reader.h"
#include "scheduler/lengths/mapped_file.h"
#include "scheduler/lengths/reader_support.h"

namespace dcp {
namespace lengths_internal {

// Megatron-LM's MMIDIDX index (megatron/core/datasets/indexed_dataset.py):
//   0  "MMIDIDX\0\0"   9 bytes
//   9  version        uint64 (1)
//   17 dtype code     uint8 (1..8: the token dtype of the .bin)
//   18 sequence count uint64
//   26 document count uint64
//   34 int32 sequence lengths[sequence count]
//      int64 sequence pointers[sequence count]
//      int64 document indices[document count]
absl::StatusOr<std::unique_ptr<LengthReader>> OpenMegatronIdxReader(
    const LengthSourceOptions& options) {
  const std::string& path = options.path;
  constexpr absl::string_view kMagic("MMIDIDX\0\0", 9);
  constexpr size_t kHeaderBytes = 34;
  ASSIGN_OR_RETURN(
      std::unique_ptr<MappedFile> file,
      MappedFile::Open(path, kMagic, "a Megatron-LM indexed dataset .idx"));
  const uint8_t* const data = file->data();
  const size_t size = file->size();
  if (size < kHeaderBytes) {
    return AtOffset(path, size,
                    absl::StrCat("truncated header: it is ", kHeaderBytes,
                                 " bytes but the file has ", size));
  }
  const uint64_t version = LoadLittleEndian<uint64_t>(data + 9);
  if (version != 1) {
    return AtOffset(
        path, 9,
        absl::StrCat("unsupported version ", version, " (expected 1)"));
  }
  const int dtype_code = data[17];
  if (dtype_code < 1 || dtype_code > 8) {
    return AtOffset(
        path, 17,
        absl::StrCat("unknown dtype code ", dtype_code, " (expected 1..8)"));
  }
  const uint64_t sequences = LoadLittleEndian<uint64_t>(data + 18);
  const uint64_t documents = LoadLittleEndian<uint64_t>(data + 26);
  // Checks that `count` elements of `element_size` bytes fit from `offset`
  // and advances it past them.
  uint64_t offset = kHeaderBytes;
  auto take = [&](uint64_t count, size_t element_size,
                  absl::string_view what) -> absl::Status {
    if (count > (size - offset) / element_size) {
      return AtOffset(path, size,
                      absl::StrCat("truncated ", what, ": the header declares ",
                                   count, " of them (", element_size,
                                   " bytes each) from byte offset ", offset,
                                   " but the file ends at byte offset ", size));
    }
    offset += count * element_size;
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(take(sequences, 4, "sequence lengths"));
  RETURN_IF_ERROR(take(sequences, 8, "sequence pointers"));
  RETURN_IF_ERROR(take(documents, 8, "document indices"));
  return NewMappedArrayReader(path, std::move(file), kHeaderBytes, sequences,
                              ElementType::kInt32);
}

}  // namespace lengths_internal
}  // namespace dcp
