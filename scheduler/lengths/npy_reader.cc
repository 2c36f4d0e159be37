// kNpy: a 1-D NumPy .npy array of lengths, memory-mapped.

#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "scheduler/lengths/format_readers.h"
#include "scheduler/lengths/mapped_array_reader.h"
#include "scheduler/lengths/mapped_file.h"
#include "scheduler/lengths/reader_support.h"

namespace dcp {
namespace lengths_internal {
namespace {

constexpr absl::string_view kMagic("\x93NUMPY", 6);

struct NpyHeader {
  std::string descr;
  size_t descr_pos = 0;  // Offset of the descr value in the header text.
  bool fortran_order = false;
  std::vector<uint64_t> shape;
};

// Parses the Python dict literal of an .npy header, e.g.
// "{'descr': '<i4', 'fortran_order': False, 'shape': (10,), }".
class NpyHeaderParser {
 public:
  NpyHeaderParser(absl::string_view path, size_t offset, absl::string_view text)
      : path_(path), offset_(offset), text_(text) {}

  absl::StatusOr<NpyHeader> Parse() {
    NpyHeader header;
    bool have_descr = false, have_fortran = false, have_shape = false;
    SkipSpace();
    if (!Consume('{')) return Error("expected '{'");
    for (;;) {
      SkipSpace();
      if (Consume('}')) break;
      ASSIGN_OR_RETURN(const std::string key, ParseString("a quoted key"));
      SkipSpace();
      if (!Consume(':')) return Error("expected ':'");
      SkipSpace();
      if (key == "descr") {
        if (Peek() == '[') {
          return Error("structured dtypes are not supported");
        }
        header.descr_pos = pos_;
        ASSIGN_OR_RETURN(header.descr, ParseString("a quoted dtype"));
        have_descr = true;
      } else if (key == "fortran_order") {
        ASSIGN_OR_RETURN(header.fortran_order, ParseBool());
        have_fortran = true;
      } else if (key == "shape") {
        ASSIGN_OR_RETURN(header.shape, ParseShape());
        have_shape = true;
      } else {
        return Error(absl::StrCat("unexpected key ", Quote(key)));
      }
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume('}')) break;
      return Error("expected ',' or '}'");
    }
    if (!have_descr || !have_fortran || !have_shape) {
      return Error(
          "the header needs the keys 'descr', 'fortran_order' and 'shape'");
    }
    return header;
  }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  bool Consume(char c) {
    if (Peek() != c || pos_ >= text_.size()) return false;
    ++pos_;
    return true;
  }

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(text_[pos_])) ++pos_;
  }

  absl::StatusOr<std::string> ParseString(absl::string_view what) {
    const char quote = Peek();
    if (quote != '\'' && quote != '"') {
      return Error(absl::StrCat("expected ", what));
    }
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == absl::string_view::npos) return Error("unterminated string");
    std::string value(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return value;
  }

  absl::StatusOr<bool> ParseBool() {
    if (absl::StartsWith(text_.substr(pos_), "True")) {
      pos_ += 4;
      return true;
    }
    if (absl::StartsWith(text_.substr(pos_), "False")) {
      pos_ += 5;
      return false;
    }
    return Error("expected True or False");
  }

  absl::StatusOr<std::vector<uint64_t>> ParseShape() {
    std::vector<uint64_t> shape;
    if (!Consume('(')) return Error("expected a shape tuple");
    for (;;) {
      SkipSpace();
      if (Consume(')')) return shape;
      if (!absl::ascii_isdigit(Peek())) return Error("expected a dimension");
      uint64_t dim = 0;
      while (absl::ascii_isdigit(Peek())) {
        const uint64_t digit = Peek() - '0';
        if (dim > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
          return Error("dimension too large");
        }
        dim = dim * 10 + digit;
        ++pos_;
      }
      Consume('L');  // Python 2 long literal.
      shape.push_back(dim);
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume(')')) return shape;
      return Error("expected ',' or ')' in the shape");
    }
  }

  absl::Status Error(absl::string_view problem) const {
    return AtOffset(path_, offset_ + pos_,
                    absl::StrCat("malformed .npy header: ", problem));
  }

  const absl::string_view path_;
  const size_t offset_;
  const absl::string_view text_;
  size_t pos_ = 0;
};

