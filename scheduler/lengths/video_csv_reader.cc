// kVideoCsv: Open-Sora-style video metadata, frames x height x width turned
// into tokens; and `VideoTokenCount`, the formula it uses.

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "scheduler/lengths/csv_columns.h"
#include "scheduler/lengths/format_readers.h"
#include "scheduler/lengths/length_reader.h"
#include "scheduler/lengths/reader_support.h"

namespace dcp {
namespace {

absl::Status ValidateVideoOptions(const VideoTokenizerOptions& options) {
  if (options.temporal_compression < 1 || options.spatial_compression < 1 ||
      options.patch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "video tokenizer factors must be positive, got temporal_compression=",
        options.temporal_compression, " spatial_compression=",
        options.spatial_compression, " patch_size=", options.patch_size));
  }
  return absl::OkStatus();
}

int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0); }

class VideoCsvLengthReader final : public lengths_internal::RowLengthReader {
 public:
  VideoCsvLengthReader(std::unique_ptr<lengths_internal::CsvColumnReader> rows,
                       const VideoTokenizerOptions& video)
      : rows_(std::move(rows)), video_(video) {}

 private:
  absl::StatusOr<bool> Next(int64_t* length) override {
    ASSIGN_OR_RETURN(const bool more, rows_->Next(&values_));
    if (!more) return false;
    const int64_t frames = values_[0], height = values_[1], width = values_[2];
    absl::StatusOr<int64_t> tokens =
        VideoTokenCount(frames, height, width, video_);
    if (!tokens.ok()) return rows_->Error(tokens.status().message());
    if (*tokens > lengths_internal::kMaxLength) {
      return rows_->Error(absl::StrCat(
          lengths_internal::TooLarge("token count", absl::StrCat(*tokens)),
          " (", frames, " frames of ", height, "x", width, ")"));
    }
    *length = *tokens;
    return true;
  }

  std::unique_ptr<lengths_internal::CsvColumnReader> rows_;
  const VideoTokenizerOptions video_;
  std::vector<int64_t> values_;
};

}  // namespace

absl::StatusOr<int64_t> VideoTokenCount(int64_t num_frames, int64_t height,
                                        int64_t width,
                                        const VideoTokenizerOptions& options) {
  RETURN_IF_ERROR(ValidateVideoOptions(options));
  if (num_frames < 1 || height < 1 || width < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("video dimensions must be positive, got ", num_frames,
                     " frames of ", height, "x", width));
  }
  const int64_t frames =
      options.causal_first_frame
          ? 1 + CeilDiv(num_frames - 1, options.temporal_compression)
          : CeilDiv(num_frames, options.temporal_compression);
  const int64_t cell =
      int64_t{options.spatial_compression} * options.patch_size;
  int64_t tokens;
  if (__builtin_mul_overflow(frames, CeilDiv(height, cell), &tokens) ||
      __builtin_mul_overflow(tokens, CeilDiv(width, cell), &tokens)) {
    return absl::InvalidArgumentError(
        absl::StrCat("token count of ", num_frames, " frames of ", height, "x",
                     width, " overflows int64"));
  }
  return tokens;
}

namespace lengths_internal {

absl::StatusOr<std::unique_ptr<LengthReader>> OpenVideoCsvReader(
    const LengthSourceOptions& options) {
  const absl::Status valid = ValidateVideoOptions(options.video);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.path, ": ", valid.message()));
  }
  const VideoCsvColumns& names = options.video_columns;
  ASSIGN_OR_RETURN(std::unique_ptr<CsvColumnReader> rows,
                   CsvColumnReader::Open(
                       options.path, options.buffer_bytes, ',',
                       {names.num_frames, names.height, names.width}, "value"));
  return std::make_unique<VideoCsvLengthReader>(std::move(rows), options.video);
}

}  // namespace lengths_internal
}  // namespace dcp
