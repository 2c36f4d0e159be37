#include "train/trainer.h"

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/process_groups.h"
#include "comm/rendezvous_store.h"
#include "common/clock.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/plan.pb.h"
#include "train/corpus.h"
#include "train/rank_plan.h"
#include "train/transformer.h"

namespace dcp::train {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kStep = 3;

RankTrainerOptions Options(int world, int rank) {
  RankTrainerOptions o;
  o.model.model.name = "tiny";
  o.model.model.layers = 2;
  o.model.model.hidden = 32;
  o.model.model.heads = 4;
  o.model.model.kv_heads = 2;
  o.model.model.ffn = 64;
  o.model.model.vocab = 16;
  o.model.model.causal = true;
  o.model.dtype = at::kDouble;
  o.model.seed = 3;
  o.corpus.vocab = 16;
  o.corpus.max_length = 64;
  o.world_size = world;
  o.rank = rank;
  o.session_id = "sess";
  return o;
}

std::unique_ptr<RankTrainer> MakeTrainer(const RankTrainerOptions& options,
                                         ProcessGroups* groups = nullptr) {
  absl::StatusOr<std::unique_ptr<RankTrainer>> trainer =
      RankTrainer::Create(options, groups);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

struct TaskSpec {
  std::vector<int> ranks;
  std::vector<int64_t> samples;
  std::vector<int64_t> lengths;
  double recompute = 0;
  /// Task.ulysses: 0 is the whole group.
  int ulysses = 0;
};

// A plan as a scheduler would send it (one group per distinct rank set).
v1::StepPlan MakePlan(const std::vector<TaskSpec>& tasks) {
  v1::StepPlan plan;
  plan.set_step(kStep);
  int64_t total = 0;
  for (size_t t = 0; t < tasks.size(); ++t) {
    v1::Task& task = *plan.add_tasks();
    task.set_task_index(static_cast<int32_t>(t));
    for (int r : tasks[t].ranks) task.add_ranks(r);
    for (size_t i = 0; i < tasks[t].samples.size(); ++i) {
      task.add_samples(tasks[t].samples[i]);
      task.add_lengths(tasks[t].lengths[i]);
      total += tasks[t].lengths[i];
    }
    task.set_recompute(tasks[t].recompute);
    task.set_ulysses(tasks[t].ulysses);
    if (tasks[t].ranks.size() > 1) {
      v1::CommGroup& group = *plan.add_groups();
      group.set_id(plan.groups_size());
      for (int r : tasks[t].ranks) group.add_ranks(r);
      group.set_rendezvous_prefix(absl::StrCat("sess/e0/g", t));
      task.set_group_id(group.id());
    }
  }
  plan.set_total_tokens(total);
  return plan;
}

RankPlan PlanOf(const v1::StepPlan& plan, int rank) {
  absl::StatusOr<RankPlan> mine = RankPlanFromStep(plan, rank);
  EXPECT_TRUE(mine.ok()) << mine.status();
  return mine.ok() ? *std::move(mine) : RankPlan();
}

std::vector<at::Tensor> Snapshot(const RankTrainer& trainer) {
  std::vector<at::Tensor> copies;
  for (const at::Tensor& p : trainer.model().parameters()) {
    copies.push_back(p.detach().clone());
  }
  return copies;
}

double MaxRelative(const std::vector<at::Tensor>& a,
                   const std::vector<at::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double scale = b[i].abs().max().item<double>();
    const double diff = (a[i] - b[i]).abs().max().item<double>();
    worst = std::max(worst, scale > 0 ? diff / scale : diff);
  }
  return worst;
}

bool Equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!at::equal(a[i], b[i])) return false;
  }
  return true;
}

const std::vector<TaskSpec> kLocalTasks = {
    {{0}, {4, 9}, {7, 5}, 1.0},
    {{0}, {2}, {11}, 0.5},
};

