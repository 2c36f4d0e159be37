#include "scheduler/lengths/line_reader.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "scheduler/lengths/reader_support.h"

namespace dcp {
namespace lengths_internal {
namespace {

bool IsBlank(absl::string_view line) {
  return std::all_of(line.begin(), line.end(),
                     [](char c) { return c == ' ' || c == '\t'; });
}

}  // namespace

absl::StatusOr<std::unique_ptr<LineReader>> LineReader::Open(
    const std::string& path, size_t buffer_bytes) {
  ASSIGN_OR_RETURN(const int fd, OpenReadOnly(path));
  return absl::WrapUnique(new LineReader(path, fd, buffer_bytes));
}

LineReader::LineReader(std::string path, int fd, size_t buffer_bytes)
    : path_(std::move(path)),
      fd_(fd),
      read_bytes_(buffer_bytes),
      capacity_(buffer_bytes),
      buffer_(new char[buffer_bytes]) {}

LineReader::~LineReader() { close(fd_); }

absl::StatusOr<bool> LineReader::Next(absl::string_view* line) {
  for (;;) {
    char* const buf = buffer_.get();
    const void* newline = memchr(buf + scanned_, '\n', end_ - scanned_);
    if (newline != nullptr) {
      const size_t pos = static_cast<const char*>(newline) - buf;
      *line = absl::string_view(buf + begin_, pos - begin_);
      begin_ = scanned_ = pos + 1;
      Finish(line);
      return true;
    }
    scanned_ = end_;
    if (eof_) {
      if (begin_ == end_) return false;
      *line = absl::string_view(buf + begin_, end_ - begin_);
      begin_ = scanned_ = end_;
      Finish(line);
      return true;
    }
    RETURN_IF_ERROR(Fill());
  }
}

absl::StatusOr<bool> LineReader::NextNonBlank(absl::string_view* line) {
  for (;;) {
    ASSIGN_OR_RETURN(const bool more, Next(line));
    if (!more) return false;
    if (!IsBlank(*line)) break;
    if (first_blank_ == 0) first_blank_ = line_number_;
  }
  if (first_blank_ != 0) {
    return AtLine(path_, first_blank_,
                  "blank line (blank lines are allowed only at the end of the "
                  "file)");
  }
  return true;
}

absl::Status LineReader::Error(absl::string_view problem) const {
  return AtLine(path_, line_number_, problem);
}

void LineReader::Finish(absl::string_view* line) {
  ++line_number_;
  if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
  if (line_number_ == 1 && absl::StartsWith(*line, "\xEF\xBB\xBF")) {
    line->remove_prefix(3);
  }
}

// Moves the partial line to the front and reads more after it, growing the
// buffer when the partial line fills it.
absl::Status LineReader::Fill() {
  if (begin_ > 0) {
    memmove(buffer_.get(), buffer_.get() + begin_, end_ - begin_);
    end_ -= begin_;
    scanned_ -= begin_;
    begin_ = 0;
  }
  if (end_ == capacity_) {
    if (capacity_ >= kMaxLineBytes) {
      return AtLine(
          path_, line_number_ + 1,
          absl::StrCat("line longer than ", kMaxLineBytes >> 20, " MiB"));
    }
    const size_t capacity = std::min(capacity_ * 2, kMaxLineBytes);
    std::unique_ptr<char[]> bigger(new char[capacity]);
    memcpy(bigger.get(), buffer_.get(), end_);
    buffer_ = std::move(bigger);
    capacity_ = capacity;
  }
  const size_t want = std::min(capacity_ - end_, read_bytes_);
  ssize_t n;
  do {
    n = read(fd_, buffer_.get() + end_, want);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoError(errno, "read", path_);
  if (n == 0) {
    eof_ = true;
  } else {
    end_ += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace lengths_internal
}  // namespace dcp
