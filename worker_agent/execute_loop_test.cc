#include "worker_agent/execute_loop.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "comm/rendezvous_store.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/plan.pb.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

/// Hands out the steps it was given, then the drain (or `end`), and keeps
/// the reports. Its groups meet in `store`.
class ScriptedSource final : public StepSourceInterface {
 public:
  ScriptedSource(std::vector<v1::RankStep> steps,
                 RendezvousStoreInterface* store,
                 absl::Status end = absl::OkStatus())
      : steps_(steps.begin(), steps.end()), store_(store), end_(std::move(end)) {}

  absl::StatusOr<NextStepResult> NextStep(int64_t after_step,
                                          absl::Duration timeout) override {
    if (on_ask) on_ask(after_step);
    asked_after.push_back(after_step);
    NextStepResult result;
    if (steps_.empty()) {
      if (!end_.ok()) return end_;
      result.drained = true;
      return result;
    }
    result.step = steps_.front();
    steps_.pop_front();
    return result;
  }
  absl::Status ReportTimings(const v1::TimingReport& report) override {
    reports.push_back(report);
    return absl::OkStatus();
  }
  RendezvousStoreInterface* rendezvous_store() override { return store_; }
  std::string session_id() override { return "sess"; }

  std::vector<int64_t> asked_after;
  std::vector<v1::TimingReport> reports;
  /// Called first by each NextStep, with its `after_step`; may block.
  std::function<void(int64_t)> on_ask;

 private:
  std::deque<v1::RankStep> steps_;
  RendezvousStoreInterface* const store_;
  const absl::Status end_;
};

/// Step `index` of `rank`: one task of 64 tokens on `ranks` (a group when
/// more than one).
v1::RankStep StepOf(int64_t index, int rank = 0,
                    const std::vector<int>& ranks = {0}) {
  v1::RankStep step;
  step.set_epoch(0);
  step.set_step(index);
  step.set_rank(rank);
  step.set_total_tokens(64);
  v1::Task& task = *step.add_tasks();
  task.set_task_index(0);
  for (int r : ranks) task.add_ranks(r);
  task.add_samples(index);
  task.add_lengths(64);
  if (ranks.size() > 1) {
    task.set_group_id(1);
    v1::CommGroup& group = *step.add_groups();
    group.set_id(1);
    for (int r : ranks) group.add_ranks(r);
    group.set_rendezvous_prefix("sess/e0/s" + std::to_string(index) + "/g1");
  }
  return step;
}

ExecuteLoopOptions Options(int rank = 0, int world = 1) {
  ExecuteLoopOptions options;
  ModelSpec& model = options.executor.model;
  model.name = "tiny";
  model.layers = 1;
  model.hidden = 32;
  model.heads = 4;
  model.kv_heads = 4;
  model.ffn = 64;
  model.vocab = 100;
  model.causal = true;
  options.executor.rank = rank;
  options.executor.world_size = world;
  options.executor.token_scale = 4;
  options.executor.group_timeout = absl::Seconds(30);
  return options;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

TEST(ExecuteLoopTest, TrainsAndReportsEveryStepUntilTheDrain) {
  InMemoryRendezvousStore store;
  ScriptedSource source({StepOf(0), StepOf(1), StepOf(2)}, &store);
  ExecuteLoopOptions options = Options();
  options.log_file = ::testing::TempDir() + "/execute_loop_test.jsonl";
  std::remove(options.log_file.c_str());
  absl::StatusOr<ExecuteSummary> done = RunExecuteLoop(source, options);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->executed, 3);
  EXPECT_EQ(done->last_step, 2);
  EXPECT_GT(done->first_loss, 0);
  // Each ask is after the step run last.
  EXPECT_THAT(source.asked_after, ElementsAre(-1, 0, 1, 2));
  ASSERT_EQ(source.reports.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(source.reports[i].step(), i);
    ASSERT_EQ(source.reports[i].tasks_size(), 1);
    // The plan's tokens, not the scaled ones the CPU ran.
    EXPECT_EQ(source.reports[i].tasks(0).tokens(), 64);
    EXPECT_GT(source.reports[i].tasks(0).seconds(), 0);
    EXPECT_GT(source.reports[i].sync_seconds(), 0);
  }
  const std::string text = ReadAll(options.log_file);
  // One task line and one step line a step.
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 6) << text;
  EXPECT_THAT(text, HasSubstr("\"loss\":"));
}

