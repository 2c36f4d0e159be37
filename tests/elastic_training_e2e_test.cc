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
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "scheduler/planner/plan.h"
#include "scheduler/planner/step_builder.h"
#include "tests/child_process.h"
#include "tests/execution_log.h"
#include "tests/job_inputs.h"

namespace dcp {
namespace {

using testing_process::Binary;
using testing_process::Child;
using testing_process::ChildReaper;
using testing_process::CtlStatus;
using testing_process::AbandonedRange;
using testing_process::JsonNumber;
using testing_process::ReadFile;
using testing_process::Spawn;
using testing_process::StartScheduler;
using testing_process::StopScheduler;
using testing_process::TmpPath;
using testing_process::WriteFile;

constexpr int kWorld = 4;
constexpr int64_t kWindow = 32768;
constexpr int64_t kTokensPerStep = 65536;
constexpr uint64_t kJobSeed = 5;
constexpr int kSteps = 12;
constexpr int kVictim = 1;
/// The victim is killed once it logged this step.
constexpr int64_t kKillAfter = 2;
constexpr absl::Duration kPatience = absl::Seconds(240);

using Line = testing_process::ExecutionLine;

std::string LogPath(int rank) {
  return TmpPath(absl::StrCat("elastic-agent-", rank, ".jsonl"));
}

std::vector<Line> Logged(int rank) {
  return testing_process::ReadExecutionLog(LogPath(rank));
}

bool Ran(int rank, int64_t step) {
  for (const Line& l : Logged(rank)) {
    if (l.kind == "step" && l.step >= step) return true;
  }
  return false;
}

/// A task of a step as the ranks that ran it logged it.
struct Task {
  std::vector<int> group;
  std::vector<int64_t> samples;
  int64_t tokens = 0;
  std::set<int> ranks;
};

/// Every task of every step not in `skip`, keyed by (step, task index);
/// checks that its ranks logged the same samples and group for it and that
/// the group is the ranks that logged it.
std::map<std::pair<int64_t, int>, Task> LoggedTasks(
    const std::set<int64_t>& skip) {
  std::map<std::pair<int64_t, int>, Task> tasks;
  for (int r = 0; r < kWorld; ++r) {
    for (const Line& l : Logged(r)) {
      if (l.kind != "task" || skip.count(l.step) > 0) continue;
      auto [it, fresh] = tasks.try_emplace({l.step, l.task_index});
      if (fresh) {
        it->second.group = l.group;
        it->second.samples = l.samples;
        it->second.tokens = l.tokens;
      }
      EXPECT_EQ(it->second.group, l.group) << "step " << l.step;
      EXPECT_EQ(it->second.samples, l.samples) << "step " << l.step;
      it->second.ranks.insert(r);
    }
  }
  for (const auto& [key, task] : tasks) {
    EXPECT_EQ(std::set<int>(task.group.begin(), task.group.end()), task.ranks)
        << "step " << key.first << " task " << key.second;
  }
  return tasks;
}

class ElasticTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    trace_ = testing_process::LcgTrace(300, 17, 100,
                                       testing_process::SkewedLength);
    ASSERT_TRUE(WriteFile(TmpPath("elastic-trace.txt"), trace_));
    ASSERT_TRUE(WriteFile(TmpPath("elastic-model.json"),
                          testing_process::TinyModelJson("tiny-elastic")));
    const int port = StartScheduler(
        "elastic-scheduler",
        {"--lengths=" + TmpPath("elastic-trace.txt"),
         "--model_config=" + TmpPath("elastic-model.json"),
         absl::StrCat("--world_size=", kWorld), "--gpus_per_node=2",
         absl::StrCat("--window=", kWindow),
         absl::StrCat("--tokens_per_step=", kTokensPerStep),
         absl::StrCat("--seed=", kJobSeed),
         absl::StrCat("--max_steps=", kSteps), "--lookahead_steps=4",
         "--metrics_listen=", "--rank_timeout=2s", "--on_rank_failure=shrink"},
        scheduler_);
    ASSERT_GT(port, 0);
    address_ = absl::StrCat("127.0.0.1:", port);
    for (int r = 0; r < kWorld; ++r) {
      agents_.push_back(Spawn(
          absl::StrCat("elastic-agent-", r),
          {Binary("worker_agent/dcp-agent"), "--scheduler=" + address_,
           absl::StrCat("--rank=", r), absl::StrCat("--world_size=", kWorld),
           "--mode=execute", "--model_config=" + TmpPath("elastic-model.json"),
           "--token_scale=64", "--train_seed=7", "--rendezvous_timeout=10s",
           // A survivor stuck forming an epoch-0 group with the dead rank
           // has taken 50 s to give it up on a loaded machine, 30 s after
           // the first survivor's new world formed: the new world waits.
           "--world_timeout=90s", "--step_timeout=150s",
           "--log_file=" + LogPath(r)}));
    }
  }

