#ifndef DCP_SCHEDULER_LENGTHS_LENGTH_READER_H_
#define DCP_SCHEDULER_LENGTHS_LENGTH_READER_H_

// Readers for per-sample length metadata (tokens per sample), the input the
// scheduler plans over. Sample id = position in the source (0-based).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dcp {

/// The on-disk formats a length source can have.
enum class LengthFormat {
  /// One decimal length per line; `\r\n` and blank lines at the end are fine.
  kText,
  /// Comma-separated, header row, lengths in a named column (RFC 4180
  /// quoting: `"a,b"`, `"say ""hi"""`, newlines inside quotes).
  kCsv,
  /// Like kCsv with tab as the separator.
  kTsv,
  /// JSON Lines: one JSON object a line, the length a top-level integer
  /// field. Each line is parsed by nlohmann-json, nested at most 512 deep;
  /// bytes above 0x7F inside strings are not checked as UTF-8 and unpaired
  /// surrogate escapes are accepted, but a number beyond double's range
  /// (1e999) makes the line invalid.
  kJsonl,
  /// NumPy `.npy`, 1-D, dtype `<i4`, `<i8`, `<u4` or `<u2`; memory-mapped.
  kNpy,
  /// The `.idx` of a Megatron-LM indexed dataset (MMIDIDX, version 1): the
  /// int32 sequence-lengths array; memory-mapped.
  kMegatronIdx,
  /// Open-Sora-style video metadata CSV: frames, height and width columns,
  /// turned into tokens by `VideoTokenCount`.
  kVideoCsv,
};

/// Parses a format name: "text", "csv", "tsv", "jsonl", "npy", "idx",
/// "video_csv" (case-insensitive). Unknown names are INVALID_ARGUMENT.
absl::StatusOr<LengthFormat> ParseLengthFormat(absl::string_view name);

/// The name `ParseLengthFormat` accepts for `format`, e.g. "video_csv".
absl::string_view LengthFormatName(LengthFormat format);

/// Guesses a format from the path's extension (case-insensitive): .txt -> text,
/// .csv -> csv, .tsv -> tsv, .jsonl/.json -> jsonl, .npy -> npy, .idx -> idx;
/// anything else is text. A video CSV is never guessed: ask for kVideoCsv
/// explicitly.
LengthFormat GuessLengthFormat(absl::string_view path);

/// How a video becomes a token count after a video VAE and patchifier.
///
///   tokens = T * ceil(height / (spatial_compression * patch_size))
///              * ceil(width  / (spatial_compression * patch_size))
///   T      = ceil(num_frames / temporal_compression)            by default
///   T      = 1 + ceil((num_frames - 1) / temporal_compression)  if
///            causal_first_frame (CausalVAE: the first frame is encoded alone)
///
/// The defaults are Open-Sora's VAE (4x temporal, 8x8 spatial) with a 2x2
/// patch: 4x temporal and 16x16 spatial compression in all. An image is a
/// 1-frame video.
struct VideoTokenizerOptions {
  int temporal_compression = 4;
  int spatial_compression = 8;
  int patch_size = 2;
  bool causal_first_frame = false;
};

/// Tokens of one video (see `VideoTokenizerOptions` for the formula). All of
/// `num_frames`, `height`, `width` and the options' factors must be positive;
/// INVALID_ARGUMENT otherwise. The result is not capped at int32.
absl::StatusOr<int64_t> VideoTokenCount(int64_t num_frames, int64_t height,
                                        int64_t width,
                                        const VideoTokenizerOptions& options);

/// The header names of the three columns a kVideoCsv source needs.
struct VideoCsvColumns {
  std::string num_frames = "num_frames";
  std::string height = "height";
  std::string width = "width";
};

/// Where lengths come from and how to read them.
struct LengthSourceOptions {
  /// The file to read; error messages name it as written here.
  std::string path;
  /// The file's format; `GuessLengthFormat(path)` picks one by extension.
  LengthFormat format = LengthFormat::kText;
  /// kCsv/kTsv: the header name of the length column; kJsonl: the top-level
  /// field. Empty means "length". Must be empty for the other formats.
  std::string column;
  /// kVideoCsv: how frames/height/width become tokens.
  VideoTokenizerOptions video;
  /// kVideoCsv: which header columns hold frames/height/width.
  VideoCsvColumns video_columns;
  /// Text formats: bytes read from the file at a time. The buffer grows only
  /// while a single line (CSV: record) is longer than this, up to 256 MiB.
  /// Small values exist for tests of lines crossing chunk boundaries.
  size_t buffer_bytes = size_t{1} << 20;
};

/// Streams the lengths of one source, a batch at a time, in memory bounded
/// by `buffer_bytes` plus the longest line (text formats) or by the page
/// cache of a read-only memory map (npy, idx); 100M-sample sources are fine.
///
/// Every length a reader returns is in [1, 2^31 - 1]: zero, negative and
/// larger values are errors. Errors are INVALID_ARGUMENT (bad content) or
/// the errno's code (e.g. NOT_FOUND) and name the file and the 1-based line
/// (text formats: `lengths.txt:1234: expected a non-negative integer length,
/// got "12a"`) or the byte offset (binary formats: `lengths.npy: byte offset
/// 128: ...`). After an error the reader must not be used further.
///
/// Thread-compatible: one thread at a time. The caller owns the reader;
/// it owns its file descriptor or mapping and releases them on destruction.
///
///   LengthSourceOptions options;
///   options.path = "wikipedia.txt";
///   options.format = GuessLengthFormat(options.path);
///   ASSIGN_OR_RETURN(std::unique_ptr<LengthReader> reader,
///                    LengthReader::Open(options));
///   std::vector<int64_t> batch;
///   for (;;) {
///     ASSIGN_OR_RETURN(size_t n, reader->NextBatch(4096, &batch));
///     if (n == 0) break;
///     Consume(batch);
///   }
class LengthReader {
 public:
  /// Opens `options.path` and validates what can be checked up front: the
  /// header row (CSV), the header (npy, idx) and the file size against it.
  static absl::StatusOr<std::unique_ptr<LengthReader>> Open(
      const LengthSourceOptions& options);

  virtual ~LengthReader();

  /// Reads up to `max` lengths into `out` (cleared first); returns the number
  /// read, 0 at the end. An error names the file and the line/offset.
  virtual absl::StatusOr<size_t> NextBatch(size_t max,
                                           std::vector<int64_t>* out) = 0;

  /// The number of samples when known up front (npy, idx), else -1.
  virtual int64_t SizeHint() const = 0;

 protected:
  LengthReader() = default;
  LengthReader(const LengthReader&) = delete;
  LengthReader& operator=(const LengthReader&) = delete;
};

/// Reads a whole source into a compact vector: 4 bytes a sample, sample id =
/// position. Lengths never exceed int32 (the readers reject larger ones).
///
///   LengthSourceOptions options;
///   options.path = "lengths.npy";
///   options.format = LengthFormat::kNpy;
///   ASSIGN_OR_RETURN(std::vector<int32_t> lengths, ReadAllLengths(options));
absl::StatusOr<std::vector<int32_t>> ReadAllLengths(
    const LengthSourceOptions& options);

}  // namespace dcp

#endif  // DCP_SCHEDULER_LENGTHS_LENGTH_READER_H_