TEST(ExecuteLoopTest, StopsAfterMaxSteps) {
  InMemoryRendezvousStore store;
  ScriptedSource source({StepOf(0), StepOf(1), StepOf(2)}, &store);
  ExecuteLoopOptions options = Options();
  options.max_steps = 2;
  absl::StatusOr<ExecuteSummary> done = RunExecuteLoop(source, options);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->executed, 2);
  EXPECT_EQ(source.reports.size(), 2u);
}

// Two ranks share each task (Ulysses over a Gloo group of two) and sum
// their gradients: both see the same loss every step.
TEST(ExecuteLoopTest, AWorldOfTwoTrainsTogether) {
  InMemoryRendezvousStore store;
  std::vector<std::unique_ptr<ScriptedSource>> sources;
  for (int rank = 0; rank < 2; ++rank) {
    sources.push_back(std::make_unique<ScriptedSource>(
        std::vector<v1::RankStep>{StepOf(0, rank, {0, 1}),
                                  StepOf(1, rank, {0, 1})},
        &store));
  }
  std::vector<absl::StatusOr<ExecuteSummary>> done(
      2, absl::UnknownError("not run"));
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      done[rank] = RunExecuteLoop(*sources[rank], Options(rank, 2));
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(done[rank].ok()) << "rank " << rank << ": " << done[rank].status();
    EXPECT_EQ(done[rank]->executed, 2);
    ASSERT_EQ(sources[rank]->reports.size(), 2u);
    EXPECT_EQ(sources[rank]->reports[0].tasks(0).group_size(), 2);
  }
  EXPECT_EQ(done[0]->last_loss, done[1]->last_loss);
}

