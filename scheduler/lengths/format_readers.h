#ifndef DCP_SCHEDULER_LENGTHS_FORMAT_READERS_H_
#define DCP_SCHEDULER_LENGTHS_FORMAT_READERS_H_

// The format readers behind `LengthReader::Open`, one source file each
// (text_reader.cc, csv_reader.cc, ...). Private to the length_reader target.
// `Open` has checked what all formats share before it calls one: the path
// and buffer_bytes are set, `column` is set exactly for the formats with
// named columns (csv, tsv, jsonl; "length" when the caller left it empty).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/lengths/length_reader.h"

namespace dcp {
namespace lengths_internal {

/// How `LengthReader::Open` opens a reader for one format.
using FormatOpener = absl::StatusOr<std::unique_ptr<LengthReader>> (*)(
    const LengthSourceOptions& options);

absl::StatusOr<std::unique_ptr<LengthReader>> OpenTextReader(
    const LengthSourceOptions& options);
absl::StatusOr<std::unique_ptr<LengthReader>> OpenCsvReader(
    const LengthSourceOptions& options);
absl::StatusOr<std::unique_ptr<LengthReader>> OpenTsvReader(
    const LengthSourceOptions& options);
absl::StatusOr<std::unique_ptr<LengthReader>> OpenJsonlReader(
    const LengthSourceOptions& options);
absl::StatusOr<std::unique_ptr<LengthReader>> OpenNpyReader(
    const LengthSourceOptions& options);
absl::StatusOr<std::unique_ptr<LengthReader>> OpenMegatronIdxReader(
    const LengthSourceOptions& options);
absl::StatusOr<std::unique_ptr<LengthReader>> OpenVideoCsvReader(
    const LengthSourceOptions& options);

/// The base of the readers that find one length at a time in a text file
/// (text, csv, tsv, jsonl, video_csv): it batches them, and the number of
/// samples is not known up front.
class RowLengthReader : public LengthReader {
 public:
  absl::StatusOr<size_t> NextBatch(size_t max, std::vector<int64_t>* out) final;
  int64_t SizeHint() const final { return -1; }

 protected:
  /// Sets `*length` to the next length, in [1, int32 max]; false at the end
  /// of the file.
  virtual absl::StatusOr<bool> Next(int64_t* length) = 0;
};

}  // namespace lengths_internal
}  // namespace dcp

#endif  // DCP_SCHEDULER_LENGTHS_FORMAT_READERS_H_
