#include "worker_agent/task_executor.h"

#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "comm/fake_communicator.h"
#include "nlohmann/json.hpp"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

/// Moves 1 ms forward on every reading, so a task timed by two readings
/// takes exactly 1 ms.
class TickingClock final : public Clock {
 public:
  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    now_ += absl::Milliseconds(1);
    return now_;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::UnixEpoch();
};

v1::Task MakeTask(int index, std::vector<int> ranks,
                  std::vector<int64_t> samples, std::vector<int64_t> lengths,
                  int group_id = 0) {
  v1::Task task;
  task.set_task_index(index);
  for (int r : ranks) task.add_ranks(r);
  for (int64_t s : samples) task.add_samples(s);
  for (int64_t l : lengths) task.add_lengths(l);
  task.set_group_id(group_id);
  task.set_recompute(0.25);
  return task;
}

TaskExecutorOptions Options(int rank, Clock* clock) {
  TaskExecutorOptions options;
  options.rank = rank;
  options.num_heads = 4;
  options.head_dim = 8;
  options.token_scale = 16;
  options.layers = 2;
  options.clock = clock;
  return options;
}

TaskExecutor::GroupResolver NoGroups() {
  return [](const v1::CommGroup& group) -> absl::StatusOr<Communicator*> {
    return absl::InternalError("no group expected");
  };
}

