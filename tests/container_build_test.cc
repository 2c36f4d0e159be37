// deploy/container/Containerfile, two ways.
//
// The five lint tests (always): the file parsed instruction by instruction
// and held to what it promises and to this machine's Debian 12: every stage
// is based on Debian 12 (bookworm, slim for the runtime) or an earlier
// stage; COPY --from names an earlier stage; the build stage runs
// tools/setup.sh groups that exist and installs the binaries it builds;
// every binary a runtime stage ships finds the package of each library it
// loads (readelf NEEDED -> ldd -> dpkg -S, on the binaries Bazel built here)
// installed by that stage or in every Debian image; the runtime runs as a
// non-root user; EXPOSE is the scheduler's default gRPC and metrics ports
// (from its --helpfull); ENTRYPOINT is one of the shipped binaries; the
// build context leaves Bazel's outputs and .git out. No linter for
// Containerfiles is packaged for Debian 12 (hadolint is not), so these
// checks are this test's own.
//
// BuildsAndRunsWithBuildah (where buildah is installed and a Debian 12 base
// can be had offline): no registry is reachable, so the base image is
// imported from a Debian 12 root file system (DCP_CONTAINER_BASE_ROOTFS,
// default the minbase debootstrap of ../shared/tools/fresh_machine.sh,
// /root/.cache/fresh/root) into a container store of the test's own, and
// both runtime stages are built from it for real (their apt-get from
// Debian's mirror), with the build stage replaced by the binaries Bazel
// built here (buildah's --build-context build=DIR: the stage of that name
// is skipped), so the Bazel build inside the container is the one part not
// run (it would take tens of minutes). The image is then inspected (user,
// ports, entrypoint) and run: as its user, dcp-scheduler, two execute-mode
// dcp-agent processes and dcp-ctl train two steps, and dcp-train trains a
// job of two ranks. It skips, saying which, without buildah or a base.

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"
#include "tests/deploy_checks.h"

namespace dcp {
namespace {

namespace fs = std::filesystem;
using testing_process::Binary;
using testing_process::CommandResult;
using testing_process::DefinedFlags;
using testing_process::FindProgram;
using testing_process::NeededPackages;
using testing_process::ReadFile;
using testing_process::RequiredPackages;
using testing_process::RunCommand;
using testing_process::TailLines;
using testing_process::TmpPath;
using testing_process::WriteFile;

constexpr char kContainerfile[] = "deploy/container/Containerfile";
constexpr char kBinDir[] = "/opt/dcp/bin/";
constexpr char kDefaultRootfs[] = "/root/.cache/fresh/root";
// The runtime stages' apt-get (libtorch and its dependencies from Debian's
// mirror) dominates: about three minutes here.
constexpr absl::Duration kBuildPatience = absl::Minutes(12);

// ---- The Containerfile, parsed ---------------------------------------------

struct Instruction {
  std::string keyword;  // Upper case: "RUN".
  std::string args;     // Continuation lines joined, comments dropped.
};

struct Stage {
  std::string base;  // As written: "${DEBIAN_IMAGE}", "scheduler".
  std::string name;
  std::vector<Instruction> instructions;
};

struct Containerfile {
  /// ARGs before the first FROM, with their defaults.
  std::map<std::string, std::string> global_args;
  std::vector<Stage> stages;
  std::vector<std::string> errors;

