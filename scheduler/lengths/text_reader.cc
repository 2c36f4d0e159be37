// kText: one decimal length per line.

#include <memory>
#include <utility>

#include "common/status_macros.h"
#include "scheduler/lengths/format_readers.h"
#include "scheduler/lengths/line_reader.h"
#include "scheduler/lengths/reader_support.h"

namespace dcp {
namespace lengths_internal {
namespace {

class TextLengthReader final : public RowLengthReader {
 public:
  explicit TextLengthReader(std::unique_ptr<LineReader> lines)
      : lines_(std::move(lines)) {}

 private:
  absl::StatusOr<bool> Next(int64_t* length) override {
    absl::string_view line;
    ASSIGN_OR_RETURN(const bool more, lines_->NextNonBlank(&line));
    if (!more) return false;
    absl::StatusOr<int64_t> value = ParsePositiveInt(line, "length");
    if (!value.ok()) return lines_->Error(value.status().message());
    *length = *value;
    return true;
  }

  std::unique_ptr<LineReader> lines_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LengthReader>> OpenTextReader(
    const LengthSourceOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<LineReader> lines,
                   LineReader::Open(options.path, options.buffer_bytes));
  return std::make_unique<TextLengthReader>(std::move(lines));
}

}  // namespace lengths_internal
}  // namespace dcp