TEST(RankTrainerTest, StepOfAWorldOfOneIsTheReferenceStep) {
  const v1::StepPlan plan = MakePlan(kLocalTasks);
  std::unique_ptr<RankTrainer> a = MakeTrainer(Options(1, 0));
  std::unique_ptr<RankTrainer> b = MakeTrainer(Options(1, 0));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  StepOptions keep;
  keep.keep_gradients = true;
  absl::StatusOr<StepStats> sa = a->Step(PlanOf(plan, 0), keep);
  absl::StatusOr<StepStats> sb = b->ReferenceStep(plan, keep);
  ASSERT_TRUE(sa.ok()) << sa.status();
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_TRUE(Equal(a->gradients(), b->gradients()));
  EXPECT_TRUE(Equal(Snapshot(*a), Snapshot(*b)));
  EXPECT_EQ(sa->loss, sb->loss);
  EXPECT_EQ(sa->grad_norm, sb->grad_norm);
  EXPECT_EQ(sa->step, kStep);
  EXPECT_EQ(sa->tokens, 7 + 5 + 11);
}

// With derived weights (length / step tokens) the step's loss is the mean
// over every token of the step, and grad_norm the gradients' norm.
TEST(RankTrainerTest, LossIsTheTokenMeanOfTheStep) {
  const RankTrainerOptions options = Options(1, 0);
  std::unique_ptr<RankTrainer> trainer = MakeTrainer(options);
  ASSERT_NE(trainer, nullptr);
  absl::StatusOr<std::unique_ptr<Transformer>> model =
      Transformer::Create(options.model);
  ASSERT_TRUE(model.ok()) << model.status();
  SyntheticCorpus corpus(options.corpus);
  double token_loss_sum = 0;
  int64_t tokens = 0;
  for (const TaskSpec& task : kLocalTasks) {
    for (size_t i = 0; i < task.samples.size(); ++i) {
      absl::StatusOr<TokenSample> s =
          corpus.Tokens(task.samples[i], task.lengths[i]);
      ASSERT_TRUE(s.ok()) << s.status();
      PackedTask packed;
      packed.cu_seqlens = {0, task.lengths[i]};
      packed.loss_weights = {1.0};
      packed.inputs =
          at::tensor(std::vector<int64_t>(s->inputs.begin(), s->inputs.end()));
      packed.targets = at::tensor(
          std::vector<int64_t>(s->targets.begin(), s->targets.end()));
      absl::StatusOr<TaskShard> shard = ShardTask(packed, 1, 0);
      ASSERT_TRUE(shard.ok()) << shard.status();
      absl::StatusOr<TaskResult> result = (*model)->Run(*shard);
      ASSERT_TRUE(result.ok()) << result.status();
      token_loss_sum += result->token_loss.sum().item<double>();
      tokens += task.lengths[i];
    }
  }
  StepOptions keep;
  keep.keep_gradients = true;
  absl::StatusOr<StepStats> stats =
      trainer->ReferenceStep(MakePlan(kLocalTasks), keep);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_NEAR(stats->loss, token_loss_sum / tokens, 1e-12);
  double squares = 0;
  for (const at::Tensor& g : trainer->gradients()) {
    squares += g.pow(2).sum().item<double>();
  }
  EXPECT_NEAR(stats->grad_norm, std::sqrt(squares), 1e-12);
}

// A clock that moves one second at every reading: the trainer reads it at
// the start, after each task and at the end.
class TickingClock : public Clock {
 public:
  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    now_ += absl::Seconds(1);
    return now_;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ = absl::UnixEpoch();
};

TEST(RankTrainerTest, TimesEachTaskAndTheStepsTail) {
  TickingClock clock;
  RankTrainerOptions options = Options(1, 0);
  options.clock = &clock;
  std::unique_ptr<RankTrainer> trainer = MakeTrainer(options);
  ASSERT_NE(trainer, nullptr);
  const RankPlan plan = PlanOf(MakePlan(kLocalTasks), 0);
  absl::StatusOr<StepStats> stats = trainer->Step(plan);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->task_seconds.size(), plan.tasks.size());
  for (double s : stats->task_seconds) EXPECT_EQ(s, 1.0);
  EXPECT_EQ(stats->sync_seconds, 1.0);
  EXPECT_EQ(stats->seconds, static_cast<double>(plan.tasks.size()) + 1.0);
}

