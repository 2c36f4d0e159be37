// Real training survives the loss of a rank: the real dcp-scheduler with
// --on_rank_failure=shrink and a short --rank_timeout, and four real
// dcp-agent processes in execute mode (a tiny transformer trained with
// libtorch over c10d Gloo on the CPU). Rank 1 is SIGKILLed after a few
// steps. The three others give up the step they were in (its collectives
// fail on the dead peer), wait for the scheduler's epoch 1, re-form their
// groups over ranks [0, 2, 3], agree on one state and train to the end.
//
// Checked from the agents' logs, the scheduler's log and dcp-ctl:
//   - the scheduler shrank to epoch 1 on [0, 2, 3] and the job completed
//     all its steps there;
//   - every sample of every job step trained exactly once in a completed
//     step (a step is completed when every rank of its world reported it;
//     the abandoned steps' samples are those of the steps that re-serve
//     them, in order), as in rank_failure_e2e_test;
//   - each epoch-1 step's gradient sync spans the new world: the tokens
//     every survivor logs for the step (all-reduced over its data-parallel
//     group) are those of all of the step's tasks, and its loss is the same
//     on all three;
//   - epoch 1 starts from the weights after the last completed step (a
//     survivor that had applied an abandoned step, whose report from the
//     dead rank never came, goes back), and the survivors' weights are
//     equal after every epoch-1 step, the last one included (the digests
//     of the parameters' bytes they log).
// And a rank that comes back: after the shrink, a new dcp-agent process
// for rank 1 registers; the scheduler admits it at the next step planned
// (a grow: epoch 2 on all four). It starts from the seeded weights, takes
// the world's (weights, AdamW moments, step count) at that step, and the
// four ranks' weights are equal after every step of epoch 2, the first
// one's starting weights being those after the last step before it.

#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"
#include "tests/elastic_job.h"
#include "tests/execution_log.h"
#include "tests/job_inputs.h"

namespace dcp {
namespace {

using testing_process::CtlStatus;
using testing_process::ElasticJob;
using testing_process::ElasticJobTest;
using testing_process::JsonNumber;
using testing_process::ReadFile;
using Line = testing_process::ExecutionLine;
using Stop = ElasticJobTest::Stop;

constexpr int kWorld = 4;
constexpr int kSteps = 12;
constexpr int kVictim = 1;
/// The victim is killed once it logged this step.
constexpr int64_t kKillAfter = 3;

ElasticJob TrainingJob() {
  ElasticJob job = testing_process::FourRankJob(kSteps);
  job.agents_read_model = true;
  job.agent_flags = {
      "--mode=execute", "--token_scale=64", "--train_seed=7",
      "--rendezvous_timeout=10s",
      // A survivor stuck forming an epoch-0 group with the dead rank has
      // taken 50 s to give it up on a loaded machine, 30 s after the first
      // survivor's new world formed: the new world waits.
      "--world_timeout=90s", "--step_timeout=150s"};
  job.patience = absl::Seconds(240);
  return job;
}

class ElasticTrainingTest : public ElasticJobTest {
 protected:
  explicit ElasticTrainingTest(std::string rank_timeout = "10s")
      : ElasticJobTest(TrainingJob()), rank_timeout_(std::move(rank_timeout)) {}

  void SetUp() override {
    ElasticJobTest::SetUp();
    StartJob({"--rank_timeout=" + rank_timeout_, "--on_rank_failure=shrink"});
  }

  /// Brings the victim back (`back`) with the survivors held (SIGSTOP)
  /// until the scheduler says it returned: else they can train the job's
  /// last steps (a tiny model on the CPU) before it registers, and no step
  /// is left to grow into. A held survivor owes no report the others made
  /// for longer than the hold (`ElasticReturnTest`'s --rank_timeout).
  void ReturnWithSurvivorsHeld(const std::function<void()>& back) {
    std::vector<pid_t> held;
    for (int r = 0; r < kWorld; ++r) {
      if (r != kVictim && !agents_[r].done) held.push_back(agents_[r].pid);
    }
    for (pid_t pid : held) EXPECT_EQ(kill(pid, SIGSTOP), 0);
    back();
    const std::string returned =
        AwaitSchedulerLine(absl::StrCat("rank ", kVictim, " returned"));
    for (pid_t pid : held) EXPECT_EQ(kill(pid, SIGCONT), 0);
    ASSERT_FALSE(returned.empty()) << reaper_.Describe(4000);
  }

  /// The step lines of epoch `epoch`, by step.
  std::map<int64_t, std::vector<Line>> EpochSteps(int64_t epoch) const {
    std::map<int64_t, std::vector<Line>> steps;
    for (int r = 0; r < kWorld; ++r) {
      for (const Line& l : Logged(r)) {
        if (l.kind == "step" && l.epoch == epoch) steps[l.step].push_back(l);
      }
    }
    return steps;
  }

