#include "fuzz/fuzz_support.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dcp {
namespace fuzz {

void Fail(absl::string_view problem) {
  std::fprintf(stderr, "\n==dcp-fuzz== %.*s\n",
               static_cast<int>(problem.size()), problem.data());
  std::fflush(stderr);
  std::abort();
}

void CheckClean(const absl::Status& status,
                std::initializer_list<absl::StatusCode> allowed,
                absl::string_view what) {
  if (status.ok()) return;
  bool listed = false;
  for (absl::StatusCode code : allowed)
    listed = listed || status.code() == code;
  if (!listed) {
    Fail(absl::StrCat(what,
                      " returned an unexpected code: ", status.ToString()));
  }
  if (status.message().empty()) {
    Fail(absl::StrCat(
        what, " returned an error without a message: ", status.ToString()));
  }
}

ScratchFile& ScratchFile::Get() {
  static ScratchFile* const file = new ScratchFile();
  return *file;
}

ScratchFile::ScratchFile() {
  fd_ = memfd_create("dcp-fuzz-input", MFD_CLOEXEC);
  if (fd_ >= 0 &&
      access(absl::StrCat("/proc/self/fd/", fd_).c_str(), R_OK) == 0) {
    path_ = absl::StrCat("/proc/self/fd/", fd_);
    return;
  }
  if (fd_ >= 0) close(fd_);
  const char* dir = std::getenv("TEST_TMPDIR");
  if (dir == nullptr) dir = std::getenv("TMPDIR");
  std::string path =
      absl::StrCat(dir != nullptr ? dir : "/tmp", "/dcp-fuzz-input-XXXXXX");
  fd_ = mkstemp(path.data());
  if (fd_ < 0) {
    Fail(absl::StrCat("cannot create a scratch file: ", std::strerror(errno)));
  }
  path_ = path;  // Left behind at exit; TEST_TMPDIR is the test's own.
}

void ScratchFile::Replace(absl::string_view contents) {
  if (ftruncate(fd_, 0) != 0) {
    Fail(absl::StrCat("cannot truncate ", path_, ": ", std::strerror(errno)));
  }
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = pwrite(fd_, contents.data() + done,
                             contents.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Fail(absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace fuzz
}  // namespace dcp