TEST(RankTrainerTest, RehearseTimesTheTasksAndLeavesTheParameters) {
  TickingClock clock;
  RankTrainerOptions options = Options(1, 0);
  options.clock = &clock;
  std::unique_ptr<RankTrainer> trainer = MakeTrainer(options);
  ASSERT_NE(trainer, nullptr);
  const std::vector<at::Tensor> before = Snapshot(*trainer);
  const RankPlan plan = PlanOf(MakePlan(kLocalTasks), 0);
  absl::StatusOr<std::vector<double>> seconds = trainer->Rehearse(plan);
  ASSERT_TRUE(seconds.ok()) << seconds.status();
  EXPECT_EQ(*seconds, std::vector<double>(plan.tasks.size(), 1.0));
  EXPECT_TRUE(Equal(Snapshot(*trainer), before));
  for (const at::Tensor& p : trainer->model().parameters()) {
    EXPECT_FALSE(p.grad().defined());
  }
  RankPlan other = plan;
  other.rank = 1;
  EXPECT_FALSE(trainer->Rehearse(other).ok());
}

TEST(RankTrainerTest, StepMovesTheParametersAndClearsTheGradients) {
  std::unique_ptr<RankTrainer> trainer = MakeTrainer(Options(1, 0));
  ASSERT_NE(trainer, nullptr);
  const std::vector<at::Tensor> before = Snapshot(*trainer);
  ASSERT_TRUE(trainer->Step(PlanOf(MakePlan(kLocalTasks), 0)).ok());
  EXPECT_GT(MaxRelative(Snapshot(*trainer), before), 1e-4);
  EXPECT_TRUE(trainer->gradients().empty());
  for (const at::Tensor& p : trainer->model().parameters()) {
    EXPECT_FALSE(p.grad().defined());
  }
}

// A plan the trainer cannot run fails naming rank, step and task, and leaves
// the parameters as they were.
TEST(RankTrainerTest, UnrunnablePlansFailNamingRankStepAndTask) {
  std::unique_ptr<RankTrainer> trainer = MakeTrainer(Options(1, 0));
  ASSERT_NE(trainer, nullptr);
  const std::vector<at::Tensor> before = Snapshot(*trainer);

  // Longer than the corpus's max_length (64).
  RankPlan too_long =
      PlanOf(MakePlan({{{0}, {1}, {5}, 0}, {{0}, {2}, {65}, 0}}), 0);
  absl::Status status = trainer->Step(too_long).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("rank 0, step 3"), HasSubstr("task 1"),
                    HasSubstr("sample 2")));

  RankPlan weights = PlanOf(MakePlan(kLocalTasks), 0);
  weights.tasks[0].loss_weights = {0.5};  // Two samples.
  weights.tasks[1].loss_weights = {0.5};
  status = trainer->Step(weights).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("task 0"), HasSubstr("1 loss weights")));

  RankPlan no_total = PlanOf(MakePlan(kLocalTasks), 0);
  no_total.step_tokens = 0;
  status = trainer->Step(no_total).status();
  EXPECT_THAT(std::string(status.message()), HasSubstr("no loss weights"));

  RankPlan other = PlanOf(MakePlan(kLocalTasks), 0);
  other.rank = 1;
  EXPECT_EQ(trainer->Step(other).status().code(),
            absl::StatusCode::kInvalidArgument);

  // A group of two needs process groups.
  v1::StepPlan shared = MakePlan({{{0, 1}, {1}, {8}, 0}});
  status = trainer->ReferenceStep(shared).status();
  EXPECT_TRUE(status.ok()) << status;  // The reference runs it whole.
  const std::vector<at::Tensor> after_reference = Snapshot(*trainer);
  status = trainer->Step(PlanOf(shared, 0)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("task 0"));

  EXPECT_FALSE(Equal(after_reference, before));
  EXPECT_TRUE(Equal(Snapshot(*trainer), after_reference));
  for (const at::Tensor& p : trainer->model().parameters()) {
    EXPECT_FALSE(p.grad().defined());
  }
}