  const Stage* Find(const std::string& name) const {
    for (const Stage& s : stages) {
      if (s.name == name) return &s;
    }
    return nullptr;
  }
  /// `stage` and the stages it is built on, base first.
  std::vector<const Stage*> Chain(const Stage& stage) const {
    std::vector<const Stage*> chain = {&stage};
    while (const Stage* base = Find(chain.front()->base)) {
      if (base == chain.front()) break;
      chain.insert(chain.begin(), base);
    }
    return chain;
  }
};

Containerfile Parse(const std::string& text) {
  static const std::set<std::string> kKeywords = {
      "ADD",    "ARG",        "CMD",         "COPY",   "ENTRYPOINT", "ENV",
      "EXPOSE", "FROM",       "HEALTHCHECK", "LABEL",  "ONBUILD",    "RUN",
      "SHELL",  "STOPSIGNAL", "USER",        "VOLUME", "WORKDIR"};
  Containerfile file;
  std::string logical;
  auto finish = [&file, &logical] {
    const std::string line(absl::StripAsciiWhitespace(logical));
    logical.clear();
    if (line.empty()) return;
    const size_t space = line.find_first_of(" \t");
    Instruction in;
    in.keyword = absl::AsciiStrToUpper(line.substr(0, space));
    in.args = space == std::string::npos
                  ? ""
                  : std::string(absl::StripAsciiWhitespace(line.substr(space)));
    if (!kKeywords.count(in.keyword)) {
      file.errors.push_back("unknown instruction: " + line);
      return;
    }
    if (in.keyword == "FROM") {
      const std::vector<std::string> words =
          absl::StrSplit(in.args, ' ', absl::SkipEmpty());
      Stage stage;
      stage.base = words.empty() ? "" : words[0];
      if (words.size() == 3 && absl::AsciiStrToUpper(words[1]) == "AS") {
        stage.name = words[2];
      }
      file.stages.push_back(stage);
    } else if (file.stages.empty()) {
      if (in.keyword != "ARG") {
        file.errors.push_back(in.keyword + " before the first FROM");
      }
      const std::vector<std::string> kv = absl::StrSplit(in.args, '=');
      file.global_args[kv[0]] = kv.size() > 1 ? kv[1] : "";
    } else {
      file.stages.back().instructions.push_back(in);
    }
  };
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    const absl::string_view stripped = absl::StripLeadingAsciiWhitespace(raw);
    if (absl::StartsWith(stripped, "#")) continue;  // Also inside a RUN.
    absl::string_view line = absl::StripTrailingAsciiWhitespace(raw);
    if (absl::ConsumeSuffix(&line, "\\")) {
      absl::StrAppend(&logical, line, " ");
      continue;
    }
    absl::StrAppend(&logical, line);
    finish();
  }
  finish();
  return file;
}

std::vector<std::string> Words(const std::string& text) {
  return absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
}

/// The packages of every `apt-get install` in `run`.
std::vector<std::string> AptInstalls(const std::string& run) {
  std::vector<std::string> packages;
  for (absl::string_view command : absl::StrSplit(run, "&&")) {
    const std::vector<std::string> words = Words(std::string(command));
    bool in_install = false;
    for (size_t i = 0; i < words.size(); ++i) {
      if (i > 0 && words[i - 1] == "apt-get" && words[i] == "install") {
        in_install = true;
      } else if (in_install && !absl::StartsWith(words[i], "-")) {
        packages.push_back(words[i]);
      }
    }
  }
  return packages;
}

/// COPY's --from, its sources and its destination.
struct Copy {
  std::string from;
  std::vector<std::string> sources;
  std::string dest;
};

Copy ParseCopy(const std::string& args) {
  Copy copy;
  std::vector<std::string> rest;
  for (const std::string& w : Words(args)) {
    if (absl::StartsWith(w, "--from=")) {
      copy.from = w.substr(7);
    } else if (!absl::StartsWith(w, "--")) {
      rest.push_back(w);
    }
  }
  if (!rest.empty()) {
    copy.dest = rest.back();
    rest.pop_back();
  }
  copy.sources = rest;
  return copy;
}

/// The dcp binaries `stage` (with the stages under it) has in /opt/dcp/bin.
std::set<std::string> ShippedBinaries(const Containerfile& file,
                                      const Stage& stage) {
  std::set<std::string> binaries;
  for (const Stage* s : file.Chain(stage)) {
    for (const Instruction& in : s->instructions) {
      if (in.keyword != "COPY") continue;
      const Copy copy = ParseCopy(in.args);
      if (copy.dest != kBinDir) continue;
      for (const std::string& source : copy.sources) {
        binaries.insert(fs::path(source).filename().string());
      }
    }
  }
  return binaries;
}

/// The `bazel build` labels of `stage`: "//worker_agent:dcp-agent".
std::vector<std::string> BazelTargets(const Stage& stage) {
  std::vector<std::string> labels;
  for (const Instruction& in : stage.instructions) {
    if (in.keyword != "RUN" || !absl::StrContains(in.args, "bazel build")) {
      continue;
    }
    for (const std::string& w : Words(in.args)) {
      if (absl::StartsWith(w, "//")) labels.push_back(w);
    }
  }
  return labels;
}

/// "//scheduler/server:dcp-scheduler" -> "scheduler/server/dcp-scheduler".
std::string LabelPath(const std::string& label) {
  std::string path = label.substr(2);
  const size_t colon = path.find(':');
  if (colon != std::string::npos) path[colon] = '/';
  return path;
}

/// The group names of tools/setup.sh's PACKAGE_GROUPS.
std::set<std::string> SetupGroups() {
  std::set<std::string> groups;
  for (absl::string_view line :
       absl::StrSplit(ReadFile(Binary("tools/setup.sh")), '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, "[")) continue;
    const size_t end = line.find("]=");
    if (end != absl::string_view::npos)
      groups.insert(std::string(line.substr(0, end)));
  }
  return groups;
}

class ContainerfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = Parse(ReadFile(Binary(kContainerfile)));
    ASSERT_TRUE(file_.errors.empty()) << absl::StrJoin(file_.errors, "\n");
    ASSERT_GE(file_.stages.size(), 2u);
    build_ = file_.Find("build");
    ASSERT_NE(build_, nullptr) << "no stage named build";
    // The label path of each binary the build stage builds, by name.
    for (const std::string& label : BazelTargets(*build_)) {
      const std::string path = LabelPath(label);
      built_[fs::path(path).filename().string()] = path;
    }
  }

