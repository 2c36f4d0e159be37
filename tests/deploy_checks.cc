#include "tests/deploy_checks.h"

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <regex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "tests/child_process.h"

namespace dcp {
namespace testing_process {

std::optional<std::string> FindProgram(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::vector<std::string> dirs =
      absl::StrSplit(path == nullptr ? "" : path, ':', absl::SkipEmpty());
  for (const char* dir :
       {"/usr/sbin", "/sbin", "/usr/local/sbin", "/usr/bin", "/bin"}) {
    dirs.push_back(dir);
  }
  for (const std::string& dir : dirs) {
    const std::string candidate = dir + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

CommandResult RunCommand(const std::string& name,
                         const std::vector<std::string>& argv,
                         absl::Duration timeout) {
  CommandResult result;
  std::vector<Child> one = {Spawn(name, argv)};
  if (!WaitAll(one, absl::Now() + timeout)) {
    KillAll(one);
    result.timed_out = true;
  }
  result.exit_code = result.timed_out ? -1 : one[0].exit_code;
  result.out = ReadFile(one[0].out_path);
  result.err = ReadFile(one[0].err_path);
  return result;
}

std::string TailLines(const std::string& text, int lines) {
  std::vector<std::string> all = absl::StrSplit(text, '\n');
  while (!all.empty() && all.back().empty()) all.pop_back();
  if (static_cast<int>(all.size()) > lines) {
    all.erase(all.begin(), all.end() - lines);
  }
  return absl::StrJoin(all, "\n");
}

std::map<std::string, std::string> DefinedFlags(const std::string& binary) {
  // absl's --helpfull: an entry per flag, "    --name (help...); default:
  // VALUE;", the help wrapped over indented lines.
  const std::string name = std::filesystem::path(binary).filename().string();
  const CommandResult help =
      RunCommand(name + "-helpfull", {binary, "--helpfull"});
  const std::string text = help.out + help.err;
  static const std::regex kEntry(R"(^    --([A-Za-z0-9_]+) \()");
  std::map<std::string, std::string> flags;
  std::string current;
  std::string entry;
  auto finish = [&flags, &current, &entry] {
    if (current.empty()) return;
    std::string value;
    const size_t at = entry.rfind("default: ");
    if (at != std::string::npos) {
      absl::string_view v =
          absl::StripAsciiWhitespace(absl::string_view(entry).substr(at + 9));
      absl::ConsumeSuffix(&v, ";");
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') {
        v = v.substr(1, v.size() - 2);
      }
      value = std::string(v);
    }
    flags[current] = value;
  };
  for (absl::string_view piece : absl::StrSplit(text, '\n')) {
    const std::string line(piece);
    std::smatch m;
    if (std::regex_search(line, m, kEntry)) {
      finish();
      current = m[1];
      entry = line;
    } else if (!current.empty() && absl::StartsWith(line, "      ")) {
      entry += " " + std::string(absl::StripAsciiWhitespace(line));
    } else {
      finish();
      current.clear();
    }
  }
  finish();
  return flags;
}

std::vector<std::string> FlagsUsed(const std::string& text) {
  static const std::regex kFlag(
      R"((^|[\s"'\[,])--([A-Za-z0-9_]+)(=|\s|$|"|'))");
  std::vector<std::string> names;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kFlag);
       it != std::sregex_iterator(); ++it) {
    names.push_back((*it)[2]);
  }
  return names;
}

namespace {

// The spellings of `path` dpkg may list it under: as given, resolved, and
// with or without /usr (Debian 12 merged /usr; packages list either).
std::vector<std::string> Spellings(const std::string& path) {
  std::vector<std::string> spellings = {path};
  std::error_code ignored;
  const std::string real = std::filesystem::canonical(path, ignored).string();
  if (!real.empty() && real != path) spellings.push_back(real);
  for (const std::string& p : std::vector<std::string>(spellings)) {
    spellings.push_back(absl::StartsWith(p, "/usr/") ? p.substr(4)
                                                     : "/usr" + p);
  }
  return spellings;
}

// The owning package of each of `paths` dpkg knows, in one dpkg -S (which
// reads its whole database each time it runs).
std::map<std::string, std::string> OwningPackages(
    const std::set<std::string>& paths) {
  std::map<std::string, std::string> owners;
  if (paths.empty()) return owners;
  std::vector<std::string> argv = {"/usr/bin/dpkg", "-S"};
  argv.insert(argv.end(), paths.begin(), paths.end());
  // Exits 1 when some path has no package; the others are still listed,
  // one a line: "libfoo1:amd64: /usr/lib/x86_64-linux-gnu/libfoo.so.1".
  const CommandResult result = RunCommand("dpkg-S", argv);
  for (absl::string_view line : absl::StrSplit(result.out, '\n')) {
    const size_t sep = line.find(": ");
    if (sep == absl::string_view::npos) continue;
    const absl::string_view package = line.substr(0, line.find(':'));
    for (absl::string_view path : absl::StrSplit(line.substr(sep + 2), ", ")) {
      owners[std::string(path)] = std::string(package);
    }
  }
  return owners;
}

}  // namespace