TEST(RankTrainerTest, CreateRefusesWhatCannotTrain) {
  EXPECT_FALSE(RankTrainer::Create(Options(2, 2), nullptr).ok());
  EXPECT_FALSE(RankTrainer::Create(Options(2, 0), nullptr).ok());
  RankTrainerOptions big_vocab = Options(1, 0);
  big_vocab.corpus.vocab = 17;
  EXPECT_THAT(
      std::string(RankTrainer::Create(big_vocab, nullptr).status().message()),
      HasSubstr("vocabulary"));
  RankTrainerOptions bad_lr = Options(1, 0);
  bad_lr.optimizer.lr = -1;
  EXPECT_FALSE(RankTrainer::Create(bad_lr, nullptr).ok());
}

// Two ranks as threads over Gloo and an in-memory store.
class TwoRanksTest : public ::testing::Test {
 protected:
  std::unique_ptr<ProcessGroups> Groups(int rank, absl::Duration timeout) {
    ProcessGroups::Options options;
    options.rank = rank;
    options.timeout = timeout;
    absl::StatusOr<std::unique_ptr<ProcessGroups>> groups =
        ProcessGroups::Create(&store_, options);
    EXPECT_TRUE(groups.ok()) << groups.status();
    return groups.ok() ? *std::move(groups) : nullptr;
  }

  // Each rank's Step of `plan`, run concurrently.
  std::vector<absl::StatusOr<StepStats>> RunBoth(
      const v1::StepPlan& plan, std::vector<std::unique_ptr<RankTrainer>>& t) {
    std::vector<absl::StatusOr<StepStats>> stats(2, absl::UnknownError(""));
    std::vector<std::thread> threads;
    StepOptions keep;
    keep.keep_gradients = true;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back(
          [&, r] { stats[r] = t[r]->Step(PlanOf(plan, r), keep); });
    }
    for (std::thread& thread : threads) thread.join();
    return stats;
  }

  InMemoryRendezvousStore store_;
};

TEST_F(TwoRanksTest, StepMatchesTheReference) {
  std::vector<std::unique_ptr<ProcessGroups>> groups;
  std::vector<std::unique_ptr<RankTrainer>> trainers;
  for (int r = 0; r < 2; ++r) {
    groups.push_back(Groups(r, absl::Seconds(60)));
    ASSERT_NE(groups.back(), nullptr);
    trainers.push_back(MakeTrainer(Options(2, r), groups.back().get()));
    ASSERT_NE(trainers.back(), nullptr);
  }
  // A pack of 13 over two ranks, then a task of rank 1 alone.
  const v1::StepPlan plan =
      MakePlan({{{0, 1}, {1, 2}, {6, 7}, 0.5}, {{1}, {3}, {9}, 0}});
  std::vector<absl::StatusOr<StepStats>> stats = RunBoth(plan, trainers);
  ASSERT_TRUE(stats[0].ok()) << stats[0].status();
  ASSERT_TRUE(stats[1].ok()) << stats[1].status();
  std::unique_ptr<RankTrainer> reference = MakeTrainer(Options(1, 0));
  StepOptions keep;
  keep.keep_gradients = true;
  absl::StatusOr<StepStats> want = reference->ReferenceStep(plan, keep);
  ASSERT_TRUE(want.ok()) << want.status();
  for (int r = 0; r < 2; ++r) {
    EXPECT_LE(MaxRelative(trainers[r]->gradients(), reference->gradients()),
              1e-12);
    EXPECT_LE(MaxRelative(Snapshot(*trainers[r]), Snapshot(*reference)), 1e-12);
    EXPECT_NEAR(stats[r]->loss, want->loss, 1e-12);
    EXPECT_EQ(stats[r]->tokens, 22);
  }
  EXPECT_TRUE(Equal(Snapshot(*trainers[0]), Snapshot(*trainers[1])));
  EXPECT_EQ(stats[0]->loss, stats[1]->loss);
  EXPECT_EQ(stats[0]->grad_norm, stats[1]->grad_norm);
}