  /// The stages that are not `build`: what an image is made of.
  std::vector<const Stage*> RuntimeStages() const {
    std::vector<const Stage*> stages;
    for (const Stage& s : file_.stages) {
      if (&s != build_) stages.push_back(&s);
    }
    return stages;
  }

  /// What the build stage would leave in /opt/dcp, staged in a folder of
  /// the test's: the binaries Bazel built here, and the data.
  std::string StageBuildOutputs() const {
    const std::string staged = TmpPath("build-stage");
    fs::create_directories(staged + "/opt/dcp/bin");
    fs::create_directories(staged + "/opt/dcp/data");
    for (const auto& [name, path] : built_) {
      fs::copy_file(Binary(path), staged + "/opt/dcp/bin/" + name);
    }
    for (const char* dir : {"lengths", "models"}) {
      fs::create_directories(staged + "/opt/dcp/data/" + dir);
      for (const auto& entry :
           fs::directory_iterator(Binary(std::string("data/") + dir))) {
        fs::copy_file(entry.path(), staged + "/opt/dcp/data/" + dir + "/" +
                                        entry.path().filename().string());
      }
    }
    return staged;
  }

  Containerfile file_;
  const Stage* build_ = nullptr;
  std::map<std::string, std::string> built_;
};

// Bases: Debian 12, through ARGs with defaults, or an earlier stage; COPY
// --from names an earlier stage.
TEST_F(ContainerfileTest, StagesStartFromDebian12OrAnEarlierStage) {
  std::set<std::string> earlier;
  for (const Stage& stage : file_.stages) {
    if (earlier.count(stage.base)) {
      EXPECT_NE(&stage, build_) << "the build stage starts from a stage";
    } else {
      absl::string_view arg = stage.base;
      ASSERT_TRUE(absl::ConsumePrefix(&arg, "${") &&
                  absl::ConsumeSuffix(&arg, "}"))
          << "stage " << stage.name << ": base " << stage.base
          << " is neither an ARG nor an earlier stage";
      const auto it = file_.global_args.find(std::string(arg));
      ASSERT_NE(it, file_.global_args.end()) << "no ARG " << arg;
      const std::string want =
          &stage == build_ ? "debian:bookworm" : "debian:bookworm-slim";
      EXPECT_TRUE(absl::EndsWith(it->second, "/" + want) || it->second == want)
          << "stage " << stage.name << ": " << arg << "=" << it->second
          << ", want " << want;
    }
    for (const Instruction& in : stage.instructions) {
      if (in.keyword != "COPY" && in.keyword != "ADD") continue;
      const Copy copy = ParseCopy(in.args);
      if (!copy.from.empty()) {
        EXPECT_TRUE(earlier.count(copy.from))
            << "stage " << stage.name << ": COPY --from=" << copy.from
            << " names no earlier stage";
      }
    }
    if (!stage.name.empty()) earlier.insert(stage.name);
  }
}

