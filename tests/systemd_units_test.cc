// deploy/systemd's unit files, checked by systemd itself, offline: no
// systemd runs here (nor in a container or a chroot), so the test lays out
// a root directory as the units would be installed (the units in
// /etc/systemd/system, the binaries at /opt/dcp/bin, the flags in
// /etc/dcp/*.env, and this machine's own systemd units, which the units
// depend on, in /usr/lib/systemd/system) and runs
//
//   systemd-analyze verify --man=no --root=ROOT dcp-scheduler.service
//   dcp-agent@0.service systemd-analyze security --offline=yes --root=ROOT
//   --threshold=N UNIT
//
// verify loads the units as systemd would and checks their syntax and
// dependencies and that ExecStart's binary exists under ROOT; it prints
// warnings (an unknown key, say) and still exits 0, so any output fails the
// test. The flags the units and their environment files pass must be flags
// the binaries define (their --helpfull).

#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/child_process.h"
#include "tests/deploy_checks.h"

namespace dcp {
namespace {

namespace fs = std::filesystem;
using testing_process::Binary;
using testing_process::CommandResult;
using testing_process::DefinedFlags;
using testing_process::FindProgram;
using testing_process::FlagsUsed;
using testing_process::ReadFile;
using testing_process::RunCommand;
using testing_process::TmpPath;
using testing_process::WriteFile;

constexpr char kScheduler[] = "dcp-scheduler.service";
constexpr char kAgent[] = "dcp-agent@.service";
constexpr char kRelay[] = "dcp-node-relay.service";
// systemd-analyze security's scale, times ten: 2.0 and below is what it
// calls "OK" (the units score 1.5 and 2.0 with systemd 252).
constexpr int kExposureThreshold = 20;

// Where this machine's systemd keeps its units (Debian 12: /lib is /usr/lib).
std::string SystemUnitDir() {
  for (const char* dir : {"/usr/lib/systemd/system", "/lib/systemd/system"}) {
    if (fs::exists(fs::path(dir) / "sysinit.target")) return dir;
  }
  return "";
}

class SystemdUnitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::optional<std::string> analyze = FindProgram("systemd-analyze");
    if (!analyze.has_value() || SystemUnitDir().empty()) {
      GTEST_SKIP() << "systemd-analyze or systemd's units are not installed; "
                      "tools/setup.sh installs them (Debian package systemd)";
    }
    analyze_ = *analyze;
    root_ = TmpPath("root");
    fs::remove_all(root_);
    fs::create_directories(root_ + "/etc/systemd/system");
    fs::create_directories(root_ + "/etc/dcp");
    fs::create_directories(root_ + "/opt/dcp/bin");
    fs::create_directories(root_ + "/usr/lib/systemd");
    fs::copy(SystemUnitDir(), root_ + "/usr/lib/systemd/system",
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    for (const char* unit : {kScheduler, kAgent, kRelay}) {
      fs::copy_file(Binary(absl::StrCat("deploy/systemd/", unit)),
                    root_ + "/etc/systemd/system/" + unit);
    }
    for (const char* env : {"scheduler.env", "agent.env", "node-relay.env"}) {
      fs::copy_file(Binary(absl::StrCat("deploy/systemd/", env)),
                    root_ + "/etc/dcp/" + env);
    }
    // Copies, not links: under --root, systemd resolves an absolute link
    // inside the root.
    for (const char* bin :
         {"scheduler/server/dcp-scheduler", "worker_agent/dcp-agent",
          "worker_agent/relay/dcp-node-relay"}) {
      fs::copy_file(Binary(bin), root_ + "/opt/dcp/bin/" +
                                     fs::path(bin).filename().string());
    }
  }

  CommandResult Verify(const std::vector<std::string>& units) {
    std::vector<std::string> argv = {analyze_, "verify", "--man=no",
                                     "--root=" + root_};
    argv.insert(argv.end(), units.begin(), units.end());
    return RunCommand("systemd-analyze-verify", argv);
  }