// The shared task as a ring of two (Ulysses degree 1, zig-zag layout):
// the same step as one process.
TEST_F(TwoRanksTest, ARingStepMatchesTheReference) {
  std::vector<std::unique_ptr<ProcessGroups>> groups;
  std::vector<std::unique_ptr<RankTrainer>> trainers;
  for (int r = 0; r < 2; ++r) {
    groups.push_back(Groups(r, absl::Seconds(60)));
    ASSERT_NE(groups.back(), nullptr);
    trainers.push_back(MakeTrainer(Options(2, r), groups.back().get()));
    ASSERT_NE(trainers.back(), nullptr);
  }
  const v1::StepPlan plan = MakePlan(
      {{{0, 1}, {1, 2}, {6, 7}, 0.5, /*ulysses=*/1}, {{1}, {3}, {9}, 0}});
  std::vector<absl::StatusOr<StepStats>> stats = RunBoth(plan, trainers);
  ASSERT_TRUE(stats[0].ok()) << stats[0].status();
  ASSERT_TRUE(stats[1].ok()) << stats[1].status();
  std::unique_ptr<RankTrainer> reference = MakeTrainer(Options(1, 0));
  StepOptions keep;
  keep.keep_gradients = true;
  absl::StatusOr<StepStats> want = reference->ReferenceStep(plan, keep);
  ASSERT_TRUE(want.ok()) << want.status();
  for (int r = 0; r < 2; ++r) {
    EXPECT_LE(MaxRelative(trainers[r]->gradients(), reference->gradients()),
              1e-12);
    EXPECT_NEAR(stats[r]->loss, want->loss, 1e-12);
    EXPECT_EQ(stats[r]->tokens, 22);
  }
}

// Rank 1 cannot make its half of the shared task: it refuses the task in the
// group's first collective, so rank 0 fails at once too; both name
// themselves, the step and the task.
TEST_F(TwoRanksTest, ARankThatCannotRunItsShardFailsBoth) {
  std::vector<std::unique_ptr<ProcessGroups>> groups;
  std::vector<std::unique_ptr<RankTrainer>> trainers;
  for (int r = 0; r < 2; ++r) {
    groups.push_back(Groups(r, absl::Seconds(60)));
    ASSERT_NE(groups.back(), nullptr);
    trainers.push_back(MakeTrainer(Options(2, r), groups.back().get()));
    ASSERT_NE(trainers.back(), nullptr);
  }
  // Rank 1's half of the pack is sample -2, which the corpus has not;
  // rank 0 then runs a task of its own.
  const v1::StepPlan plan =
      MakePlan({{{0, 1}, {1, -2}, {6, 6}, 0}, {{0}, {3}, {9}, 0}});
  const absl::Time start = absl::Now();
  std::vector<absl::StatusOr<StepStats>> stats = RunBoth(plan, trainers);
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(stats[1].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(stats[1].status().message()),
              AllOf(HasSubstr("rank 1, step 3"), HasSubstr("task 0"),
                    HasSubstr("sample -2")));
  EXPECT_EQ(stats[0].status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(stats[0].status().message()),
              AllOf(HasSubstr("rank 0, step 3"), HasSubstr("task 0")));
}

TEST_F(TwoRanksTest, APeerThatNeverArrivesIsADeadline) {
  std::unique_ptr<ProcessGroups> groups = Groups(0, absl::Seconds(1));
  ASSERT_NE(groups, nullptr);
  std::unique_ptr<RankTrainer> trainer =
      MakeTrainer(Options(2, 0), groups.get());
  ASSERT_NE(trainer, nullptr);
  const absl::Time start = absl::Now();
  absl::Status status =
      trainer->Step(PlanOf(MakePlan({{{0}, {1}, {5}, 0}}), 0)).status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("rank 0, step 3"));
}

// A job of three ranks as threads, whose world shrinks and grows by epoch.
class ElasticWorldTest : public TwoRanksTest {
 protected:
  static constexpr int kJob = 3;

  // `plan` as epoch `epoch`'s step `step` over `world`, its loss weights
  // each sample's share of the step's tokens.
  static v1::StepPlan InEpoch(v1::StepPlan plan, int64_t epoch, int64_t step) {
    plan.set_epoch(epoch);
    plan.set_step(step);
    for (v1::CommGroup& group : *plan.mutable_groups()) {
      group.set_rendezvous_prefix(absl::StrCat(
          "sess/e", epoch, "/g", absl::StrJoin(group.ranks(), "-")));
    }
    for (v1::Task& task : *plan.mutable_tasks()) {
      for (int64_t length : task.lengths()) {
        task.add_loss_weights(static_cast<double>(length) /
                              plan.total_tokens());
      }
    }
    return plan;
  }

