#include "scheduler/lengths/mapped_file.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "scheduler/lengths/reader_support.h"

namespace dcp {
namespace lengths_internal {

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(
    const std::string& path, absl::string_view magic,
    absl::string_view description) {
  ASSIGN_OR_RETURN(const int fd, OpenReadOnly(path));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int error_number = errno;
    close(fd);
    return ErrnoError(error_number, "stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* data = nullptr;
  if (size > 0) {
    data = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      const int error_number = errno;
      close(fd);
      return ErrnoError(error_number, "mmap", path);
    }
    // Pages behind the reader can be dropped early.
    madvise(data, size, MADV_SEQUENTIAL);
  }
  close(fd);  // The mapping keeps the file open.
  auto file = absl::WrapUnique(new MappedFile(data, size));
  const absl::string_view head(reinterpret_cast<const char*>(file->data()),
                               std::min(size, magic.size()));
  if (head != magic) {
    return AtOffset(path, 0,
                    absl::StrCat("bad magic: expected ", Quote(magic), " (",
                                 description, "), got ", Quote(head)));
  }
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(data_, size_);
}

}  // namespace lengths_internal
}  // namespace dcp
