// client_lib trainers follow a shrunk world (issue 11): the real
// dcp-scheduler with --on_rank_failure=shrink and a short --rank_timeout,
// and four real trainer processes on client_lib's in-process mode
// (tests/shrink_trainer_main.cc: the agent's Gloo groups, each step closed
// by a sync over `Client::DataParallelGroup`). Rank 1 completes step
// kHangAfter, then blocks and is SIGKILLed, so the others are stuck in the
// next step's sync with it when it dies. They give that step up, go on at
// the next epoch (`Client::NextEpoch`) and finish the job there.
//
// Checked from the trainers' logs and stderr, the scheduler's log and
// dcp-ctl:
//   - the scheduler shrank to epoch 1 on [0, 2, 3], abandoning the steps
//     from kHangAfter + 1 on that it had planned, and completed every step
//     of the job there;
//   - each survivor saw epoch 1's world [0, 2, 3] (Step::world_ranks) and
//     the abandoned steps (Step::abandoned_from), logged none of them, and
//     exited 0;
//   - each epoch-1 step was run by the three survivors on groups without
//     rank 1, and its sync over the re-formed data-parallel group summed
//     exactly the tokens of all of the step's tasks on every survivor;
//   - every sample of every job step trained exactly once in a completed
//     step (rank_failure_e2e_test's check).

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"
#include "tests/execution_log.h"
#include "tests/job_inputs.h"

namespace dcp {
namespace {

using testing_process::Binary;
using testing_process::Child;
using testing_process::JsonNumber;
using testing_process::ReadFile;
using testing_process::TmpPath;
using Line = testing_process::ExecutionLine;

constexpr int kWorld = 4;
constexpr int kSteps = 12;
constexpr int kVictim = 1;
/// The victim completes this step, then hangs until it is killed.
constexpr int64_t kHangAfter = 2;
constexpr char kShrunk[] = "[0,2,3]";
/// How long any one thing the test waits for may take.
constexpr absl::Duration kPatience = absl::Seconds(180);

testing_process::JobShape Shape() {
  return {/*world_size=*/kWorld, /*gpus_per_node=*/2, /*window=*/32768,
          /*tokens_per_step=*/65536, /*max_steps=*/kSteps, /*seed=*/5,
          /*lookahead_steps=*/4};
}

std::string LogPath(int rank) {
  return TmpPath(absl::StrCat("client-shrink-trainer-", rank, ".jsonl"));
}

Child StartTrainer(const std::string& address, int rank) {
  std::vector<std::string> argv = {
      Binary("tests/shrink_trainer"),
      absl::StrCat("--scheduler=", address),
      absl::StrCat("--rank=", rank),
      absl::StrCat("--world_size=", kWorld),
      absl::StrCat("--log_file=", LogPath(rank)),
      "--rendezvous_timeout=20s",
      "--step_timeout=150s"};
  if (rank == kVictim) {
    argv.push_back(absl::StrCat("--hang_after_step=", kHangAfter));
  }
  return testing_process::Spawn(
      absl::StrCat("client-shrink-trainer-", rank), argv);
}

int Occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + what.size())) {
    ++n;
  }
  return n;
}

bool Logged(int rank, int64_t step) {
  for (int64_t s : testing_process::LoggedSteps(LogPath(rank))) {
    if (s == step) return true;
  }
  return false;
}

class ClientShrinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    trace_ = testing_process::LcgTrace(300, 17, 100,
                                       testing_process::SkewedLength);
    std::vector<std::string> flags = testing_process::WriteJob(
        "client-shrink", trace_, "client-shrink-tiny", Shape());
    flags.insert(flags.end(), {"--metrics_listen=", "--rank_timeout=2s",
                               "--on_rank_failure=shrink"});
    const int port = testing_process::StartScheduler("client-shrink-scheduler",
                                                     flags, scheduler_);
    ASSERT_GT(port, 0);
    address_ = absl::StrCat("127.0.0.1:", port);
    for (int r = 0; r < kWorld; ++r) {
      trainers_.push_back(StartTrainer(address_, r));
    }
  }

  void TearDown() override {
    if (!scheduler_.empty() && !scheduler_[0].done) {
      testing_process::StopScheduler(address_, scheduler_);
    }
  }

  /// Waits until the victim logged its last step, SIGKILLs and reaps it.
  void KillTheVictimOnceItHangs() {
    testing_process::FileActivity activity({TmpPath("")});
    const absl::Time deadline = absl::Now() + kPatience;
    while (!Logged(kVictim, kHangAfter)) {
      ASSERT_TRUE(activity.Await(deadline))
          << "the victim did not complete step " << kHangAfter << "\n"
          << reaper_.Describe(4000);
    }
    Child& victim = trainers_[kVictim];
    ASSERT_EQ(kill(victim.pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(victim.pid, &status, 0), victim.pid);
    victim.done = true;
    EXPECT_TRUE(WIFSIGNALED(status));
  }

  /// Waits for the survivors to exit (a test failure when they do not in
  /// time) and returns them, reaped (`trainers_` updated too).
  std::vector<Child> AwaitSurvivors() {
    std::vector<Child> survivors;
    for (int r = 0; r < kWorld; ++r) {
      if (r != kVictim) survivors.push_back(trainers_[r]);
    }
    testing_process::ExpectAllExit(survivors, absl::Now() + kPatience,
                                   "the survivors did not finish");
    for (const Child& t : survivors) {
      for (Child& mine : trainers_) {
        if (mine.pid == t.pid) mine = t;
      }
    }
    return survivors;
  }

  std::string trace_;
  std::string address_;
  std::vector<Child> scheduler_;
  std::vector<Child> trainers_;
  testing_process::ChildReaper reaper_{{&scheduler_, &trainers_}};
};