  std::string analyze_;
  std::string root_;
};

TEST_F(SystemdUnitsTest, VerifyFindsNothingToSay) {
  const CommandResult verify =
      Verify({kScheduler, "dcp-agent@0.service", kRelay});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  EXPECT_EQ(verify.out + verify.err, "");
}

// The check has teeth: what verify says about a misspelt key and a missing
// binary, in this same set-up.
TEST_F(SystemdUnitsTest, VerifyCatchesATypoAndAMissingBinary) {
  const std::string unit = root_ + "/etc/systemd/system/" + kScheduler;
  ASSERT_TRUE(WriteFile(
      unit, absl::StrReplaceAll(ReadFile(unit),
                                {{"ProtectHome=yes", "ProtectHme=yes"}})));
  const CommandResult typo = Verify({kScheduler});
  EXPECT_TRUE(
      absl::StrContains(typo.out + typo.err, "Unknown key 'ProtectHme'"))
      << typo.out << typo.err;

  fs::remove(root_ + "/opt/dcp/bin/dcp-agent");
  const CommandResult missing = Verify({"dcp-agent@3.service"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_TRUE(
      absl::StrContains(missing.out + missing.err, "/opt/dcp/bin/dcp-agent"))
      << missing.out << missing.err;
}

TEST_F(SystemdUnitsTest, HardenedAsSystemdJudgesIt) {
  for (const char* unit : {kScheduler, "dcp-agent@0.service", kRelay}) {
    const CommandResult security =
        RunCommand("systemd-analyze-security",
                   {analyze_, "security", "--offline=yes", "--root=" + root_,
                    absl::StrCat("--threshold=", kExposureThreshold), unit});
    EXPECT_EQ(security.exit_code, 0) << unit << " is more exposed than "
                                     << kExposureThreshold / 10.0 << ":\n"
                                     << security.out << security.err;
    EXPECT_TRUE(absl::StrContains(security.out, "Overall exposure level"))
        << security.out << security.err;
  }
  // What the issue asks for by name, in every unit.
  for (const char* unit : {kScheduler, kAgent, kRelay}) {
    const std::string text =
        ReadFile(Binary(absl::StrCat("deploy/systemd/", unit)));
    for (const char* line :
         {"DynamicUser=yes", "ProtectSystem=strict", "ProtectHome=yes",
          "PrivateTmp=yes", "NoNewPrivileges=yes", "Restart=on-failure",
          "RestartSec=", "StartLimitBurst=", "EnvironmentFile=/etc/dcp/"}) {
      EXPECT_TRUE(absl::StrContains(text, absl::StrCat("\n", line)))
          << unit << " lacks " << line;
    }
  }
  EXPECT_TRUE(absl::StrContains(
      ReadFile(Binary("deploy/systemd/dcp-scheduler.service")),
      "\nStateDirectory=dcp-scheduler\n"));
}

// Every flag a unit or its environment file passes is one the binary
// defines.
TEST_F(SystemdUnitsTest, EveryFlagIsTheBinarys) {
  struct Case {
    const char* binary;
    std::vector<const char*> files;
  };
  const Case cases[] = {
      {"scheduler/server/dcp-scheduler",
       {"deploy/systemd/dcp-scheduler.service",
        "deploy/systemd/scheduler.env"}},
      {"worker_agent/dcp-agent",
       {"deploy/systemd/dcp-agent@.service", "deploy/systemd/agent.env"}},
      {"worker_agent/relay/dcp-node-relay",
       {"deploy/systemd/dcp-node-relay.service",
        "deploy/systemd/node-relay.env"}},
  };
  for (const Case& c : cases) {
    const std::map<std::string, std::string> defined =
        DefinedFlags(Binary(c.binary));
    ASSERT_GT(defined.size(), 10u) << c.binary << " --helpfull listed no flags";
    for (const char* file : c.files) {
      std::string text;
      for (absl::string_view line :
           absl::StrSplit(ReadFile(Binary(file)), '\n')) {
        if (!absl::StartsWith(line, "#")) absl::StrAppend(&text, line, "\n");
      }
      const std::vector<std::string> used = FlagsUsed(text);
      EXPECT_FALSE(used.empty()) << file;
      for (const std::string& flag : used) {
        EXPECT_TRUE(defined.count(flag))
            << file << ": --" << flag << " is not a flag of " << c.binary;
      }
    }
  }
}

}  // namespace
}  // namespace dcp