  void TearDown() override {
    if (!address_.empty() && !scheduler_.empty() && !scheduler_[0].done) {
      StopScheduler(address_, scheduler_);
    }
  }

  /// Waits on the children's output until `done()`; false at the deadline.
  template <typename Done>
  bool AwaitOutput(Done done) {
    const absl::Time deadline = absl::Now() + kPatience;
    testing_process::FileActivity activity({TmpPath("")});
    while (!done()) {
      if (!activity.Await(deadline)) return done();
    }
    return true;
  }

  std::string AwaitSchedulerLine(const std::string& text) {
    return testing_process::AwaitLineContaining(
        scheduler_[0].err_path, text, TmpPath(""), absl::Now() + kPatience);
  }

  /// The builder's samples of the job's steps, in order.
  std::vector<std::multiset<int64_t>> JobSteps() const {
    StepBuilderOptions options;
    options.tokens_per_step = kTokensPerStep;
    options.seed = kJobSeed;
    const std::vector<int32_t> lengths = testing_process::ParseTrace(trace_);
    absl::StatusOr<std::vector<std::vector<int64_t>>> steps =
        BuildSteps(LengthView(lengths, kWindow), options, kSteps);
    EXPECT_TRUE(steps.ok()) << steps.status();
    std::vector<std::multiset<int64_t>> out;
    if (!steps.ok()) return out;
    for (const auto& s : *steps) out.emplace_back(s.begin(), s.end());
    return out;
  }

  std::string trace_;
  std::string address_;
  std::vector<Child> scheduler_;
  std::vector<Child> agents_;
  ChildReaper reaper_{{&scheduler_, &agents_}};
};