// The build stage: setup.sh's groups exist; what Bazel builds is what it
// installs into /opt/dcp/bin.
TEST_F(ContainerfileTest, BuildStageInstallsWhatItBuilds) {
  const std::set<std::string> groups = SetupGroups();
  ASSERT_TRUE(groups.count("build")) << "tools/setup.sh has no build group";
  bool ran_setup = false;
  std::set<std::string> installed;
  for (const Instruction& in : build_->instructions) {
    if (in.keyword != "RUN") continue;
    for (absl::string_view command : absl::StrSplit(in.args, "&&")) {
      const std::vector<std::string> words = Words(std::string(command));
      if (!words.empty() && words[0] == "tools/setup.sh") {
        ran_setup = true;
        for (size_t i = 1; i < words.size(); ++i) {
          EXPECT_TRUE(groups.count(words[i]))
              << "tools/setup.sh has no group " << words[i];
        }
      }
      if (words.size() > 1 && words[0] == "install" &&
          words.back() == kBinDir) {
        for (const std::string& w : words) {
          if (absl::StartsWith(w, "bazel-bin/")) installed.insert(w.substr(10));
        }
      }
    }
  }
  EXPECT_TRUE(ran_setup) << "the build stage does not run tools/setup.sh";
  ASSERT_FALSE(built_.empty()) << "the build stage runs no bazel build";
  std::set<std::string> built_paths;
  for (const auto& [name, path] : built_) built_paths.insert(path);
  EXPECT_EQ(installed, built_paths)
      << "what bazel builds and what is installed into " << kBinDir;
}

// The runtime stages: each binary found among what Bazel builds, each of its
// libraries' packages installed (or in every Debian image).
TEST_F(ContainerfileTest, RuntimeStagesInstallWhatTheirBinariesLoad) {
  const std::set<std::string> base = RequiredPackages();
  ASSERT_TRUE(base.count("libc6")) << "dpkg-query found no base packages";
  std::set<std::string> shipped_anywhere;
  for (const Stage* stage : RuntimeStages()) {
    std::set<std::string> packages;
    for (const Stage* s : file_.Chain(*stage)) {
      for (const Instruction& in : s->instructions) {
        if (in.keyword != "RUN") continue;
        for (const std::string& p : AptInstalls(in.args)) packages.insert(p);
      }
    }
    for (const std::string& binary : ShippedBinaries(file_, *stage)) {
      shipped_anywhere.insert(binary);
      const auto path = built_.find(binary);
      ASSERT_NE(path, built_.end())
          << "stage " << stage->name << " ships " << binary
          << ", which the build stage does not build";
      const std::map<std::string, std::string> needed =
          NeededPackages(Binary(path->second));
      EXPECT_GT(needed.size(), 3u) << binary << ": readelf found no NEEDED";
      for (const auto& [lib, package] : needed) {
        EXPECT_FALSE(package.empty()) << binary << ": no package owns " << lib;
        if (package.empty()) continue;
        EXPECT_TRUE(packages.count(package) || base.count(package))
            << "stage " << stage->name << ": " << binary << " loads " << lib
            << " of package " << package
            << ", which the stage does not install";
      }
    }
  }
  EXPECT_EQ(shipped_anywhere.size(), built_.size())
      << "a binary is built and shipped by no stage";
}

