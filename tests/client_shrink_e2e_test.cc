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

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"
#include "tests/elastic_job.h"
#include "tests/execution_log.h"

namespace dcp {
namespace {

using testing_process::Child;
using testing_process::ElasticJob;
using testing_process::ElasticJobTest;
using testing_process::JsonNumber;
using testing_process::ReadFile;
using Line = testing_process::ExecutionLine;
using Stop = ElasticJobTest::Stop;

constexpr int kWorld = 4;
constexpr int kSteps = 12;
constexpr int kVictim = 1;
/// The victim completes this step, then hangs until it is killed.
constexpr int64_t kHangAfter = 2;
constexpr char kShrunk[] = "[0,2,3]";

/// `FourRankJob` on shrink_trainer processes, the victim's hanging after
/// step kHangAfter.
ElasticJob TrainerJob() {
  ElasticJob job = testing_process::FourRankJob(kSteps);
  job.prefix = "client-shrink";
  job.binary = "tests/shrink_trainer";
  job.agent_flags = {
      "--rendezvous_timeout=20s",
      // A survivor stuck connecting to the hung victim in an epoch-0 group
      // (Gloo's connect, not cancelled by the shrink) has reached the new
      // world's group more than the default 3 x 20 s after the others on a
      // fresh machine's loaded cores: the new world waits longer.
      "--world_timeout=120s", "--step_timeout=150s"};
  job.rank_flags[kVictim] = {absl::StrCat("--hang_after_step=", kHangAfter)};
  job.patience = absl::Seconds(240);
  return job;
}

int Occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + what.size())) {
    ++n;
  }
  return n;
}

class ClientShrinkTest : public ElasticJobTest {
 protected:
  ClientShrinkTest() : ElasticJobTest(TrainerJob()) {}
};

TEST_F(ClientShrinkTest, SurvivorsFollowTheShrunkWorldAndTrainEverySampleOnce) {
  StartJob({"--rank_timeout=10s", "--on_rank_failure=shrink"});
  // Killed once it logged its last step, it hangs in the next one.
  const auto [from, to] =
      StopAndAwaitShrink(kVictim, kHangAfter, Stop::kKill, 1, kShrunk);
  // Every rank reported the victim's last step; none completed the next.
  ASSERT_EQ(from, kHangAfter + 1);
  ASSERT_GT(to, from);

  ExpectAgentsFinish();
  for (int r = 0; r < kWorld; ++r) {
    if (r == kVictim) continue;
    const Child& t = agents_[r];
    const std::string err = ReadFile(t.err_path);
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

  std::map<int64_t, std::vector<Line>> epoch1;  // step -> its step lines
  for (int r = 0; r < kWorld; ++r) {
    for (const Line& l : Logged(r)) {
      EXPECT_FALSE(l.step >= from && l.step < to)
          << "rank " << r << " logged abandoned step " << l.step;
      EXPECT_EQ(l.epoch, l.step < to ? 0 : 1)
          << "rank " << r << " step " << l.step;
      if (r == kVictim) {
        EXPECT_LT(l.step, from);
      }
      if (l.kind == "task" && l.epoch == 1) {
        EXPECT_EQ(std::count(l.group.begin(), l.group.end(), kVictim), 0);
      }
      if (l.kind == "step" && l.epoch == 1) epoch1[l.step].push_back(l);
    }
  }
  const auto tasks = Tasks({});
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
  testing_process::ExpectEachJobStepOnce(testing_process::SamplesByStep(tasks),
                                         JobSteps(), {{from, to}});
}

}  // namespace
}  // namespace dcp