  // The Step of `plan` on each trainer of `world`, concurrently.
  std::map<int, absl::StatusOr<StepStats>> RunWorld(
      const v1::StepPlan& plan, const std::vector<int>& world,
      std::vector<std::unique_ptr<RankTrainer>>& trainers) {
    std::map<int, absl::StatusOr<StepStats>> stats;
    for (int r : world) stats.emplace(r, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int r : world) {
      threads.emplace_back([&, r] {
        RankPlan mine = PlanOf(plan, r);
        mine.world_ranks = world;
        stats.at(r) = trainers[r]->Step(mine);
      });
    }
    for (std::thread& thread : threads) thread.join();
    return stats;
  }

  void Start() {
    for (int r = 0; r < kJob; ++r) {
      groups_.push_back(Groups(r, absl::Seconds(60)));
      trainers_.push_back(MakeTrainer(Options(kJob, r), groups_.back().get()));
    }
  }

  std::vector<std::unique_ptr<ProcessGroups>> groups_;
  std::vector<std::unique_ptr<RankTrainer>> trainers_;
};

// Rank 1 fails after epoch 0; rank 2 took one optimizer step more than
// rank 0 (its last all-reduce completed where rank 0's did not). Epoch 1 on
// ranks [0, 2] starts from the state of the member with the fewest steps,
// and trains its step as one process would: the gradients summed over the
// new world, the loss weights over the step's tokens summing to 1 there.
TEST_F(ElasticWorldTest, AShrunkWorldStartsFromOneStateAndTrainsLikeOne) {
  Start();
  const v1::StepPlan first = InEpoch(
      MakePlan({{{0, 1}, {1, 2}, {6, 7}, 0}, {{2}, {3}, {9}, 0}}), 0, 0);
  for (auto& [rank, stats] : RunWorld(first, {0, 1, 2}, trainers_)) {
    ASSERT_TRUE(stats.ok()) << rank << ": " << stats.status();
  }
  const v1::StepPlan lost = InEpoch(MakePlan({{{2}, {8}, {5}, 0}}), 0, 1);
  ASSERT_TRUE(trainers_[2]->ReferenceStep(lost).ok());
  ASSERT_EQ(trainers_[2]->steps_applied(), 2);
  ASSERT_FALSE(Equal(Snapshot(*trainers_[0]), Snapshot(*trainers_[2])));

  const v1::StepPlan shrunk = InEpoch(
      MakePlan({{{0, 2}, {4, 5}, {8, 6}, 0.5}, {{0}, {6}, {3}, 0}}), 1, 2);
  double weights = 0;
  for (const v1::Task& task : shrunk.tasks()) {
    for (double w : task.loss_weights()) weights += w;
  }
  EXPECT_NEAR(weights, 1.0, 1e-12);
  std::map<int, absl::StatusOr<StepStats>> stats =
      RunWorld(shrunk, {0, 2}, trainers_);

  std::unique_ptr<RankTrainer> reference = MakeTrainer(Options(1, 0));
  ASSERT_TRUE(reference->ReferenceStep(first).ok());
  absl::StatusOr<StepStats> want = reference->ReferenceStep(shrunk);
  ASSERT_TRUE(want.ok()) << want.status();
  for (int r : {0, 2}) {
    ASSERT_TRUE(stats.at(r).ok()) << r << ": " << stats.at(r).status();
    EXPECT_NEAR(stats.at(r)->loss, want->loss, 1e-12) << r;
    EXPECT_EQ(stats.at(r)->tokens, 17) << r;
    EXPECT_LE(MaxRelative(Snapshot(*trainers_[r]), Snapshot(*reference)),
              1e-12)
        << r;
    EXPECT_EQ(trainers_[r]->steps_applied(), 2) << r;
  }
  EXPECT_TRUE(Equal(Snapshot(*trainers_[0]), Snapshot(*trainers_[2])));
}