// The image (the last stage): a non-root user, the scheduler's default ports,
// an entrypoint it ships.
TEST_F(ContainerfileTest, ImageRunsAShippedBinaryAsNonRootOnDefaultPorts) {
  const Stage& image = file_.stages.back();
  std::string user;
  std::set<int> ports;
  std::string entrypoint;
  for (const Stage* s : file_.Chain(image)) {
    for (const Instruction& in : s->instructions) {
      if (in.keyword == "USER") user = in.args;
      if (in.keyword == "ENTRYPOINT") entrypoint = in.args;
      if (in.keyword == "EXPOSE") {
        for (const std::string& w : Words(in.args)) {
          int port = 0;
          EXPECT_TRUE(absl::SimpleAtoi(w.substr(0, w.find('/')), &port)) << w;
          ports.insert(port);
        }
      }
    }
  }
  const std::string uid = user.substr(0, user.find(':'));
  int uid_number = 0;
  EXPECT_TRUE(absl::SimpleAtoi(uid, &uid_number) && uid_number > 0)
      << "the image runs as USER " << user << ": want a numeric uid, not root";
  bool creates_user = false;
  for (const Stage* s : file_.Chain(image)) {
    for (const Instruction& in : s->instructions) {
      creates_user |= in.keyword == "RUN" &&
                      absl::StrContains(in.args, "useradd") &&
                      absl::StrContains(in.args, "--uid " + uid);
    }
  }
  EXPECT_TRUE(creates_user) << "no RUN useradd --uid " << uid;

  // The scheduler's default ports, as the binary says.
  const std::map<std::string, std::string> flags =
      DefinedFlags(Binary("scheduler/server/dcp-scheduler"));
  std::set<int> defaults;
  for (const char* flag : {"listen", "metrics_listen"}) {
    const auto it = flags.find(flag);
    ASSERT_NE(it, flags.end()) << "dcp-scheduler has no --" << flag;
    int port = 0;
    ASSERT_TRUE(
        absl::SimpleAtoi(it->second.substr(it->second.rfind(':') + 1), &port))
        << "--" << flag << " default " << it->second;
    defaults.insert(port);
  }
  EXPECT_EQ(ports, defaults) << "EXPOSE against dcp-scheduler's default ports";

  const nlohmann::json exec =
      nlohmann::json::parse(entrypoint, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(exec.is_array() && !exec.empty() && exec[0].is_string())
      << "ENTRYPOINT " << entrypoint << " is not in exec (JSON) form";
  const std::string program = exec[0].get<std::string>();
  EXPECT_TRUE(absl::StartsWith(program, kBinDir) &&
              ShippedBinaries(file_, image)
                  .count(fs::path(program).filename().string()))
      << "ENTRYPOINT " << program << " is no binary the image ships";
}

// COPY . . must not carry Bazel's outputs or git into the build.
TEST_F(ContainerfileTest, DockerignoreKeepsOutputsAndGitOut) {
  const std::string ignore = ReadFile(Binary(".dockerignore"));
  for (const char* pattern : {".git", "bazel-*"}) {
    EXPECT_TRUE(absl::StrContains(absl::StrCat("\n", ignore),
                                  absl::StrCat("\n", pattern, "\n")))
        << ".dockerignore lacks " << pattern;
  }
}

// ---- A real build
// ------------------------------------------------------------

/// buildah on a container store of the test's own.
class Buildah {
 public:
  Buildah(std::string program, std::string store, std::string driver)
      : program_(std::move(program)),
        store_(std::move(store)),
        driver_(std::move(driver)) {}

  CommandResult operator()(const std::string& name,
                           const std::vector<std::string>& args,
                           absl::Duration timeout = absl::Minutes(2)) const {
    std::vector<std::string> argv = {program_, "--root=" + store_ + "/root",
                                     "--runroot=" + store_ + "/run",
                                     "--storage-driver=" + driver_};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(name, argv, timeout);
  }

 private:
  std::string program_;
  std::string store_;
  std::string driver_;
};

std::string Explain(const CommandResult& r) {
  return absl::StrCat("exit ", r.exit_code, r.timed_out ? " (timed out)" : "",
                      "\nstdout (last lines):\n", TailLines(r.out, 30),
                      "\nstderr (last lines):\n", TailLines(r.err, 30));
}

// What the image runs as its user: the daemons of a two-rank job, then
// dcp-train. The scheduler's port file is polled at 0.1 s, bounded by a
// deadline (the image has no other way to wait on it).
constexpr char kJobInImage[] = R"sh(set -eu
data=/opt/dcp/data
echo "uid $(id -u)"
dcp-scheduler --lengths=$data/lengths/wikipedia.txt \
  --model_config=$data/models/cpu-tiny.json --world_size=2 --window=128 \
  --tokens_per_step=512 --max_steps=2 --listen=127.0.0.1:0 \
  --port_file=/tmp/port --metrics_listen= --state_dir=/var/lib/dcp/state \
  2>/tmp/scheduler.log &
scheduler=$!
deadline=$((SECONDS + 60))
until [ -s /tmp/port ]; do
  kill -0 $scheduler || { cat /tmp/scheduler.log; exit 1; }
  [ $SECONDS -lt $deadline ] || { echo "no port"; exit 1; }
  sleep 0.1
done
address=127.0.0.1:$(cat /tmp/port)
dcp-agent --scheduler=$address --rank=0 --world_size=2 --mode=execute \
  --model_config=$data/models/cpu-tiny.json --token_scale=1 --task_clock=cpu &
a0=$!
dcp-agent --scheduler=$address --rank=1 --world_size=2 --mode=execute \
  --model_config=$data/models/cpu-tiny.json --token_scale=1 --task_clock=cpu &
a1=$!
wait $a0 && wait $a1
dcp-ctl --scheduler=$address --json status | tr -d '\n' | sed 's/^/status: /'
echo
dcp-ctl --scheduler=$address stop
wait $scheduler
echo "state files: $(ls /var/lib/dcp/state | wc -l)"
dcp-train --mode=dcp --local_world=2 --steps=2 \
  --lengths=$data/lengths/wikipedia.txt --model_config=$data/models/cpu-tiny.json
echo "job done"
)sh";

