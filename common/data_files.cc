#include "common/data_files.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace dcp {
namespace {

std::string EnvOrEmpty(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

std::string Join(const std::string& dir, const std::string& path) {
  return (std::filesystem::path(dir) / path).string();
}

}  // namespace

std::string BazelWorkingDirectory() {
  return EnvOrEmpty("BUILD_WORKING_DIRECTORY");
}

std::string ResolvePath(const std::string& path,
                        const std::string& working_dir) {
  if (path.empty() || path[0] == '/' || working_dir.empty()) return path;
  return working_dir + "/" + path;
}

DataFileRoots DataFileRoots::OfThisProcess() {
  DataFileRoots roots;
  roots.user_dir = BazelWorkingDirectory();
  roots.runfiles_dir = EnvOrEmpty("RUNFILES_DIR");
  std::error_code error;
  const std::filesystem::path exe =
      std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) roots.executable = exe.string();
  return roots;
}

std::vector<std::string> DataFileCandidates(const std::string& path,
                                            const DataFileRoots& roots) {
  if (path.empty()) return {};
  if (path[0] == '/') return {path};
  std::vector<std::string> out;
  if (!roots.user_dir.empty()) out.push_back(Join(roots.user_dir, path));
  out.push_back(path);
  if (!roots.runfiles_dir.empty()) {
    out.push_back(Join(Join(roots.runfiles_dir, "dcp"), path));
  }
  if (!roots.executable.empty()) {
    out.push_back(Join(roots.executable + ".runfiles/dcp", path));
    std::filesystem::path dir =
        std::filesystem::path(roots.executable).parent_path();
    while (!dir.empty()) {
      out.push_back(Join(dir.string(), path));
      if (dir == dir.root_path()) break;
      dir = dir.parent_path();
    }
  }
  return out;
}

std::string FindDataFile(const std::string& path, const DataFileRoots& roots) {
  for (const std::string& candidate : DataFileCandidates(path, roots)) {
    std::error_code error;
    if (std::filesystem::exists(candidate, error)) return candidate;
  }
  return ResolvePath(path, roots.user_dir);
}

std::string FindDataFile(const std::string& path) {
  return FindDataFile(path, DataFileRoots::OfThisProcess());
}

std::string ResolveInput(const std::string& path,
                         const std::string& working_dir) {
  DataFileRoots roots = DataFileRoots::OfThisProcess();
  roots.user_dir = working_dir;
  return FindDataFile(path, roots);
}

}  // namespace dcp
