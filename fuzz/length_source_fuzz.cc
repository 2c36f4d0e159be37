#include "fuzz/length_source_fuzz.h"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_support.h"

namespace dcp {
namespace fuzz {
namespace {

struct Outcome {
  absl::Status status;
  std::vector<int64_t> lengths;
};

// Reads the whole source `batch` lengths at a time, checking each batch.
Outcome ReadInBatches(const LengthSourceOptions& options, size_t batch) {
  Outcome out;
  absl::StatusOr<std::unique_ptr<LengthReader>> reader =
      LengthReader::Open(options);
  if (!reader.ok()) {
    out.status = reader.status();
    return out;
  }
  const int64_t hint = (*reader)->SizeHint();
  DCP_FUZZ_CHECK(hint >= -1, "size hint ", hint);
  std::vector<int64_t> lengths;
  for (;;) {
    absl::StatusOr<size_t> n = (*reader)->NextBatch(batch, &lengths);
    if (!n.ok()) {
      out.status = n.status();
      return out;
    }
    DCP_FUZZ_CHECK(*n == lengths.size() && *n <= batch, "NextBatch returned ",
                   *n, " with ", lengths.size(), " lengths for at most ",
                   batch);
    if (*n == 0) break;
    for (int64_t length : lengths) {
      DCP_FUZZ_CHECK(
          length >= 1 && length <= std::numeric_limits<int32_t>::max(),
          "length ", length, " at sample ", out.lengths.size());
      out.lengths.push_back(length);
    }
  }
  absl::StatusOr<size_t> again = (*reader)->NextBatch(batch, &lengths);
  DCP_FUZZ_CHECK(again.ok() && *again == 0, "a reader at its end read again: ",
                 again.ok() ? absl::StrCat(*again, " lengths")
                            : again.status().ToString());
  if (hint >= 0) {
    DCP_FUZZ_CHECK(static_cast<size_t>(hint) == out.lengths.size(),
                   "size hint ", hint, " but ", out.lengths.size(),
                   " lengths read");
  }
  return out;
}

}  // namespace

void FuzzLengthSource(LengthFormat format, absl::string_view contents) {
  ScratchFile& file = ScratchFile::Get();
  file.Replace(contents);
  LengthSourceOptions options;
  options.path = file.path();
  options.format = format;
  // The whole file in one read (and no 1 MiB default buffer to allocate
  // for every input).
  options.buffer_bytes = contents.size() + 1;
  options.video.causal_first_frame = contents.size() % 2 == 1;

  const Outcome whole = ReadInBatches(options, 4096);
  CheckClean(whole.status, {absl::StatusCode::kInvalidArgument}, "reading");

  LengthSourceOptions small = options;
  small.buffer_bytes = 1 + contents.size() % 16;
  const Outcome chunked = ReadInBatches(small, 1 + contents.size() % 5);
  DCP_FUZZ_CHECK(chunked.status == whole.status, "a ", small.buffer_bytes,
                 "-byte buffer gives ", chunked.status.ToString(),
                 " but one read gives ", whole.status.ToString());
  if (whole.status.ok()) {
    DCP_FUZZ_CHECK(chunked.lengths == whole.lengths, "a ", small.buffer_bytes,
                   "-byte buffer reads ", chunked.lengths.size(),
                   " lengths, one read ", whole.lengths.size(),
                   " (or other values)");
  }

  absl::StatusOr<std::vector<int32_t>> all = ReadAllLengths(options);
  DCP_FUZZ_CHECK(all.status() == whole.status, "ReadAllLengths gives ",
                 all.status().ToString(), " but the reader ",
                 whole.status.ToString());
  if (all.ok()) {
    DCP_FUZZ_CHECK(
        std::vector<int64_t>(all->begin(), all->end()) == whole.lengths,
        "ReadAllLengths reads other lengths than the reader");
  }
}

}  // namespace fuzz
}  // namespace dcp
