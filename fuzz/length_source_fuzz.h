#ifndef DCP_FUZZ_LENGTH_SOURCE_FUZZ_H_
#define DCP_FUZZ_LENGTH_SOURCE_FUZZ_H_

#include "absl/strings/string_view.h"
#include "scheduler/lengths/length_reader.h"

namespace dcp {
namespace fuzz {

/// The body of every length reader's fuzz target: `contents` becomes a file
/// of `format`, read three ways (`LengthReader` batches through a buffer
/// that takes the whole file at once, batches of 1..5 through a 1..16-byte
/// buffer, `ReadAllLengths`).
/// Fails unless every way gives the same lengths, each in [1, 2^31 - 1],
/// or the same clean INVALID_ARGUMENT; the binary formats' size hint must
/// be the count read, and a reader at its end must stay there.
void FuzzLengthSource(LengthFormat format, absl::string_view contents);

}  // namespace fuzz
}  // namespace dcp

#endif  // DCP_FUZZ_LENGTH_SOURCE_FUZZ_H_
