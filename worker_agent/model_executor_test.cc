#include "worker_agent/model_executor.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "comm/rendezvous_store.h"
#include "common/model_spec.h"
#include "common/process_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/plan.pb.h"
#include "proto/scheduler_service.pb.h"
#include "worker_agent/step_execution.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

ModelExecutorOptions Options(int layers = 1) {
  ModelExecutorOptions options;
  options.model.name = "tiny";
  options.model.layers = layers;
  options.model.hidden = 32;
  options.model.heads = 4;
  options.model.kv_heads = 2;
  options.model.ffn = 64;
  options.model.vocab = 64;
  options.model.causal = true;
  options.rank = 0;
  options.world_size = 1;
  options.token_scale = 4;
  return options;
}

std::unique_ptr<ModelExecutor> Make(const ModelExecutorOptions& options,
                                    RendezvousStoreInterface* store) {
  absl::StatusOr<std::unique_ptr<ModelExecutor>> made =
      ModelExecutor::Create(options, store);
  EXPECT_TRUE(made.ok()) << made.status();
  return made.ok() ? *std::move(made) : nullptr;
}

// Step 5 of rank 0: two micro-steps, (samples 1, 2 of 10 and 7 tokens) and
// (sample 3 of 9 tokens, recompute 1).
v1::RankStep TwoTaskStep() {
  v1::RankStep step;
  step.set_epoch(0);
  step.set_step(5);
  step.set_rank(0);
  step.set_total_tokens(26);
  v1::Task& a = *step.add_tasks();
  a.set_task_index(0);
  a.add_ranks(0);
  a.add_samples(1);
  a.add_lengths(10);
  a.add_samples(2);
  a.add_lengths(7);
  v1::Task& b = *step.add_tasks();
  b.set_task_index(1);
  b.add_ranks(0);
  b.add_samples(3);
  b.add_lengths(9);
  b.set_recompute(1.0);
  return step;
}

TEST(ModelExecutorTest, ReportsThePlansTokensAndTheScaledRun) {
  InMemoryRendezvousStore store;
  std::unique_ptr<ModelExecutor> executor = Make(Options(), &store);
  ASSERT_NE(executor, nullptr);
  absl::StatusOr<StepExecution> done = executor->RunStep(TwoTaskStep());
  ASSERT_TRUE(done.ok()) << done.status();
  const v1::TimingReport& report = done->report;
  EXPECT_EQ(report.step(), 5);
  ASSERT_EQ(report.tasks_size(), 2);
  EXPECT_EQ(report.tasks(0).tokens(), 17);
  EXPECT_THAT(report.tasks(0).sample_lengths(), ElementsAre(10, 7));
  EXPECT_EQ(report.tasks(1).micro_step(), 1);
  EXPECT_EQ(report.tasks(1).recompute(), 1.0);
  EXPECT_GT(report.tasks(0).seconds(), 0);
  EXPECT_GT(report.sync_seconds(), 0);
  // ceil(10/4) + ceil(7/4) and ceil(9/4) tokens ran.
  ASSERT_EQ(done->tasks.size(), 2u);
  EXPECT_EQ(done->tasks[0].scaled_tokens, 3 + 2);
  EXPECT_EQ(done->tasks[1].scaled_tokens, 3);
  EXPECT_EQ(done->tokens, 3 + 2 + 3);
  EXPECT_GT(done->loss, 0);

  // The log: a line per task, then the step's with its loss.
  const std::string log = FormatExecutionLog(TwoTaskStep(), *done);
  const std::vector<std::string> lines = absl::StrSplit(log, '\n');
  ASSERT_EQ(lines.size(), 4u);  // Three lines and the empty tail.
  const nlohmann::json step = nlohmann::json::parse(lines[2]);
  EXPECT_EQ(step["kind"], "step");
  EXPECT_EQ(step["loss"].get<double>(), done->loss);
  EXPECT_EQ(step["tokens"].get<int64_t>(), done->tokens);
  EXPECT_EQ(step["weights"].get<std::string>().size(), 16u);
  EXPECT_EQ(step["weights"], done->weights_digest);
}

