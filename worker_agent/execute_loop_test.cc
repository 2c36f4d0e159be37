#include "worker_agent/execute_loop.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "comm/fake_communicator.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/plan.pb.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

/// Hands out the steps it was given, then the drain (or `end`), and keeps
/// the reports.
class ScriptedSource final : public StepSourceInterface {
 public:
  explicit ScriptedSource(std::vector<v1::RankStep> steps,
                          absl::Status end = absl::OkStatus())
      : steps_(steps.begin(), steps.end()), end_(std::move(end)) {}

  absl::StatusOr<NextStepResult> NextStep(int64_t after_step,
                                          absl::Duration timeout) override {
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
  absl::StatusOr<Communicator*> Group(const v1::CommGroup& group) override {
    return absl::InternalError("no group expected");
  }
  absl::StatusOr<Communicator*> DataParallelGroup() override {
    ++dp_groups_asked;
    return world_[0].get();
  }
  absl::Status ReportTimings(const v1::TimingReport& report) override {
    reports.push_back(report);
    return absl::OkStatus();
  }

  std::vector<int64_t> asked_after;
  std::vector<v1::TimingReport> reports;
  int dp_groups_asked = 0;

 private:
  std::deque<v1::RankStep> steps_;
  const absl::Status end_;
  std::vector<std::unique_ptr<FakeCommunicator>> world_ =
      FakeCommunicator::Group(1);
};

/// Step `index` of rank 0: one task on rank 0 alone.
v1::RankStep StepOf(int64_t index) {
  v1::RankStep step;
  step.set_epoch(0);
  step.set_step(index);
  step.set_rank(0);
  v1::Task& task = *step.add_tasks();
  task.set_task_index(static_cast<int>(index));
  task.add_ranks(0);
  task.add_samples(index);
  task.add_lengths(64);
  return step;
}

ExecuteLoopOptions Options() {
  ExecuteLoopOptions options;
  options.model.name = "tiny";
  options.model.layers = 1;
  options.model.hidden = 32;
  options.model.heads = 4;
  options.model.kv_heads = 4;
  options.model.ffn = 64;
  options.model.vocab = 100;
  options.rank = 0;
  options.token_scale = 16;
  return options;
}

TEST(ExecuteLoopTest, RunsAndReportsEveryStepUntilTheDrain) {
  ScriptedSource source({StepOf(0), StepOf(1), StepOf(2)});
  ExecuteLoopOptions options = Options();
  options.log_file = ::testing::TempDir() + "/execute_loop_test.jsonl";
  std::remove(options.log_file.c_str());
  absl::StatusOr<ExecuteSummary> done = RunExecuteLoop(source, options);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->executed, 3);
  EXPECT_EQ(done->last_step, 2);
  // Each ask is after the step run last.
  EXPECT_THAT(source.asked_after, ElementsAre(-1, 0, 1, 2));
  ASSERT_EQ(source.reports.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(source.reports[i].step(), i);
    ASSERT_EQ(source.reports[i].tasks_size(), 1);
    EXPECT_GT(source.reports[i].tasks(0).seconds(), 0);
  }
  // A world of one rank has no gradient sync.
  EXPECT_EQ(source.dp_groups_asked, 0);
  std::ifstream log(options.log_file);
  const std::string text((std::istreambuf_iterator<char>(log)),
                         std::istreambuf_iterator<char>());
  // One task line and one step line a step.
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 6) << text;
}

TEST(ExecuteLoopTest, StopsAfterMaxSteps) {
  ScriptedSource source({StepOf(0), StepOf(1), StepOf(2)});
  ExecuteLoopOptions options = Options();
  options.max_steps = 2;
  absl::StatusOr<ExecuteSummary> done = RunExecuteLoop(source, options);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->executed, 2);
  EXPECT_EQ(source.reports.size(), 2u);
}

TEST(ExecuteLoopTest, SyncsTheGradientInAWorldOfTwo) {
  ScriptedSource source({StepOf(0), StepOf(1)});
  ExecuteLoopOptions options = Options();
  options.world_size = 2;
  options.gradient_floats = 8;
  absl::StatusOr<ExecuteSummary> done = RunExecuteLoop(source, options);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(source.dp_groups_asked, 2);
  options.sync_gradients = false;
  ScriptedSource unsynced({StepOf(0)});
  ASSERT_TRUE(RunExecuteLoop(unsynced, options).ok());
  EXPECT_EQ(unsynced.dp_groups_asked, 0);
}

TEST(ExecuteLoopTest, AFailedNextStepEndsTheLoopCancelledWhenStopped) {
  ScriptedSource lost({StepOf(0)}, absl::UnavailableError("stream lost"));
  ExecuteLoopOptions options = Options();
  absl::Status status = RunExecuteLoop(lost, options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(lost.reports.size(), 1u);

  ScriptedSource stopped({}, absl::UnavailableError("shut down"));
  options.stopped = [] { return true; };
  EXPECT_EQ(RunExecuteLoop(stopped, options).status().code(),
            absl::StatusCode::kCancelled);
}

TEST(ExecuteLoopTest, RejectsBadOptions) {
  ScriptedSource source({StepOf(0)});
  ExecuteLoopOptions options = Options();
  options.log_file = "/nonexistent-dcp-dir/log.jsonl";
  absl::Status status = RunExecuteLoop(source, options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("log_file"));
  options = Options();
  options.world_size = 2;
  options.gradient_floats = -1;
  EXPECT_EQ(RunExecuteLoop(source, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = Options();
  options.model.heads = 0;
  EXPECT_EQ(RunExecuteLoop(source, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dcp
