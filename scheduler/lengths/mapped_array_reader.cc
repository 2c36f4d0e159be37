#include "scheduler/lengths/mapped_array_reader.h"

#include <algorithm>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "scheduler/lengths/reader_support.h"

namespace dcp {
namespace lengths_internal {
namespace {

class MappedArrayReader final : public LengthReader {
 public:
  MappedArrayReader(std::string path, std::unique_ptr<MappedFile> file,
                    size_t offset, uint64_t count, ElementType type)
      : path_(std::move(path)),
        file_(std::move(file)),
        offset_(offset),
        count_(count),
        type_(type) {}

  absl::StatusOr<size_t> NextBatch(size_t max,
                                   std::vector<int64_t>* out) override {
    const size_t n =
        static_cast<size_t>(std::min<uint64_t>(max, count_ - next_));
    out->resize(n);
    switch (type_) {
      case ElementType::kInt32:
        RETURN_IF_ERROR(Decode<int32_t>(n, out->data()));
        break;
      case ElementType::kInt64:
        RETURN_IF_ERROR(Decode<int64_t>(n, out->data()));
        break;
      case ElementType::kUint32:
        RETURN_IF_ERROR(Decode<uint32_t>(n, out->data()));
        break;
      case ElementType::kUint16:
        RETURN_IF_ERROR(Decode<uint16_t>(n, out->data()));
        break;
    }
    next_ += n;
    return n;
  }

  int64_t SizeHint() const override { return static_cast<int64_t>(count_); }

 private:
  template <typename T>
  absl::Status Decode(size_t n, int64_t* out) {
    const uint8_t* p = file_->data() + offset_ + next_ * sizeof(T);
    for (size_t i = 0; i < n; ++i, p += sizeof(T)) {
      const T value = LoadLittleEndian<T>(p);
      bool ok;
      if constexpr (std::is_signed<T>::value) {
        ok = value > 0 && static_cast<int64_t>(value) <= kMaxLength;
      } else {
        ok = value > 0 &&
             static_cast<uint64_t>(value) <= static_cast<uint64_t>(kMaxLength);
      }
      if (!ok) {
        const std::string problem =
            value <= 0 ? NotPositive("length", absl::StrCat(value))
                       : TooLarge("length", absl::StrCat(value));
        return AtOffset(path_, p - file_->data(),
                        absl::StrCat("element ", next_ + i, ": ", problem));
      }
      out[i] = static_cast<int64_t>(value);
    }
    return absl::OkStatus();
  }

  const std::string path_;
  const std::unique_ptr<MappedFile> file_;
  const size_t offset_;
  const uint64_t count_;
  const ElementType type_;
  uint64_t next_ = 0;
};

}  // namespace

size_t ElementSize(ElementType type) {
  switch (type) {
    case ElementType::kInt32:
    case ElementType::kUint32:
      return 4;
    case ElementType::kInt64:
      return 8;
    case ElementType::kUint16:
      return 2;
  }
  return 0;
}

std::unique_ptr<LengthReader> NewMappedArrayReader(
    std::string path, std::unique_ptr<MappedFile> file, size_t offset,
    uint64_t count, ElementType type) {
  return std::make_unique<MappedArrayReader>(std::move(path), std::move(file),
                                             offset, count, type);
}

}  // namespace lengths_internal
}  // namespace dcp
