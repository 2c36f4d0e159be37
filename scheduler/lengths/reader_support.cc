#include "scheduler/lengths/reader_support.h"

#include <fcntl.h>

#include <cerrno>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace dcp {
namespace lengths_internal {

std::string Quote(absl::string_view text) {
  constexpr size_t kMaxShown = 40;
  if (text.size() > kMaxShown) {
    return absl::StrCat("\"", absl::CHexEscape(text.substr(0, kMaxShown)),
                        "\"...");
  }
  return absl::StrCat("\"", absl::CHexEscape(text), "\"");
}

std::string ShownNumber(absl::string_view text) {
  return text.size() <= 24 ? std::string(text) : Quote(text);
}

std::string NotPositive(absl::string_view what, absl::string_view shown) {
  return absl::StrCat(what, " must be positive, got ", shown);
}

std::string TooLarge(absl::string_view what, absl::string_view shown) {
  return absl::StrCat(what, " ", shown, " is larger than the int32 maximum ",
                      kMaxLength);
}

absl::Status AtLine(absl::string_view path, int64_t line,
                    absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ":", line, ": ", problem));
}

absl::Status AtOffset(absl::string_view path, uint64_t offset,
                      absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": byte offset ", offset, ": ", problem));
}

absl::Status ErrnoError(int error_number, absl::string_view action,
                        absl::string_view path) {
  return absl::ErrnoToStatus(error_number,
                             absl::StrCat("cannot ", action, " ", path));
}

absl::StatusOr<int> OpenReadOnly(const std::string& path) {
  int fd;
  do {
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return ErrnoError(errno, "open", path);
  return fd;
}

absl::StatusOr<int64_t> ParsePositiveInt(absl::string_view text,
                                         absl::string_view what) {
  const bool negative = !text.empty() && text[0] == '-';
  const absl::string_view digits = negative ? text.substr(1) : text;
  const auto not_an_integer = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected a non-negative integer ", what, ", got ", Quote(text)));
  };
  if (digits.empty()) return not_an_integer();
  bool overflow = false;
  int64_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return not_an_integer();
    value = value * 10 + (c - '0');
    if (value > kMaxLength) {
      overflow = true;
      value = kMaxLength + 1;  // Saturate; the digits are still checked.
    }
  }
  // All digits here; only a pathologically long number needs cutting.
  if (negative || value == 0) {
    return absl::InvalidArgumentError(NotPositive(what, ShownNumber(text)));
  }
  if (overflow) {
    return absl::InvalidArgumentError(TooLarge(what, ShownNumber(text)));
  }
  return value;
}

}  // namespace lengths_internal
}  // namespace dcp