// Rank 1 comes back as a fresh process in epoch 2: it takes the world's
// state instead of offering its seeded one.
TEST_F(ElasticWorldTest, ARankThatReturnsFreshTakesTheWorldsState) {
  Start();
  const v1::StepPlan first =
      InEpoch(MakePlan({{{0, 2}, {1, 2}, {6, 7}, 0}}), 1, 0);
  for (auto& [rank, stats] : RunWorld(first, {0, 2}, trainers_)) {
    ASSERT_TRUE(stats.ok()) << rank << ": " << stats.status();
  }
  groups_[1] = Groups(1, absl::Seconds(60));
  trainers_[1] = MakeTrainer(Options(kJob, 1), groups_[1].get());
  const v1::StepPlan grown =
      InEpoch(MakePlan({{{0, 1}, {3}, {12}, 0}, {{2}, {4}, {5}, 0}}), 2, 1);
  for (auto& [rank, stats] : RunWorld(grown, {0, 1, 2}, trainers_)) {
    ASSERT_TRUE(stats.ok()) << rank << ": " << stats.status();
  }
  std::unique_ptr<RankTrainer> reference = MakeTrainer(Options(1, 0));
  ASSERT_TRUE(reference->ReferenceStep(first).ok());
  ASSERT_TRUE(reference->ReferenceStep(grown).ok());
  for (int r = 0; r < kJob; ++r) {
    EXPECT_LE(MaxRelative(Snapshot(*trainers_[r]), Snapshot(*reference)),
              1e-12)
        << r;
  }
  EXPECT_TRUE(Equal(Snapshot(*trainers_[0]), Snapshot(*trainers_[1])));
}

// Rank 1 hangs after epoch 0's step while ranks 0 and 2 train two steps of
// epoch 1 without it; it wakes and is admitted back in epoch 2. It took the
// fewest steps, but its state is epoch 0's: the grown world takes epoch
// 1's, as one process that trained every step would hold.
TEST_F(ElasticWorldTest, ARankThatHungThroughAnEpochTakesTheNewerState) {
  Start();
  const v1::StepPlan first =
      InEpoch(MakePlan({{{0, 1}, {1, 2}, {6, 7}, 0}, {{2}, {3}, {9}, 0}}), 0, 0);
  for (auto& [rank, stats] : RunWorld(first, {0, 1, 2}, trainers_)) {
    ASSERT_TRUE(stats.ok()) << rank << ": " << stats.status();
  }
  const std::vector<v1::StepPlan> shrunk = {
      InEpoch(MakePlan({{{0, 2}, {4, 5}, {8, 6}, 0}}), 1, 1),
      InEpoch(MakePlan({{{0}, {6}, {3}, 0}, {{2}, {7}, {5}, 0}}), 1, 2)};
  for (const v1::StepPlan& plan : shrunk) {
    for (auto& [rank, stats] : RunWorld(plan, {0, 2}, trainers_)) {
      ASSERT_TRUE(stats.ok()) << rank << ": " << stats.status();
    }
  }
  ASSERT_LT(trainers_[1]->steps_applied(), trainers_[0]->steps_applied());
  const v1::StepPlan grown =
      InEpoch(MakePlan({{{0, 1}, {8}, {12}, 0}, {{2}, {9}, {5}, 0}}), 2, 3);
  for (auto& [rank, stats] : RunWorld(grown, {0, 1, 2}, trainers_)) {
    ASSERT_TRUE(stats.ok()) << rank << ": " << stats.status();
  }
  std::unique_ptr<RankTrainer> reference = MakeTrainer(Options(1, 0));
  for (const v1::StepPlan* plan : {&first, &shrunk[0], &shrunk[1], &grown}) {
    ASSERT_TRUE(reference->ReferenceStep(*plan).ok());
  }
  for (int r = 0; r < kJob; ++r) {
    EXPECT_LE(MaxRelative(Snapshot(*trainers_[r]), Snapshot(*reference)),
              1e-12)
        << r;
    EXPECT_EQ(trainers_[r]->steps_applied(), 4) << r;
  }
}