TEST(ModelExecutorTest, RefusesPlansItCannotRunNamingRankStepAndTask) {
  InMemoryRendezvousStore store;
  std::unique_ptr<ModelExecutor> executor = Make(Options(), &store);
  ASSERT_NE(executor, nullptr);
  v1::RankStep other = TwoTaskStep();
  other.set_rank(1);
  EXPECT_EQ(executor->RunStep(other).status().code(),
            absl::StatusCode::kInvalidArgument);

  v1::RankStep weights = TwoTaskStep();
  weights.mutable_tasks(1)->add_loss_weights(0.5);
  weights.mutable_tasks(1)->add_loss_weights(0.5);
  weights.mutable_tasks(0)->add_loss_weights(1.0);
  absl::Status status = executor->RunStep(weights).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("rank 0"), HasSubstr("step 5"),
                    HasSubstr("task 0")));
}

TEST(ModelExecutorTest, RefusesBadOptions) {
  InMemoryRendezvousStore store;
  ModelExecutorOptions options = Options();
  options.rank = 2;
  EXPECT_FALSE(ModelExecutor::Create(options, &store).ok());
  options = Options();
  options.token_scale = 0;
  EXPECT_FALSE(ModelExecutor::Create(options, &store).ok());
  EXPECT_FALSE(ModelExecutor::Create(Options(), nullptr).ok());
  options = Options();
  options.world_size = 2;  // Without a session id.
  options.rank = 1;
  EXPECT_FALSE(ModelExecutor::Create(options, &store).ok());
}

// The grid in order (length, then recompute), each point timed; with two
// layers, recomputing both holds less memory than recomputing none.
TEST(ModelExecutorTest, ProfilesTheGridWithPeakMemory) {
  MakeResidentMemoryFollowAllocations();
  InMemoryRendezvousStore store;
  ModelExecutorOptions options = Options(/*layers=*/2);
  options.token_scale = 1;
  std::unique_ptr<ModelExecutor> executor = Make(options, &store);
  ASSERT_NE(executor, nullptr);
  v1::ProfileRequest request;
  request.add_group_sizes(1);
  request.add_lengths(64);
  request.add_lengths(1024);
  request.add_recompute(0);
  request.add_recompute(1);
  request.set_repetitions(1);
  absl::StatusOr<v1::Profile> profile = executor->RunProfile(request);
  ASSERT_TRUE(profile.ok()) << profile.status();
  ASSERT_EQ(profile->entries_size(), 4);
  const int64_t lengths[] = {64, 64, 1024, 1024};
  const double recompute[] = {0, 1, 0, 1};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(profile->entries(i).length(), lengths[i]);
    EXPECT_EQ(profile->entries(i).recompute(), recompute[i]);
    EXPECT_EQ(profile->entries(i).group_size(), 1);
    EXPECT_GT(profile->entries(i).seconds(), 0);
  }
  EXPECT_GT(profile->entries(2).memory_bytes(), 0);
  EXPECT_LT(profile->entries(3).memory_bytes(),
            profile->entries(2).memory_bytes());

  // One cap per ratio: 1024 tokens fit a GPU only at r = 1.
  request.add_max_tokens_per_gpu(512);
  request.add_max_tokens_per_gpu(1024);
  absl::StatusOr<v1::Profile> capped = executor->RunProfile(request);
  ASSERT_TRUE(capped.ok()) << capped.status();
  ASSERT_EQ(capped->entries_size(), 3);
  EXPECT_EQ(capped->entries(2).length(), 1024);
  EXPECT_EQ(capped->entries(2).recompute(), 1);
  request.clear_max_tokens_per_gpu();

  request.add_group_sizes(3);  // Does not divide the 4 heads.
  EXPECT_THAT(std::string(executor->RunProfile(request).status().message()),
              HasSubstr("group size 3"));
}

}  // namespace
}  // namespace dcp