// The element type of a supported dtype such as "<i4"; else an error at the
// dtype's offset, `descr_offset`.
absl::StatusOr<ElementType> NpyElementType(absl::string_view path,
                                           const std::string& descr,
                                           size_t descr_offset) {
  if (descr == "<i4") return ElementType::kInt32;
  if (descr == "<i8") return ElementType::kInt64;
  if (descr == "<u4") return ElementType::kUint32;
  if (descr == "<u2") return ElementType::kUint16;
  if (descr.size() == 3 && descr[0] == '>' &&
      (descr[1] == 'i' || descr[1] == 'u')) {
    return AtOffset(path, descr_offset,
                    absl::StrCat("big-endian dtype '", descr,
                                 "' is not supported; convert with .astype('<",
                                 absl::string_view(descr).substr(1), "')"));
  }
  return AtOffset(path, descr_offset,
                  absl::StrCat("unsupported dtype ", Quote(descr),
                               "; expected '<i4', '<i8', '<u4' or '<u2'"));
}

}  // namespace

// The format (numpy.lib.format): "\x93NUMPY", major and minor version bytes,
// the header length (uint16 in 1.0, uint32 in 2.0 and 3.0), the header text,
// then the array data.
absl::StatusOr<std::unique_ptr<LengthReader>> OpenNpyReader(
    const LengthSourceOptions& options) {
  const std::string& path = options.path;
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file,
                   MappedFile::Open(path, kMagic, "a NumPy .npy file"));
  const uint8_t* const data = file->data();
  const size_t size = file->size();
  if (size < 8) {
    return AtOffset(path, size,
                    "truncated header: the file ends after 6 "
                    "bytes of magic");
  }
  const int major = data[6], minor = data[7];
  if (major < 1 || major > 3 || minor != 0) {
    return AtOffset(path, 6,
                    absl::StrCat("unsupported .npy format version ", major, ".",
                                 minor, " (1.0, 2.0 and 3.0 are)"));
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t header_start = 8 + length_bytes;
  if (size < header_start) {
    return AtOffset(path, size, "truncated header length");
  }
  const size_t header_length = major == 1
                                   ? LoadLittleEndian<uint16_t>(data + 8)
                                   : LoadLittleEndian<uint32_t>(data + 8);
  if (header_length > size - header_start) {
    return AtOffset(path, size,
                    absl::StrCat("truncated header: it is ", header_length,
                                 " bytes from byte offset ", header_start,
                                 " but the file ends at byte offset ", size));
  }
  const absl::string_view text(
      reinterpret_cast<const char*>(data + header_start), header_length);
  ASSIGN_OR_RETURN(const NpyHeader header,
                   NpyHeaderParser(path, header_start, text).Parse());
  ASSIGN_OR_RETURN(
      const ElementType type,
      NpyElementType(path, header.descr, header_start + header.descr_pos));
  if (header.shape.size() != 1) {
    return AtOffset(path, header_start,
                    absl::StrCat("expected a 1-D array, got shape (",
                                 absl::StrJoin(header.shape, ", "), ")"));
  }
  const uint64_t count = header.shape[0];
  const size_t data_offset = header_start + header_length;
  if (count > (size - data_offset) / ElementSize(type)) {
    return AtOffset(
        path, size,
        absl::StrCat("truncated data: the header declares ", count, " ",
                     header.descr, " elements from byte offset ", data_offset,
                     " but the file ends at byte offset ", size));
  }
  return NewMappedArrayReader(path, std::move(file), data_offset, count, type);
}

}  // namespace lengths_internal
}  // namespace dcp
