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
                const StartOptions& options) {
  absl::StatusOr<Child> child = Start(name, argv, options);
  EXPECT_TRUE(child.ok()) << child.status();
  return child.ok() ? *std::move(child) : Child();
}

Child MustStart(const std::string& name, const std::vector<std::string>& argv,
                const std::string& output_dir = "") {
  StartOptions options;
  options.output_dir = output_dir;
  return MustStart(name, argv, options);
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

TEST(SubprocessTest, RunReturnsTheChildOnceItEnded) {
  StartOptions options;
  options.output_dir = OutputDir("run");
  absl::StatusOr<Child> child =
      subprocess::Run("three", {"/bin/sh", "-c", "echo out; exit 3"}, options);
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_TRUE(child->done);
  EXPECT_EQ(child->exit_code, 3);
  EXPECT_TRUE(Gone(child->pid));
  EXPECT_EQ(ReadWholeFile(child->out_path), "out\n");
  // Start's errors, naming the child.
  const absl::Status missing =
      subprocess::Run("missing", {"/nonexistent/binary"}, StartOptions())
          .status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_THAT(missing.message(), HasSubstr("missing"));
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

TEST(StartOptionsTest, AppendsStdoutAndStderrToOneLog) {
  const std::string log = OutputDir("log") + "/children.log";
  OverwriteFile(log, "before\n");
  StartOptions options;
  options.log_path = log;
  std::vector<Child> first = {
      MustStart("first", {"/bin/sh", "-c", "echo out; echo err >&2"}, options)};
  ASSERT_TRUE(WaitAll(first, Guard()));
  EXPECT_EQ(first[0].out_path, log);
  EXPECT_EQ(first[0].err_path, log);
  std::vector<Child> second = {
      MustStart("second", {"/bin/sh", "-c", "echo again"}, options)};
  ASSERT_TRUE(WaitAll(second, Guard()));
  EXPECT_EQ(ReadWholeFile(log), "before\nout\nerr\nagain\n");
  EXPECT_EQ(Describe(second),
            "---- second (exit 0)\n" + ReadWholeFile(log) + "\n");
}

TEST(StartOptionsTest, ReadsStdinFromAFile) {
  const std::string dir = OutputDir("stdin");
  OverwriteFile(dir + "/input", "line\n");
  StartOptions options;
  options.stdin_path = dir + "/input";
  options.output_dir = dir;
  std::vector<Child> children = {MustStart("cat", {"/bin/cat"}, options)};
  ASSERT_TRUE(WaitAll(children, Guard()));
  EXPECT_EQ(children[0].exit_code, 0);
  EXPECT_EQ(ReadWholeFile(dir + "/cat.out"), "line\n");
}

TEST(StartOptionsTest, NamesAnInputFileItCannotOpen) {
  StartOptions options;
  options.stdin_path = TestTmpPath("no/such/input");
  const absl::StatusOr<Child> child = Start("cat", {"/bin/cat"}, options);
  EXPECT_EQ(child.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(child.status().message(), HasSubstr("no/such/input"));
}

TEST(StartOptionsTest, StartsInTheWorkingDirectory) {
  const std::string dir = OutputDir("cwd");
  StartOptions options;
  options.working_dir = dir;
  std::vector<Child> children = {
      MustStart("writer", {"/bin/sh", "-c", "echo x > here"}, options)};
  ASSERT_TRUE(WaitAll(children, Guard()));
  EXPECT_EQ(ReadWholeFile(dir + "/here"), "x\n");
}

TEST(StartOptionsTest, FindsARelativeBinaryFromTheWorkingDirectory) {
  StartOptions options;
  options.working_dir = "/bin";
  std::vector<Child> children = {MustStart("true", {"./true"}, options)};
  ASSERT_TRUE(WaitAll(children, Guard()));
  EXPECT_EQ(children[0].exit_code, 0);
}

TEST(StartOptionsTest, NamesAWorkingDirectoryThatDoesNotExist) {
  StartOptions options;
  options.working_dir = TestTmpPath("no/such/cwd");
  const absl::StatusOr<Child> child = Start("lost", {"/bin/true"}, options);
  EXPECT_EQ(child.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(child.status().message(),
              AllOf(HasSubstr("lost (/bin/true)"), HasSubstr("no/such/cwd")));
}

TEST(StartOptionsTest, RefusesBothAnOutputDirAndALog) {
  StartOptions options;
  options.output_dir = OutputDir("both");
  options.log_path = options.output_dir + "/log";
  const absl::StatusOr<Child> child = Start("both", {"/bin/true"}, options);
  EXPECT_EQ(child.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TerminateTest, StopsAChildWithSigterm) {
  Child child = MustStart("sleeper", {"/bin/sleep", "1000"});
  // The grace is only a guard: sleep ends on the SIGTERM.
  Terminate(child, absl::Seconds(60));
  EXPECT_TRUE(child.done);
  EXPECT_EQ(child.term_signal, SIGTERM);
  EXPECT_TRUE(Gone(child.pid));
}

TEST(TerminateTest, KillsAChildThatIgnoresSigtermOnceTheGraceHasPassed) {
  // A signal this process ignores stays ignored in a child it starts, so
  // the child ignores SIGTERM from its first instruction.
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction previous = {};
  ASSERT_EQ(sigaction(SIGTERM, &ignore, &previous), 0);
  Child child = MustStart("stubborn", {"/bin/sleep", "1000"});
  ASSERT_EQ(sigaction(SIGTERM, &previous, nullptr), 0);
  Terminate(child, absl::Milliseconds(100));
  EXPECT_TRUE(child.done);
  EXPECT_EQ(child.term_signal, SIGKILL);
  EXPECT_TRUE(Gone(child.pid));
}

TEST(TerminateTest, AllEndWithoutWaitingOnThoseThatAreNotRunning) {
  std::vector<Child> exited = {
      MustStart("exited", {"/bin/sh", "-c", "exit 4"})};
  ASSERT_TRUE(WaitAll(exited, Guard()));
  std::vector<Child> children = {exited[0], Child() /* never started */,
                                 MustStart("sleeper", {"/bin/sleep", "1000"})};
  const absl::Time start = absl::Now();
  TerminateAll(children, absl::Seconds(60));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(children[0].exit_code, 4);
  EXPECT_FALSE(children[1].done);
  EXPECT_EQ(children[2].term_signal, SIGTERM);
  // Again: nothing left to stop.
  TerminateAll(children, absl::Seconds(60));
  EXPECT_EQ(children[2].term_signal, SIGTERM);
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