TEST(TaskExecutorTest, RejectsBadOptions) {
  TaskExecutorOptions options = Options(0, nullptr);
  options.num_heads = 0;
  EXPECT_EQ(TaskExecutor::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = Options(0, nullptr);
  options.token_scale = 0;
  EXPECT_EQ(TaskExecutor::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options = Options(-1, nullptr);
  EXPECT_EQ(TaskExecutor::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TaskExecutorTest, RunsSingleRankTasksAndReportsPlanTokens) {
  TickingClock clock;
  auto executor = TaskExecutor::Create(Options(2, &clock));
  ASSERT_TRUE(executor.ok()) << executor.status();
  v1::RankStep step;
  step.set_epoch(1);
  step.set_step(7);
  step.set_rank(2);
  *step.add_tasks() = MakeTask(3, {2}, {11, 12}, {100, 30});
  *step.add_tasks() = MakeTask(5, {2}, {4}, {1});

  absl::StatusOr<StepExecution> done = (*executor)->RunStep(step, NoGroups());
  ASSERT_TRUE(done.ok()) << done.status();
  const v1::TimingReport& report = done->report;
  EXPECT_EQ(report.epoch(), 1);
  EXPECT_EQ(report.step(), 7);
  EXPECT_EQ(report.rank(), 2);
  ASSERT_EQ(report.tasks_size(), 2);
  EXPECT_EQ(report.tasks(0).task_index(), 3);
  EXPECT_EQ(report.tasks(0).micro_step(), 0);
  EXPECT_EQ(report.tasks(0).group_size(), 1);
  EXPECT_EQ(report.tasks(0).tokens(), 130);  // The plan's, not the scaled.
  EXPECT_THAT(report.tasks(0).sample_lengths(), ElementsAre(100, 30));
  EXPECT_DOUBLE_EQ(report.tasks(0).recompute(), 0.25);
  EXPECT_DOUBLE_EQ(report.tasks(0).seconds(), 0.001);
  EXPECT_EQ(report.tasks(1).task_index(), 5);
  EXPECT_EQ(report.tasks(1).micro_step(), 1);
  EXPECT_EQ(report.tasks(1).tokens(), 1);
  EXPECT_THAT(done->samples, ElementsAre(11, 12, 4));
  ASSERT_EQ(done->tasks.size(), 2u);
  // ceil(100/16) + ceil(30/16) = 7 + 2.
  EXPECT_EQ(done->tasks[0].scaled_tokens, 9);
  EXPECT_EQ(done->tasks[1].scaled_tokens, 1);
}

TEST(TaskExecutorTest, StepWithoutTasksReportsNoTasks) {
  auto executor = TaskExecutor::Create(Options(1, nullptr));
  ASSERT_TRUE(executor.ok());
  v1::RankStep step;
  step.set_step(3);
  step.set_rank(1);
  absl::StatusOr<StepExecution> done = (*executor)->RunStep(step, NoGroups());
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->report.tasks_size(), 0);
  EXPECT_EQ(done->report.step(), 3);
  EXPECT_TRUE(done->samples.empty());
}

TEST(TaskExecutorTest, RejectsMalformedSteps) {
  auto executor = TaskExecutor::Create(Options(0, nullptr));
  ASSERT_TRUE(executor.ok());
  v1::RankStep step;
  step.set_step(4);
  step.set_rank(0);
  *step.add_tasks() = MakeTask(0, {1}, {3}, {10});  // Not this rank's.
  absl::Status s = (*executor)->RunStep(step, NoGroups()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("step 4 task 0"));

  step.clear_tasks();
  *step.add_tasks() = MakeTask(0, {0}, {3, 4}, {10});  // Lengths missing.
  EXPECT_EQ((*executor)->RunStep(step, NoGroups()).status().code(),
            absl::StatusCode::kInvalidArgument);

  step.clear_tasks();
  *step.add_tasks() = MakeTask(0, {0, 1}, {3}, {10}, /*group_id=*/1);
  s = (*executor)->RunStep(step, NoGroups()).status();  // No such group.
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("group 1"));

  step.set_rank(3);  // Another rank's step.
  EXPECT_EQ((*executor)->RunStep(step, NoGroups()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

/// A step of `world` ranks with one task on group [0..p) per entry.
v1::RankStep GroupStep(int rank, int p, std::vector<int64_t> samples,
                       std::vector<int64_t> lengths) {
  v1::RankStep step;
  step.set_step(9);
  step.set_rank(rank);
  std::vector<int> ranks;
  for (int r = 0; r < p; ++r) ranks.push_back(r);
  v1::Task task = MakeTask(6, ranks, samples, lengths, /*group_id=*/1);
  for (int r = 0; r < p; ++r) task.add_micro_steps(0);
  *step.add_tasks() = task;
  v1::CommGroup& group = *step.add_groups();
  group.set_id(1);
  for (int r : ranks) group.add_ranks(r);
  group.set_rendezvous_prefix("s/e0/g");
  return step;
}

/// Runs `steps[r]` on rank r of a fake group, in threads.
std::vector<absl::StatusOr<StepExecution>> RunGroup(
    const std::vector<v1::RankStep>& steps, int heads = 4) {
  const int p = static_cast<int>(steps.size());
  auto members = FakeCommunicator::Group(p, absl::Seconds(10));
  std::vector<absl::StatusOr<StepExecution>> results(
      p, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      TaskExecutorOptions options = Options(r, nullptr);
      options.num_heads = heads;
      auto executor = TaskExecutor::Create(options);
      if (!executor.ok()) {
        results[r] = executor.status();
        return;
      }
      Communicator* comm = members[r].get();
      results[r] = (*executor)->RunStep(
          steps[r],
          [comm](const v1::CommGroup&) -> absl::StatusOr<Communicator*> {
            return comm;
          });
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

TEST(TaskExecutorTest, GroupRunsUlyssesAndAgrees) {
  std::vector<v1::RankStep> steps;
  for (int r = 0; r < 4; ++r) {
    steps.push_back(GroupStep(r, 4, {21, 22, 23}, {300, 17, 64}));
  }
  std::vector<absl::StatusOr<StepExecution>> results = RunGroup(steps);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status();
    ASSERT_EQ(results[r]->tasks.size(), 1u);
    EXPECT_THAT(results[r]->tasks[0].group, ElementsAre(0, 1, 2, 3));
    EXPECT_THAT(results[r]->samples, ElementsAre(21, 22, 23));
    // 19 + 2 + 4 = 25 scaled tokens, padded to 28 for 4 ranks.
    EXPECT_EQ(results[r]->tasks[0].scaled_tokens, 28);
    EXPECT_EQ(results[r]->report.tasks(0).group_size(), 4);
    EXPECT_GT(results[r]->report.tasks(0).seconds(), 0);
  }
}

TEST(TaskExecutorTest, GroupDisagreementIsInternalErrorOnEveryMember) {
  std::vector<v1::RankStep> steps = {GroupStep(0, 2, {1, 2}, {40, 40}),
                                     GroupStep(1, 2, {1, 3}, {40, 40})};
  std::vector<absl::StatusOr<StepExecution>> results = RunGroup(steps);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(results[r].ok()) << "rank " << r;
    EXPECT_EQ(results[r].status().code(), absl::StatusCode::kInternal);
    EXPECT_THAT(results[r].status().message(), HasSubstr("step 9 task 6"));
    EXPECT_THAT(results[r].status().message(),
                HasSubstr(absl::StrCat("ranks [", 1 - r, "]")));
  }
}

TEST(TaskExecutorTest, GroupSizeMustDivideHeads) {
  std::vector<v1::RankStep> steps = {GroupStep(0, 2, {1}, {40}),
                                     GroupStep(1, 2, {1}, {40})};
  std::vector<absl::StatusOr<StepExecution>> results =
      RunGroup(steps, /*heads=*/3);
  EXPECT_EQ(results[0].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(results[0].status().message(), HasSubstr("does not divide"));
}

TEST(TaskExecutorTest, CommunicatorOfWrongSizeIsInternalError) {
  auto members = FakeCommunicator::Group(3);
  auto executor = TaskExecutor::Create(Options(0, nullptr));
  ASSERT_TRUE(executor.ok());
  Communicator* comm = members[0].get();
  absl::Status s =
      (*executor)
          ->RunStep(
              GroupStep(0, 2, {1}, {40}),
              [comm](const v1::CommGroup&) -> absl::StatusOr<Communicator*> {
                return comm;
              })
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("expected rank 0 of 2"));
}

TEST(TaskExecutorTest, ResolverErrorNamesTheTask) {
  auto executor = TaskExecutor::Create(Options(0, nullptr));
  ASSERT_TRUE(executor.ok());
  absl::Status s =
      (*executor)
          ->RunStep(GroupStep(0, 2, {1}, {40}),
                    [](const v1::CommGroup&) -> absl::StatusOr<Communicator*> {
                      return absl::DeadlineExceededError("peer missing");
                    })
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("step 9 task 6"));
  EXPECT_THAT(s.message(), HasSubstr("peer missing"));
}

v1::ProfileRequest TwoRankProfileRequest() {
  v1::ProfileRequest request;
  request.set_epoch(0);
  request.add_lengths(256);
  request.add_lengths(1024);
  request.add_group_sizes(1);
  request.add_group_sizes(2);
  request.add_recompute(0);
  request.add_recompute(1);
  request.set_repetitions(3);
  v1::CommGroup* group = request.add_groups();
  group->set_id(1);
  group->add_ranks(0);
  group->add_ranks(1);
  group->set_rendezvous_prefix("s/e0/profile/g0-1");
  return request;
}

TEST(TaskExecutorTest, ProfileRunsTheGridAndOnlyTheGroupLeaderReportsIt) {
  const v1::ProfileRequest request = TwoRankProfileRequest();
  auto members = FakeCommunicator::Group(2, absl::Seconds(10));
  std::vector<absl::StatusOr<v1::Profile>> results(
      2, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto executor = TaskExecutor::Create(Options(r, nullptr));
      ASSERT_TRUE(executor.ok());
      Communicator* comm = members[r].get();
      results[r] = (*executor)->RunProfile(
          request,
          [comm](const v1::CommGroup& g) -> absl::StatusOr<Communicator*> {
            if (g.ranks_size() != 2) return absl::InternalError("bad group");
            return comm;
          });
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  ASSERT_TRUE(results[1].ok()) << results[1].status();
  // Rank 0: p = 1 and its group's p = 2; rank 1: p = 1 only.
  ASSERT_EQ(results[0]->entries_size(), 8);
  ASSERT_EQ(results[1]->entries_size(), 4);
  int p2 = 0;
  for (const v1::ProfileEntry& e : results[0]->entries()) {
    EXPECT_GT(e.seconds(), 0);
    EXPECT_TRUE(e.length() == 256 || e.length() == 1024);
    p2 += e.group_size() == 2;
  }
  EXPECT_EQ(p2, 4);
  for (const v1::ProfileEntry& e : results[1]->entries()) {
    EXPECT_EQ(e.group_size(), 1);
  }
}

TEST(TaskExecutorTest, ProfileWithoutAGroupForTheRankIsInvalid) {
  v1::ProfileRequest request = TwoRankProfileRequest();
  auto executor = TaskExecutor::Create(Options(2, nullptr));
  ASSERT_TRUE(executor.ok());
  const absl::Status s = (*executor)->RunProfile(request, NoGroups()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("group size 2"));
}

TEST(TaskExecutorTest, ExecutionLogHasOneLinePerTaskAndOnePerStep) {
  TickingClock clock;
  auto executor = TaskExecutor::Create(Options(2, &clock));
  ASSERT_TRUE(executor.ok());
  v1::RankStep step;
  step.set_step(7);
  step.set_rank(2);
  *step.add_tasks() = MakeTask(3, {2}, {11, 12}, {100, 30});
  *step.add_tasks() = MakeTask(5, {2}, {4}, {1});
  absl::StatusOr<StepExecution> done = (*executor)->RunStep(step, NoGroups());
  ASSERT_TRUE(done.ok());

  std::istringstream lines(FormatExecutionLog(step, *done));
  std::vector<nlohmann::json> parsed;
  for (std::string line; std::getline(lines, line);) {
    parsed.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(parsed.size(), 3u);
  EXPECT_EQ(parsed[0]["kind"], "task");
  EXPECT_EQ(parsed[0]["step"], 7);
  EXPECT_EQ(parsed[0]["rank"], 2);
  EXPECT_EQ(parsed[0]["task_index"], 3);
  EXPECT_EQ(parsed[0]["group"], nlohmann::json({2}));
  EXPECT_EQ(parsed[0]["samples"], nlohmann::json({11, 12}));
  EXPECT_DOUBLE_EQ(parsed[0]["seconds"].get<double>(), 0.001);
  EXPECT_EQ(parsed[1]["task_index"], 5);
  EXPECT_EQ(parsed[1]["micro_step"], 1);
  EXPECT_EQ(parsed[2]["kind"], "step");
  EXPECT_EQ(parsed[2]["tasks"], 2);
  EXPECT_DOUBLE_EQ(parsed[2]["seconds"].get<double>(), 0.002);
}

}  // namespace
}  // namespace dcp