// The Debian 12 root file system the image's bases are made of, or nothing
// (and why) where none can be had offline.
std::optional<std::string> BaseRootfs(std::string* why) {
  const char* env_rootfs = std::getenv("DCP_CONTAINER_BASE_ROOTFS");
  const std::string rootfs = env_rootfs != nullptr && *env_rootfs != '\0'
                                 ? env_rootfs
                                 : kDefaultRootfs;
  const std::string version = ReadFile(rootfs + "/etc/debian_version");
  if (absl::StartsWith(version, "12") && fs::exists(rootfs + "/bin/bash")) {
    return rootfs;
  }
  *why = absl::StrCat(
      "no Debian 12 base image can be had offline: ", rootfs,
      " is no Debian 12 root file system (no registry is reachable; set "
      "DCP_CONTAINER_BASE_ROOTFS to one, e.g. made by `debootstrap "
      "--variant=minbase bookworm DIR`, or run "
      "../shared/tools/fresh_machine.sh once); only the Containerfile's lint "
      "tests checked it, nothing was built");
  return std::nullopt;
}

// overlay where this kernel allows it, else vfs (whole copies per layer:
// slower, gigabytes).
std::string StorageDriver(const std::string& buildah,
                          const std::string& store) {
  const Buildah probe(buildah, store, "overlay");
  if (probe("buildah-probe", {"from", "scratch"}).exit_code != 0) return "vfs";
  probe("buildah-probe-rm", {"rm", "--all"});
  return "overlay";
}

// Commits the root file system, as one layer, as `image`.
void CommitBaseImage(const Buildah& run, const std::string& rootfs,
                     const std::string& image) {
  const std::string tar = TmpPath("base.tar");
  const CommandResult packed =
      RunCommand("tar-base",
                 {"/bin/tar", "-C", rootfs, "--exclude=./proc/*",
                  "--exclude=./sys/*", "--exclude=./dev/*", "-cf", tar, "."},
                 absl::Minutes(3));
  ASSERT_EQ(packed.exit_code, 0) << Explain(packed);
  const CommandResult ctr = run("buildah-from-scratch", {"from", "scratch"});
  ASSERT_EQ(ctr.exit_code, 0) << Explain(ctr);
  const std::string base_ctr(absl::StripAsciiWhitespace(ctr.out));
  const CommandResult added =
      run("buildah-add-base", {"add", base_ctr, tar, "/"}, absl::Minutes(5));
  ASSERT_EQ(added.exit_code, 0) << Explain(added);
  const CommandResult committed = run(
      "buildah-commit-base", {"commit", "-q", base_ctr, image}, absl::Minutes(5));
  ASSERT_EQ(committed.exit_code, 0) << Explain(committed);
  fs::remove(tar);
}