  /// The weights every rank that logged step `step` logged after it (a
  /// test failure when they differ or none did).
  std::string WeightsAfter(int64_t step) const {
    std::set<std::string> weights;
    for (int r = 0; r < kWorld; ++r) {
      for (const Line& l : Logged(r)) {
        if (l.kind == "step" && l.step == step) weights.insert(l.weights);
      }
    }
    EXPECT_EQ(weights.size(), 1u) << "step " << step;
    return weights.empty() ? "" : *weights.begin();
  }

  /// Every sample of every job step trained once (the steps [from, to)
  /// abandoned); the real tokens of each step that ran, from its tasks.
  std::map<int64_t, int64_t> ExpectTrainedOnce(int64_t from, int64_t to) {
    std::set<int64_t> skipped;
    for (int64_t s = from; s < to; ++s) skipped.insert(s);
    const auto tasks = Tasks(skipped);
    testing_process::ExpectEachJobStepOnce(
        testing_process::SamplesByStep(tasks), JobSteps(), {{from, to}});
    std::map<int64_t, int64_t> tokens;
    for (const auto& [key, task] : tasks) tokens[key.first] += task.tokens;
    return tokens;
  }

  /// Each step of `steps` ran on `members` ranks that all-reduced the
  /// step's `tokens` and ended with one loss and one state.
  static void ExpectOneWorld(const std::map<int64_t, std::vector<Line>>& steps,
                             size_t members,
                             const std::map<int64_t, int64_t>& tokens) {
    for (const auto& [step, lines] : steps) {
      ASSERT_EQ(lines.size(), members) << "step " << step;
      for (const Line& l : lines) {
        EXPECT_EQ(l.tokens, tokens.at(step)) << "step " << step;
        EXPECT_EQ(l.loss, lines[0].loss) << "step " << step;
        EXPECT_FALSE(l.weights.empty());
        EXPECT_EQ(l.weights, lines[0].weights) << "step " << step;
      }
    }
  }

  /// The survivors of the shrink.
  std::vector<testing_process::Child> Running() const {
    std::vector<testing_process::Child> running;
    for (const testing_process::Child& a : agents_) {
      if (!a.done) running.push_back(a);
    }
    return running;
  }

 private:
  const std::string rank_timeout_;
};

/// A rank comes back: the survivors are held while it does, for longer
/// than the 10 s the shrink test allows a silent rank.
class ElasticReturnTest : public ElasticTrainingTest {
 protected:
  ElasticReturnTest() : ElasticTrainingTest("20s") {}