TEST(ExecuteLoopTest, AFailedNextStepEndsTheLoopCancelledWhenStopped) {
  InMemoryRendezvousStore store;
  ScriptedSource lost({StepOf(0)}, &store, absl::UnavailableError("lost"));
  ExecuteLoopOptions options = Options();
  absl::Status status = RunExecuteLoop(lost, options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(lost.reports.size(), 1u);

  ScriptedSource stopped({}, &store, absl::UnavailableError("shut down"));
  options.stopped = [] { return true; };
  EXPECT_EQ(RunExecuteLoop(stopped, options).status().code(),
            absl::StatusCode::kCancelled);
}

TEST(ExecuteLoopTest, RejectsBadOptions) {
  InMemoryRendezvousStore store;
  ScriptedSource source({StepOf(0)}, &store);
  ExecuteLoopOptions options = Options();
  options.log_file = "/nonexistent-dcp-dir/log.jsonl";
  absl::Status status = RunExecuteLoop(source, options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("log_file"));
  options = Options();
  options.executor.token_scale = 0;
  EXPECT_EQ(RunExecuteLoop(source, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = Options();
  options.executor.model.heads = 0;
  EXPECT_EQ(RunExecuteLoop(source, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(source.reports.empty());
}

TEST(ExecuteLoopTest, SimulateFollowsAnEpochChangeWithoutAModel) {
  // No model, no store: simulate mode trains nothing and forms no group,
  // so the world of the steps may change under it (a shrink, epoch 1).
  v1::RankStep shrunk = StepOf(5, 0, {0, 2});
  shrunk.set_epoch(1);
  ScriptedSource source({StepOf(0, 0, {0, 1}), StepOf(1), shrunk}, nullptr);
  ExecuteLoopOptions options;
  options.simulate = true;
  options.simulate_task_time = absl::Milliseconds(1);
  options.log_file = ::testing::TempDir() + "/execute_loop_simulate.jsonl";
  std::remove(options.log_file.c_str());
  absl::StatusOr<ExecuteSummary> done = RunExecuteLoop(source, options);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->executed, 3);
  EXPECT_EQ(done->last_step, 5);
  ASSERT_EQ(source.reports.size(), 3u);
  EXPECT_EQ(source.reports[2].epoch(), 1);
  EXPECT_EQ(source.reports[2].step(), 5);
  ASSERT_EQ(source.reports[2].tasks_size(), 1);
  EXPECT_EQ(source.reports[2].tasks(0).group_size(), 2);
  EXPECT_DOUBLE_EQ(source.reports[2].tasks(0).seconds(), 0.001);
  const std::string log = ReadAll(options.log_file);
  EXPECT_THAT(log, HasSubstr("\"epoch\":1"));
  EXPECT_THAT(log, HasSubstr("\"group\":[0,2]"));
}

// A world of three loses rank 1 after step 0 (its groups close, as when
// its process dies): ranks 0 and 2 give step 1 up (no report), skip the
// rest of epoch 0 and train epoch 1 on [0, 2], its gradient sync over the
// two of them.
TEST(ExecuteLoopTest, AfterAPeerFailsTheRestTrainOnInTheNextEpoch) {
  InMemoryRendezvousStore store;
  absl::Notification done_step0[2];
  std::vector<std::unique_ptr<ScriptedSource>> sources;
  for (int rank = 0; rank < 3; ++rank) {
    std::vector<v1::RankStep> steps = {StepOf(0, rank, {rank})};
    if (rank != 1) {
      steps.push_back(StepOf(1, rank, {rank}));
      steps.push_back(StepOf(2, rank, {rank}));
      v1::RankStep shrunk = StepOf(3, rank, {rank});
      shrunk.set_epoch(1);
      shrunk.add_world_ranks(0);
      shrunk.add_world_ranks(2);
      steps.push_back(shrunk);
    }
    sources.push_back(std::make_unique<ScriptedSource>(steps, &store));
  }
  // Rank 1 leaves once the others finished step 0, so that only their
  // step 1 misses it.
  sources[1]->on_ask = [&](int64_t after) {
    if (after != 0) return;
    for (absl::Notification& n : done_step0) n.WaitForNotification();
  };
  sources[0]->on_ask = [&](int64_t after) {
    if (after == 0) done_step0[0].Notify();
  };
  sources[2]->on_ask = [&](int64_t after) {
    if (after == 0) done_step0[1].Notify();
  };
  std::vector<absl::StatusOr<ExecuteSummary>> done(
      3, absl::UnknownError("not run"));
  std::vector<std::vector<std::pair<int64_t, bool>>> given_up(3);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 3; ++rank) {
    ranks.emplace_back([&, rank] {
      ExecuteLoopOptions options = Options(rank, 3);
      options.on_step_given_up = [&, rank](const v1::RankStep& step,
                                           const absl::Status& error) {
        given_up[rank].emplace_back(step.step(), error.ok());
      };
      done[rank] = RunExecuteLoop(*sources[rank], options);
    });
  }
  for (std::thread& t : ranks) t.join();
  ASSERT_TRUE(done[1].ok()) << done[1].status();
  EXPECT_EQ(done[1]->executed, 1);
  for (int rank : {0, 2}) {
    ASSERT_TRUE(done[rank].ok()) << "rank " << rank << ": "
                                 << done[rank].status();
    EXPECT_EQ(done[rank]->executed, 2) << rank;
    EXPECT_EQ(done[rank]->given_up, 1) << rank;
    EXPECT_EQ(done[rank]->skipped, 1) << rank;
    EXPECT_EQ(done[rank]->last_step, 3) << rank;
    // Step 1 failed (an error), step 2 was skipped (OK).
    EXPECT_THAT(given_up[rank], ElementsAre(std::pair<int64_t, bool>(1, false),
                                            std::pair<int64_t, bool>(2, true)));
    ASSERT_EQ(sources[rank]->reports.size(), 2u) << rank;
    EXPECT_EQ(sources[rank]->reports[1].epoch(), 1);
    EXPECT_EQ(sources[rank]->reports[1].step(), 3);
  }
  // One loss over the new world's two ranks.
  EXPECT_EQ(done[0]->last_loss, done[2]->last_loss);
}

// Without a later epoch, the step's error ends the loop, saying so.
TEST(ExecuteLoopTest, APeerFailureWithoutALaterEpochFailsTheLoop) {
  InMemoryRendezvousStore store;
  ScriptedSource source({StepOf(0, 0, {0})}, &store,
                        absl::DeadlineExceededError("no step in time"));
  ExecuteLoopOptions options = Options(0, 2);
  options.executor.group_timeout = absl::Milliseconds(200);
  absl::Status status = RunExecuteLoop(source, options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("step 0 of epoch 0 was given up for it, and no step "
                        "of a later epoch came: no step in time"));
  EXPECT_TRUE(source.reports.empty());
}

}  // namespace
}  // namespace dcp
