#include "common/subprocess.h"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp::subprocess {
namespace {

using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;

// Only a guard: every wait below ends when its children do, long before.
absl::Time Guard() { return absl::Now() + absl::Seconds(60); }

// A fresh folder for one test's output files.
std::string OutputDir(const std::string& test) {
  const std::string dir = TestTmpPath(test);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Starts `argv`; the test fails when it cannot.
Child MustStart(const std::string& name, const std::vector<std::string>& argv,
                const std::string& output_dir = "") {
  absl::StatusOr<Child> child = Start(name, argv, output_dir);
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? *std::move(child) : Child();
}

// Whether `pid` is gone: neither running nor a zombie left to reap.
bool Gone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

TEST(SubprocessTest, ReapsExitCodes) {
  std::vector<Child> children = {
      MustStart("true", {"/bin/true"}),
      MustStart("false", {"/bin/false"}),
      MustStart("three", {"/bin/sh", "-c", "exit 3"}),
  };
  ASSERT_TRUE(WaitAll(children, Guard()));
  EXPECT_EQ(children[0].exit_code, 0);
  EXPECT_EQ(children[1].exit_code, 1);
  EXPECT_EQ(children[2].exit_code, 3);
  for (const Child& c : children) {
    EXPECT_TRUE(c.done);
    EXPECT_EQ(c.term_signal, 0);
    EXPECT_TRUE(c.out_path.empty()) << "it shares this process's stdout";
  }
  EXPECT_EQ(DescribeEnd(children[2]), "exit 3");
}

TEST(SubprocessTest, PollReapsOnceExited) {
  Child child = MustStart("true", {"/bin/true"});
  std::vector<Child> one = {child};
  ASSERT_TRUE(WaitAll(one, Guard()));
  EXPECT_TRUE(Poll(one[0]));
  EXPECT_EQ(one[0].exit_code, 0);
  EXPECT_TRUE(Gone(child.pid));
}

TEST(SubprocessTest, WritesStdoutAndStderrToFiles) {
  const std::string dir = OutputDir("files");
  std::vector<Child> children = {
      MustStart("echo", {"/bin/sh", "-c", "echo x; echo y >&2; exit 3"}, dir)};
  ASSERT_TRUE(WaitAll(children, Guard()));
  EXPECT_EQ(children[0].out_path, dir + "/echo.out");
  EXPECT_EQ(children[0].err_path, dir + "/echo.err");
  EXPECT_EQ(ReadWholeFile(children[0].out_path), "x\n");
  EXPECT_EQ(ReadWholeFile(children[0].err_path), "y\n");
  EXPECT_EQ(children[0].exit_code, 3);
}

TEST(SubprocessTest, RecordsTheSignalThatEndedAChild) {
  std::vector<Child> children = {
      MustStart("suicide", {"/bin/sh", "-c", "kill -9 $$"})};
  ASSERT_TRUE(WaitAll(children, Guard()));
  EXPECT_EQ(children[0].exit_code, -1);
  EXPECT_EQ(children[0].term_signal, SIGKILL);
  EXPECT_EQ(DescribeEnd(children[0]), "killed by SIGKILL");
}

TEST(SubprocessTest, WaitAllStopsAtTheDeadlineAndKillAllReaps) {
  std::vector<Child> children = {MustStart("sleep", {"/bin/sleep", "1000"})};
  EXPECT_FALSE(WaitAll(children, absl::Now() + absl::Milliseconds(50)));
  EXPECT_FALSE(children[0].done);
  EXPECT_EQ(DescribeEnd(children[0]), "running");
  KillAll(children);
  EXPECT_TRUE(children[0].done);
  EXPECT_EQ(children[0].term_signal, SIGKILL);
  EXPECT_TRUE(Gone(children[0].pid));
}

TEST(SubprocessTest, DescribeEndsWithTheTailOfEachStderr) {
  const std::string dir = OutputDir("describe");
  std::vector<Child> children = {
      MustStart("loud", {"/bin/sh", "-c", "printf abcdefgh >&2; exit 2"}, dir),
      MustStart("quiet", {"/bin/true"}),
  };
  ASSERT_TRUE(WaitAll(children, Guard()));
  EXPECT_EQ(Describe(children, 3),
            "---- loud (exit 2)\n...fgh\n---- quiet (exit 0)\n");
  EXPECT_THAT(Describe(children), HasSubstr("abcdefgh"));
}

TEST(SubprocessTest, RefusesAnEmptyArgv) {
  const absl::StatusOr<Child> child = Start("nothing", {});
  EXPECT_EQ(child.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(child.status().message(), HasSubstr("nothing: empty argv"));
}

TEST(SubprocessTest, NamesABinaryThatDoesNotExist) {
  const absl::StatusOr<Child> child = Start("ghost", {"/no/such/binary"});
  EXPECT_EQ(child.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(child.status().message(),
              AllOf(HasSubstr("ghost"), HasSubstr("/no/such/binary")));
}

TEST(SubprocessTest, NamesAnOutputFileItCannotCreate) {
  const absl::StatusOr<Child> child =
      Start("lost", {"/bin/true"}, TestTmpPath("no/such/dir"));
  EXPECT_FALSE(child.ok());
  EXPECT_THAT(child.status().message(), HasSubstr("no/such/dir/lost.out"));
}

TEST(ChildrenTest, WaitIsOkWhenAllExitZero) {
  Children children;
  ASSERT_TRUE(children.Start("a", {"/bin/true"}).ok());
  ASSERT_TRUE(children.Start("b", {"/bin/sh", "-c", "exit 0"}).ok());
  EXPECT_TRUE(children.Wait(Guard()).ok());
  for (const Child& c : children.children()) EXPECT_EQ(c.exit_code, 0);
}

TEST(ChildrenTest, AFailureKillsTheRestAndSaysWhy) {
  const std::string dir = OutputDir("failure");
  Children children;
  ASSERT_TRUE(children.Start("sleeper", {"/bin/sleep", "1000"}, dir).ok());
  ASSERT_TRUE(
      children.Start("failer", {"/bin/sh", "-c", "echo boom >&2; exit 3"}, dir)
          .ok());
  const absl::Status status = children.Wait(Guard());
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("failer failed (exit 3)"),
                    HasSubstr("killed those still running: sleeper"),
                    HasSubstr("---- failer (exit 3)\nboom\n"),
                    HasSubstr("---- sleeper (killed by SIGKILL)\n")));
  EXPECT_EQ(children.children()[0].term_signal, SIGKILL);
}

TEST(ChildrenTest, SharedOutputLeavesTheSummaryOut) {
  Children children;
  ASSERT_TRUE(children.Start("rank 0", {"/bin/false"}).ok());
  // No deadline: the test's own timeout is the guard.
  const absl::Status status = children.Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(status.message(), "rank 0 failed (exit 1)");
}

TEST(ChildrenTest, TheDeadlineKillsWhatStillRuns) {
  const std::string dir = OutputDir("deadline");
  Children children;
  ASSERT_TRUE(children.Start("sleeper", {"/bin/sleep", "1000"}, dir).ok());
  const absl::Status status =
      children.Wait(absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("still running at the deadline, killed: sleeper"),
                    HasSubstr("---- sleeper (killed by SIGKILL)\n")));
  EXPECT_EQ(children.children()[0].term_signal, SIGKILL);
  EXPECT_TRUE(Gone(children.children()[0].pid));
}

TEST(ChildrenTest, DestructionKillsAndReapsWhatStillRuns) {
  pid_t pid = -1;
  {
    Children children;
    ASSERT_TRUE(children.Start("sleeper", {"/bin/sleep", "1000"}).ok());
    pid = children.children()[0].pid;
    ASSERT_FALSE(Gone(pid));
  }
  EXPECT_TRUE(Gone(pid));
}

TEST(ChildrenTest, MoveAssignmentEndsWhatItReplaces) {
  Children children;
  ASSERT_TRUE(children.Start("old", {"/bin/sleep", "1000"}).ok());
  const pid_t old = children.children()[0].pid;
  Children other;
  ASSERT_TRUE(other.Start("new", {"/bin/true"}).ok());
  children = std::move(other);
  EXPECT_TRUE(Gone(old));
  ASSERT_EQ(children.children().size(), 1u);
  EXPECT_EQ(children.children()[0].name, "new");
  EXPECT_TRUE(children.Wait(Guard()).ok());
}

TEST(SelfExecutableTest, IsThisTestBinary) {
  const absl::StatusOr<std::string> self = SelfExecutable();
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_THAT(*self, EndsWith("subprocess_test"));
}

}  // namespace
}  // namespace dcp::subprocess