  /// After the job (steps [from, to) abandoned): every sample trained once,
  /// epoch 1 on the three survivors, epoch 2 on all four, which all started
  /// it from the weights after the step before it. Epoch 2's steps.
  std::map<int64_t, std::vector<Line>> ExpectGrownBack(int64_t from,
                                                       int64_t to) {
    const std::map<int64_t, int64_t> tokens = ExpectTrainedOnce(from, to);
    const std::map<int64_t, std::vector<Line>> epoch1 = EpochSteps(1);
    std::map<int64_t, std::vector<Line>> epoch2 = EpochSteps(2);
    ExpectOneWorld(epoch1, kWorld - 1, tokens);
    ExpectOneWorld(epoch2, kWorld, tokens);
    EXPECT_EQ(epoch1.size() + epoch2.size(),
              static_cast<size_t>(kSteps + (to - from) - to));
    if (epoch2.empty()) {
      ADD_FAILURE() << "no step of the grown world";
      return epoch2;
    }
    const int64_t grow = epoch2.begin()->first;
    const std::string before =
        WeightsAfter(epoch1.empty() ? from - 1 : grow - 1);
    for (const Line& l : epoch2.begin()->second) {
      EXPECT_EQ(l.start_weights, before) << "rank " << l.rank;
    }
    return epoch2;
  }
};

TEST_F(ElasticTrainingTest, SurvivorsTrainOnInTheShrunkWorldLosingNothing) {
  const auto [from, to] =
      StopAndAwaitShrink(kVictim, kKillAfter, Stop::kKill, 1, "[0,2,3]");
  ASSERT_GE(from, 0);
  const int64_t abandoned = to - from;
  const std::vector<testing_process::Child> survivors = Running();
  ExpectAgentsFinish();
  const nlohmann::json done = CtlStatus("elastic-ctl", address_);
  EXPECT_EQ(JsonNumber(done["epoch"]), 1);
  EXPECT_EQ(JsonNumber(done["epoch_world_size"]), kWorld - 1);
  EXPECT_EQ(JsonNumber(done["completed_steps"]), kSteps);
  EXPECT_EQ(JsonNumber(done["planned_steps"]), kSteps + abandoned);

  std::set<int64_t> undone;  // Abandoned steps a survivor had applied.
  for (int r = 0; r < kWorld; ++r) {
    for (const Line& l : Logged(r)) {
      if (r != kVictim && l.kind == "step" && l.step >= from && l.step < to) {
        undone.insert(l.step);
      }
    }
  }
  std::fprintf(stderr, "abandoned steps the survivors had applied: %s\n",
               absl::StrJoin(undone, ",").c_str());
  const std::map<int64_t, int64_t> tokens = ExpectTrainedOnce(from, to);

  // Epoch 1 on the survivors: one loss, the world's tokens, one state.
  const std::map<int64_t, std::vector<Line>> epoch1 = EpochSteps(1);
  EXPECT_EQ(epoch1.size(), static_cast<size_t>(kSteps + abandoned - to));
  ExpectOneWorld(epoch1, kWorld - 1, tokens);
  ASSERT_FALSE(epoch1.empty());
  // Epoch 1 began from the weights after the last completed step, step
  // from - 1 (a survivor that applied an abandoned step went back).
  if (from > 0) {
    const std::string completed = WeightsAfter(from - 1);
    for (const Line& l : epoch1.begin()->second) {
      EXPECT_EQ(l.start_weights, completed);
    }
  }
  std::fprintf(stderr, "epoch 1: steps %lld..%lld, final weights %s\n",
               static_cast<long long>(epoch1.begin()->first),
               static_cast<long long>(epoch1.rbegin()->first),
               epoch1.rbegin()->second[0].weights.c_str());
  // The survivors said what they gave up.
  for (const testing_process::Child& a : survivors) {
    EXPECT_TRUE(absl::StrContains(ReadFile(a.err_path), "of epoch 0 given up"))
        << a.name;
  }
}

TEST_F(ElasticReturnTest, ARestartedRankIsAdmittedBackWithTheWorldsState) {
  const auto [from, to] =
      StopAndAwaitShrink(kVictim, kKillAfter, Stop::kKill, 1, "[0,2,3]");
  ASSERT_GE(from, 0);
  const size_t lines_before = Logged(kVictim).size();
  ReturnWithSurvivorsHeld(
      [&] { agents_[kVictim] = StartAgent(kVictim, "-again"); });
  ExpectAgentsFinish();
  const nlohmann::json done = CtlStatus("elastic-ctl", address_);
  EXPECT_EQ(JsonNumber(done["epoch"]), 2);
  EXPECT_EQ(JsonNumber(done["epoch_world_size"]), kWorld);
  EXPECT_EQ(JsonNumber(done["completed_steps"]), kSteps);
  EXPECT_EQ(JsonNumber(done["planned_steps"]), kSteps + (to - from));

  // The new process ran epoch 2's steps only, from the grow on.
  const std::vector<Line> again = Logged(kVictim);
  ASSERT_GT(again.size(), lines_before) << "the returned rank trained nothing";
  const int64_t grow = again[lines_before].step;
  for (size_t i = lines_before; i < again.size(); ++i) {
    EXPECT_EQ(again[i].epoch, 2) << "step " << again[i].step;
  }
  // (The returned rank's own weights were the seeded ones: it took the
  // world's.)
  const std::map<int64_t, std::vector<Line>> epoch2 = ExpectGrownBack(from, to);
  ASSERT_FALSE(epoch2.empty());
  EXPECT_EQ(epoch2.begin()->first, grow);
  std::fprintf(stderr, "grow at step %lld; epoch 2 final weights %s\n",
               static_cast<long long>(grow),
               epoch2.rbegin()->second[0].weights.c_str());
}

// Rank 1 hangs (SIGSTOP) after its step 2 and is shrunk out; woken, the same
// process (its state epoch 0's) is admitted back. The grown world starts
// from the survivors' state, not the woken rank's older one, though it took
// fewer optimizer steps.
TEST_F(ElasticReturnTest, AWokenHungRankRejoinsWithTheWorldsState) {
  const auto [from, to] =
      StopAndAwaitShrink(kVictim, kKillAfter, Stop::kHang, 1, "[0,2,3]");
  ASSERT_GE(from, 0);
  ReturnWithSurvivorsHeld(
      [&] { ASSERT_EQ(kill(agents_[kVictim].pid, SIGCONT), 0); });
  ExpectAgentsFinish();
  ExpectGrownBack(from, to);
}

}  // namespace
}  // namespace dcp