std::map<std::string, std::string> NeededPackages(const std::string& binary) {
  std::map<std::string, std::string> packages;
  const std::optional<std::string> readelf = FindProgram("readelf");
  const std::optional<std::string> ldd = FindProgram("ldd");
  if (!readelf.has_value() || !ldd.has_value()) return packages;
  static const std::regex kNeeded(
      R"(\(NEEDED\)\s+Shared library: \[([^\]]+)\])");
  const std::string dynamic =
      RunCommand("readelf-d", {*readelf, "-d", binary}).out;
  // ldd: "\tlibfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)", or
  // "\t/lib64/ld-linux-x86-64.so.2 (0x...)" for the loader.
  std::map<std::string, std::string> resolved;
  for (absl::string_view line :
       absl::StrSplit(RunCommand("ldd", {*ldd, binary}).out, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    const std::vector<std::string> words =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.size() >= 3 && words[1] == "=>") {
      resolved[words[0]] = words[2];
    } else if (!words.empty() && absl::StartsWith(words[0], "/")) {
      resolved[std::filesystem::path(words[0]).filename().string()] = words[0];
    }
  }
  std::map<std::string, std::string> lib_paths;
  std::set<std::string> lookups;
  for (auto it = std::sregex_iterator(dynamic.begin(), dynamic.end(), kNeeded);
       it != std::sregex_iterator(); ++it) {
    const std::string lib = (*it)[1];
    const auto path = resolved.find(lib);
    lib_paths[lib] = path == resolved.end() ? "" : path->second;
    if (path == resolved.end()) continue;
    for (const std::string& p : Spellings(path->second)) lookups.insert(p);
  }
  const std::map<std::string, std::string> owners = OwningPackages(lookups);
  for (const auto& [lib, path] : lib_paths) {
    std::string& package = packages[lib];
    if (path.empty()) continue;
    for (const std::string& p : Spellings(path)) {
      const auto owner = owners.find(p);
      if (owner != owners.end()) {
        package = owner->second;
        break;
      }
    }
  }
  return packages;
}

std::set<std::string> RequiredPackages() {
  // A minbase or slim image holds the packages of priority "required" (and
  // the Essential ones) with what they depend on: their closure over
  // Depends and Pre-Depends among the packages installed here.
  const CommandResult list = RunCommand(
      "dpkg-query-required",
      {"/usr/bin/dpkg-query", "-W",
       "-f=${Package}\t${db:Status-Status}\t${Essential}\t${Priority}\t"
       "${Pre-Depends}, ${Depends}\n"});
  std::map<std::string, std::vector<std::string>> depends;
  std::vector<std::string> todo;
  for (absl::string_view line : absl::StrSplit(list.out, '\n')) {
    const std::vector<std::string> fields = absl::StrSplit(line, '\t');
    if (fields.size() != 5 || fields[1] != "installed") continue;
    std::vector<std::string>& deps = depends[fields[0]];
    // "libc6 (>= 2.34), libgcc-s1 | libgcc1, perl:any": every alternative;
    // the closure below keeps the installed ones.
    for (absl::string_view dep :
         absl::StrSplit(fields[4], absl::ByAnyChar(",|"))) {
      dep = absl::StripAsciiWhitespace(dep);
      dep = dep.substr(0, dep.find_first_of(" :("));
      if (!dep.empty()) deps.emplace_back(dep);
    }
    if (fields[2] == "yes" || fields[3] == "required")
      todo.push_back(fields[0]);
  }
  std::set<std::string> closure;
  while (!todo.empty()) {
    const std::string package = todo.back();
    todo.pop_back();
    const auto it = depends.find(package);
    if (it == depends.end() || !closure.insert(package).second) continue;
    for (const std::string& dep : it->second) todo.push_back(dep);
  }
  return closure;
}

}  // namespace testing_process
}  // namespace dcp