TEST_F(ElasticTrainingTest, SurvivorsTrainOnInTheShrunkWorldLosingNothing) {
  ASSERT_TRUE(AwaitOutput([] { return Ran(kVictim, kKillAfter); }))
      << reaper_.Describe(4000);
  Child& victim = agents_[kVictim];
  ASSERT_EQ(kill(victim.pid, SIGKILL), 0);
  int wait_status = 0;
  ASSERT_EQ(waitpid(victim.pid, &wait_status, 0), victim.pid);
  victim.done = true;

  const std::string line = AwaitSchedulerLine(
      absl::StrCat("rank failure: ranks [", kVictim, "] failed"));
  ASSERT_FALSE(line.empty()) << reaper_.Describe(4000);
  EXPECT_TRUE(absl::StrContains(line, "shrink: epoch 1 on ranks [0,2,3]"))
      << line;
  std::fprintf(stderr, "%s\n", line.c_str());
  const auto [from, to] = AbandonedRange(line);
  ASSERT_GE(from, 0);
  ASSERT_GE(to, from);
  const int64_t abandoned = to - from;

  std::vector<Child> survivors;
  for (const Child& a : agents_) {
    if (!a.done) survivors.push_back(a);
  }
  ASSERT_TRUE(testing_process::ExpectAllExit(
      survivors, absl::Now() + kPatience, "the survivors did not finish"));
  for (const Child& a : survivors) {
    EXPECT_EQ(a.exit_code, 0) << a.name << "\n" << ReadFile(a.err_path);
  }
  const nlohmann::json done = CtlStatus("elastic-ctl", address_);
  EXPECT_EQ(JsonNumber(done["epoch"]), 1);
  EXPECT_EQ(JsonNumber(done["epoch_world_size"]), kWorld - 1);
  EXPECT_EQ(JsonNumber(done["completed_steps"]), kSteps);
  EXPECT_EQ(JsonNumber(done["planned_steps"]), kSteps + abandoned);

  // Exactly once: trained step -> job step, the abandoned ones re-served
  // in order right after the shrink.
  std::set<int64_t> skipped;
  for (int64_t s = from; s < to; ++s) skipped.insert(s);
  std::set<int64_t> undone;  // Abandoned steps a survivor had applied.
  for (int r = 0; r < kWorld; ++r) {
    for (const Line& l : Logged(r)) {
      if (r != kVictim && l.kind == "step" && skipped.count(l.step) > 0) {
        undone.insert(l.step);
      }
    }
  }
  std::fprintf(stderr, "abandoned steps the survivors had applied: %s\n",
               absl::StrJoin(undone, ",").c_str());
  const std::map<std::pair<int64_t, int>, Task> tasks = LoggedTasks(skipped);
  std::map<int64_t, std::multiset<int64_t>> ran;
  std::map<int64_t, int64_t> step_tokens;
  for (const auto& [key, task] : tasks) {
    ran[key.first].insert(task.samples.begin(), task.samples.end());
    step_tokens[key.first] += task.tokens;
  }
  const std::vector<std::multiset<int64_t>> expected = JobSteps();
  ASSERT_EQ(expected.size(), static_cast<size_t>(kSteps));
  std::vector<int64_t> trained;
  for (int64_t s = 0; s < kSteps + abandoned; ++s) {
    if (s < from || s >= to) trained.push_back(s);
  }
  for (size_t i = 0; i < trained.size(); ++i) {
    EXPECT_EQ(ran[trained[i]], expected[i])
        << "step " << trained[i] << " (job step " << i
        << "): a sample skipped or trained twice";
  }
  EXPECT_EQ(ran.size(), trained.size()) << "a step ran that was not planned";

  // Epoch 1 on the survivors: one loss, the world's tokens, one state.
  std::map<int64_t, std::vector<Line>> epoch1;
  for (int r = 0; r < kWorld; ++r) {
    for (const Line& l : Logged(r)) {
      if (l.kind != "step" || l.epoch != 1) continue;
      EXPECT_NE(r, kVictim);
      epoch1[l.step].push_back(l);
    }
  }
  EXPECT_EQ(epoch1.size(), static_cast<size_t>(kSteps + abandoned - to));
  for (const auto& [step, lines] : epoch1) {
    ASSERT_EQ(lines.size(), static_cast<size_t>(kWorld - 1)) << step;
    for (const Line& l : lines) {
      EXPECT_EQ(l.tokens, step_tokens[step]) << "step " << step;
      EXPECT_EQ(l.loss, lines[0].loss) << "step " << step;
      EXPECT_FALSE(l.weights.empty());
      EXPECT_EQ(l.weights, lines[0].weights) << "step " << step;
    }
  }
  ASSERT_FALSE(epoch1.empty());
  // Epoch 1 began from the weights after the last completed step, step
  // from - 1 (a survivor that applied an abandoned step went back).
  if (from > 0) {
    std::set<std::string> completed;
    for (int r = 0; r < kWorld; ++r) {
      for (const Line& l : Logged(r)) {
        if (l.kind == "step" && l.step == from - 1) completed.insert(l.weights);
      }
    }
    ASSERT_EQ(completed.size(), 1u);
    for (const Line& l : epoch1.begin()->second) {
      EXPECT_EQ(l.start_weights, *completed.begin());
    }
  }
  std::fprintf(stderr, "epoch 1: steps %lld..%lld, final weights %s\n",
               static_cast<long long>(epoch1.begin()->first),
               static_cast<long long>(epoch1.rbegin()->first),
               epoch1.rbegin()->second[0].weights.c_str());
  // The survivors said what they gave up.
  for (const Child& a : survivors) {
    EXPECT_TRUE(absl::StrContains(ReadFile(a.err_path), "of epoch 0 given up"))
        << a.name;
  }
}

}  // namespace
}  // namespace dcp
