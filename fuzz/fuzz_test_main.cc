// main() of a fuzz target's regression test (dcp_fuzz_test in defs.bzl):
// runs LLVMFuzzerTestOneInput once on every file named on the command line
// or found under a directory named there, e.g. the seed corpus and the
// inputs of past crashes. A crash or a failed check aborts with the file
// named just before it on stderr. Relative paths are also looked up in
// the directory `bazel run` was started from, so
//
//   bazel run //fuzz:plan_file_fuzzer -- crash-1234abcd
//
// replays one input under the regular build.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc,
                                                          char*** argv);

namespace {

namespace fs = std::filesystem;

fs::path Resolve(const fs::path& path) {
  std::error_code error;
  if (path.is_absolute() || fs::exists(path, error)) return path;
  if (const char* dir = std::getenv("BUILD_WORKING_DIRECTORY")) {
    fs::path there = fs::path(dir) / path;
    if (fs::exists(there, error)) return there;
  }
  return path;
}

// The files under `path` (or `path` itself), sorted.
bool Collect(const fs::path& path, std::vector<fs::path>* files) {
  std::error_code error;
  if (fs::is_regular_file(path, error)) {
    files->push_back(path);
    return true;
  }
  if (!fs::is_directory(path, error)) {
    std::fprintf(stderr, "fuzz_test_main: %s is neither a file nor a folder\n",
                 path.c_str());
    return false;
  }
  std::vector<fs::path> found;
  for (fs::recursive_directory_iterator it(path, error), end;
       !error && it != end; it.increment(error)) {
    if (it->is_regular_file(error)) found.push_back(it->path());
  }
  if (error) {
    std::fprintf(stderr, "fuzz_test_main: cannot list %s: %s\n", path.c_str(),
                 error.message().c_str());
    return false;
  }
  std::sort(found.begin(), found.end());
  files->insert(files->end(), found.begin(), found.end());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_FOLDER...\n", argv[0]);
    return 2;
  }
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    if (!Collect(Resolve(argv[i]), &files)) return 1;
  }
  if (files.empty()) {
    std::fprintf(stderr, "fuzz_test_main: no inputs found\n");
    return 1;
  }
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "fuzz_test_main: cannot read %s\n", file.c_str());
      return 1;
    }
    std::fprintf(stderr, "input %s (%zu bytes)\n", file.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                           bytes.size());
  }
  std::printf("%zu inputs ran without a failure\n", files.size());
  return 0;
}