// Rank 1 dies after all three applied step 1 but before it reported it:
// the scheduler abandons step 1 and re-serves its samples in epoch 1. Its
// first step says so (abandoned_from = 1), and ranks 0 and 2 go back to
// their state before step 1: the job trains step 0, then epoch 1's step,
// as one process would, step 1's samples once.
TEST_F(ElasticWorldTest, AnAbandonedStepThatWasAppliedIsUndone) {
  for (int r = 0; r < kJob; ++r) {
    groups_.push_back(Groups(r, absl::Seconds(60)));
    RankTrainerOptions options = Options(kJob, r);
    options.history = 2;
    trainers_.push_back(MakeTrainer(options, groups_.back().get()));
  }
  const v1::StepPlan step0 =
      InEpoch(MakePlan({{{0, 1}, {1, 2}, {6, 7}, 0}, {{2}, {3}, {9}, 0}}), 0, 0);
  const v1::StepPlan step1 =
      InEpoch(MakePlan({{{1, 2}, {4, 5}, {8, 6}, 0}, {{0}, {6}, {3}, 0}}), 0, 1);
  std::string after0;
  for (const v1::StepPlan* plan : {&step0, &step1}) {
    for (auto& [rank, stats] : RunWorld(*plan, {0, 1, 2}, trainers_)) {
      ASSERT_TRUE(stats.ok()) << rank << ": " << stats.status();
    }
    if (after0.empty()) after0 = trainers_[0]->WeightsDigest();
  }
  ASSERT_NE(trainers_[0]->WeightsDigest(), after0);
  // Step 1's samples again, for the world of two.
  const v1::StepPlan again =
      InEpoch(MakePlan({{{0, 2}, {4, 5, 6}, {8, 6, 3}, 0}}), 1, 2);
  std::map<int, absl::StatusOr<StepStats>> stats;
  std::vector<std::thread> threads;
  for (int r : {0, 2}) stats.emplace(r, absl::UnknownError("not run"));
  for (int r : {0, 2}) {
    threads.emplace_back([&, r] {
      RankPlan mine = PlanOf(again, r);
      mine.world_ranks = {0, 2};
      mine.abandoned_from = 1;
      stats.at(r) = trainers_[r]->Step(mine);
    });
  }
  for (std::thread& t : threads) t.join();
  std::unique_ptr<RankTrainer> reference = MakeTrainer(Options(1, 0));
  ASSERT_TRUE(reference->ReferenceStep(step0).ok());
  ASSERT_TRUE(reference->ReferenceStep(again).ok());
  for (int r : {0, 2}) {
    ASSERT_TRUE(stats.at(r).ok()) << r << ": " << stats.at(r).status();
    EXPECT_LE(MaxRelative(Snapshot(*trainers_[r]), Snapshot(*reference)),
              1e-12)
        << r;
    EXPECT_EQ(trainers_[r]->steps_applied(), 2) << r;
  }
  // Both began the step from their state after step 0, bit for bit.
  EXPECT_EQ(stats.at(0)->start_digest, after0);
  EXPECT_EQ(stats.at(2)->start_digest, after0);
}

// Without the state before the abandoned step, the step fails instead of
// training it twice.
TEST_F(ElasticWorldTest, AnAbandonedStepWithoutHistoryIsRefused) {
  std::unique_ptr<RankTrainer> alone = MakeTrainer(Options(1, 0));
  ASSERT_NE(alone, nullptr);
  const v1::StepPlan step0 = InEpoch(MakePlan({{{0}, {1}, {6}, 0}}), 0, 0);
  ASSERT_TRUE(alone->Step(PlanOf(step0, 0)).ok());
  RankPlan next = PlanOf(InEpoch(MakePlan({{{0}, {1}, {6}, 0}}), 1, 1), 0);
  next.abandoned_from = 0;
  const absl::Status status = alone->Step(next).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("step 0 was abandoned after this rank applied it"));
}

TEST_F(ElasticWorldTest, RefusesAWorldWithoutTheRank) {
  Start();
  RankPlan plan = PlanOf(InEpoch(MakePlan({{{0}, {1}, {5}, 0}}), 1, 0), 1);
  plan.world_ranks = {0, 2};
  absl::Status status = trainers_[1]->Step(plan).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("the step's world [0,2] is not an ascending set"));
}

}  // namespace
}  // namespace dcp::train