TEST_F(ClientShrinkTest, SurvivorsFollowTheShrunkWorldAndTrainEverySampleOnce) {
  ASSERT_NO_FATAL_FAILURE(KillTheVictimOnceItHangs());
  const std::string line = testing_process::AwaitLineContaining(
      scheduler_[0].err_path,
      absl::StrCat("rank failure: ranks [", kVictim, "] failed"), TmpPath(""),
      absl::Now() + kPatience);
  ASSERT_FALSE(line.empty()) << "no shrink\n" << reaper_.Describe(4000);
  std::fprintf(stderr, "%s\n", line.c_str());
  EXPECT_TRUE(absl::StrContains(line, absl::StrCat("shrink: epoch 1 on ranks ",
                                                   kShrunk)))
      << line;
  const auto [from, to] = testing_process::AbandonedRange(line);
  // Every rank reported the victim's last step; none completed the next.
  ASSERT_EQ(from, kHangAfter + 1) << line;
  ASSERT_GT(to, from) << line;

  for (const Child& t : AwaitSurvivors()) {
    const std::string err = ReadFile(t.err_path);
    EXPECT_EQ(t.exit_code, 0) << t.name << "\n" << err;
    EXPECT_TRUE(absl::StrContains(
        err, absl::StrCat("epoch 1: world ", kShrunk, ", abandoned from ",
                          from)))
        << t.name << "\n" << err;
    // The step it was in when the victim died, and no other: the rest of
    // epoch 0 was dropped (NextEpoch), not tried.
    EXPECT_EQ(Occurrences(err, "gave up"), 1) << t.name << "\n" << err;
  }
  const nlohmann::json done =
      testing_process::CtlStatus("client-shrink-ctl", address_);
  EXPECT_EQ(JsonNumber(done["epoch"]), 1);
  EXPECT_EQ(JsonNumber(done["epoch_world_size"]), kWorld - 1);
  EXPECT_EQ(JsonNumber(done["completed_steps"]), kSteps);

  std::vector<std::string> logs;
  std::map<int64_t, std::vector<Line>> epoch1;  // step -> its step lines
  for (int r = 0; r < kWorld; ++r) {
    logs.push_back(LogPath(r));
    for (const Line& l : testing_process::ReadExecutionLog(LogPath(r))) {
      EXPECT_FALSE(l.step >= from && l.step < to)
          << "rank " << r << " logged abandoned step " << l.step;
      EXPECT_EQ(l.epoch, l.step < to ? 0 : 1)
          << "rank " << r << " step " << l.step;
      if (r == kVictim) EXPECT_LT(l.step, from);
      if (l.kind == "task" && l.epoch == 1) {
        EXPECT_EQ(std::count(l.group.begin(), l.group.end(), kVictim), 0);
      }
      if (l.kind == "step" && l.epoch == 1) epoch1[l.step].push_back(l);
    }
  }
  const auto tasks = testing_process::LoggedTasks(logs, {});
  // kSteps job steps: `from` before the shrink, the rest in epoch 1.
  EXPECT_EQ(epoch1.size(), static_cast<size_t>(kSteps - from));
  for (const auto& [step, lines] : epoch1) {
    int64_t tokens = 0;
    for (const auto& [key, task] : tasks) {
      if (key.first == step) tokens += task.tokens;
    }
    EXPECT_EQ(lines.size(), static_cast<size_t>(kWorld - 1)) << "step " << step;
    for (const Line& l : lines) {
      EXPECT_EQ(l.tokens, tokens) << "rank " << l.rank << " step " << step;
    }
  }
  testing_process::ExpectEachJobStepOnce(
      testing_process::SamplesByStep(tasks),
      testing_process::BuilderSteps(trace_, Shape()), {{from, to}});
}

}  // namespace
}  // namespace dcp
