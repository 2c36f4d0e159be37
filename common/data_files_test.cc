#include "common/data_files.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/test_files.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

namespace fs = std::filesystem;

void Touch(const fs::path& path) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << "{}";
}

// A fresh folder of the test's own.
fs::path Fresh(const std::string& name) {
  const fs::path dir = TestTmpPath(name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(DataFilesTest, AnInstalledBinaryFindsTheDataBesideItsFolder) {
  // /opt/dcp/bin/dcp-train next to /opt/dcp/data, as deploy/container lays
  // it out.
  const fs::path root = Fresh("installed");
  // (A name the test's own runfiles, its working directory, do not hold.)
  const fs::path model = root / "opt/dcp/data/models/installed.json";
  Touch(model);
  DataFileRoots roots;
  roots.executable = (root / "opt/dcp/bin/dcp-train").string();
  EXPECT_EQ(fs::path(FindDataFile("data/models/installed.json", roots)), model);
}

TEST(DataFilesTest, ABazelBinBinaryFindsItsRunfiles) {
  const fs::path root = Fresh("bazel-bin");
  const fs::path exe = root / "examples/dcp-train";
  const fs::path trace = root / "examples/dcp-train.runfiles/dcp/data/t.txt";
  Touch(trace);
  DataFileRoots roots;
  roots.executable = exe.string();
  EXPECT_EQ(fs::path(FindDataFile("data/t.txt", roots)), trace);
  // $RUNFILES_DIR comes first.
  const fs::path other = root / "elsewhere/dcp/data/t.txt";
  Touch(other);
  roots.runfiles_dir = (root / "elsewhere").string();
  EXPECT_EQ(fs::path(FindDataFile("data/t.txt", roots)), other);
}

TEST(DataFilesTest, TheUsersDirectoryComesFirstAndNamesAMissingFile) {
  const fs::path root = Fresh("user");
  const fs::path mine = root / "me/data/t.txt";
  Touch(mine);
  Touch(root / "bin.runfiles/dcp/data/t.txt");
  DataFileRoots roots;
  roots.user_dir = (root / "me").string();
  roots.executable = (root / "bin").string();
  EXPECT_EQ(fs::path(FindDataFile("data/t.txt", roots)), mine);
  // Found nowhere: the path as the user meant it, for the caller's error.
  EXPECT_EQ(fs::path(FindDataFile("data/none.txt", roots)),
            root / "me/data/none.txt");
  roots.user_dir.clear();
  EXPECT_EQ(FindDataFile("data/none.txt", roots), "data/none.txt");
}

TEST(DataFilesTest, AnAbsolutePathIsTakenAsItIs) {
  DataFileRoots roots;
  roots.user_dir = "/somewhere";
  roots.executable = "/opt/dcp/bin/x";
  EXPECT_EQ(DataFileCandidates("/etc/x.json", roots),
            std::vector<std::string>{"/etc/x.json"});
  EXPECT_EQ(FindDataFile("/no/such/file", roots), "/no/such/file");
  EXPECT_TRUE(DataFileCandidates("", roots).empty());
}

TEST(DataFilesTest, CandidatesClimbToTheRoot) {
  DataFileRoots roots;
  roots.executable = "/a/b/prog";
  EXPECT_EQ(DataFileCandidates("d/f", roots),
            (std::vector<std::string>{"d/f", "/a/b/prog.runfiles/dcp/d/f",
                                      "/a/b/d/f", "/a/d/f", "/d/f"}));
}

TEST(DataFilesTest, ThisTestFindsTheBundledModelsFromAnotherDirectory) {
  // The real process: this test's runfiles carry data/models.
  const fs::path away = Fresh("away");
  const fs::path before = fs::current_path();
  ASSERT_EQ(chdir(away.c_str()), 0);
  const std::string found = FindDataFile("data/models/cpu-tiny.json");
  ASSERT_EQ(chdir(before.c_str()), 0);
  EXPECT_NE(found, "data/models/cpu-tiny.json");
  EXPECT_TRUE(fs::exists(found)) << found;
}

}  // namespace
}  // namespace dcp