// The image's configuration: its user, entrypoint and ports.
void ExpectImageConfig(const Buildah& run, const std::string& image) {
  const CommandResult inspected =
      run("buildah-inspect", {"inspect", "--type", "image", image});
  ASSERT_EQ(inspected.exit_code, 0) << Explain(inspected);
  const nlohmann::json config = nlohmann::json::parse(
      inspected.out, nullptr, /*allow_exceptions=*/false)["OCIv1"]["config"];
  ASSERT_TRUE(config.is_object()) << inspected.out;
  EXPECT_EQ(config["User"], "10001:10001");
  EXPECT_EQ(config["Entrypoint"],
            nlohmann::json::array({"/opt/dcp/bin/dcp-scheduler"}));
  EXPECT_EQ(config["ExposedPorts"],
            nlohmann::json({{"50051/tcp", nlohmann::json::object()},
                            {"9464/tcp", nlohmann::json::object()}}));
}

// Runs kJobInImage in a container of `image` and checks what it printed.
void ExpectJobRunsInImage(const Buildah& run, const std::string& image) {
  const CommandResult from = run("buildah-from", {"from", image});
  ASSERT_EQ(from.exit_code, 0) << Explain(from);
  const std::string container(absl::StripAsciiWhitespace(from.out));
  const CommandResult job = run("buildah-run-job",
                                {"run", "--isolation=chroot", container, "--",
                                 "/bin/bash", "-c", kJobInImage},
                                absl::Minutes(3));
  ASSERT_EQ(job.exit_code, 0) << Explain(job);
  EXPECT_TRUE(absl::StrContains(job.out, "uid 10001\n")) << Explain(job);
  EXPECT_TRUE(absl::StrContains(job.out, "\"completed_steps\": \"2\""))
      << Explain(job);
  EXPECT_TRUE(absl::StrContains(job.out + job.err, "2 ranks trained 2 steps"))
      << Explain(job);
  EXPECT_TRUE(absl::StrContains(job.out, "job done")) << Explain(job);
}

TEST_F(ContainerfileTest, BuildsAndRunsWithBuildah) {
  const std::optional<std::string> buildah = FindProgram("buildah");
  if (!buildah.has_value()) {
    std::fprintf(stderr, "SKIPPED: buildah is not installed\n");
    GTEST_SKIP() << "buildah is not installed (tools/setup.sh installs it); "
                    "only the Containerfile's lint tests checked it";
  }
  std::string why;
  const std::optional<std::string> rootfs = BaseRootfs(&why);
  if (!rootfs.has_value()) {
    std::fprintf(stderr, "SKIPPED: %s\n", why.c_str());
    GTEST_SKIP() << why;
  }

  // A store of the test's own.
  const std::string store = TmpPath("containers");
  const Buildah run(*buildah, store, StorageDriver(*buildah, store));
  struct Cleanup {
    const Buildah& run;
    std::string store;
    ~Cleanup() {
      run("buildah-rm", {"rm", "--all"});
      run("buildah-rmi", {"rmi", "--all", "--force"});
      std::error_code ignored;
      fs::remove_all(store, ignored);
    }
  } cleanup{run, store};

  const std::string base_image = "localhost/dcp-test-base:bookworm";
  CommitBaseImage(run, *rootfs, base_image);
  ASSERT_FALSE(HasFatalFailure());
  // The context the runtime stages see: nothing (only the skipped build
  // stage reads the repository).
  const std::string context = TmpPath("context");
  fs::create_directories(context);

  const std::string image = "localhost/dcp:test";
  const absl::Time start = absl::Now();
  const CommandResult built =
      run("buildah-bud",
          {"bud", "--isolation=chroot", "--layers=false",
           "--build-context=build=" + StageBuildOutputs(),
           "--build-arg=DEBIAN_IMAGE=" + base_image,
           "--build-arg=DEBIAN_SLIM_IMAGE=" + base_image, "--file",
           Binary(kContainerfile), "--tag", image, context},
          kBuildPatience);
  ASSERT_EQ(built.exit_code, 0) << Explain(built);
  std::fprintf(stderr, "built %s in %.0f s\n", image.c_str(),
               absl::ToDoubleSeconds(absl::Now() - start));
  EXPECT_FALSE(absl::StrContains(built.out + built.err, " AS build"))
      << "the build stage ran: --build-context did not replace it";

  ExpectImageConfig(run, image);
  ExpectJobRunsInImage(run, image);
}

}  // namespace
}  // namespace dcp
