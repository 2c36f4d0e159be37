#include "train/rank_plan.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/plan.pb.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

v1::Task* AddTask(v1::StepPlan& plan, std::vector<int> ranks,
                  std::vector<int64_t> samples, std::vector<int64_t> lengths,
                  int32_t group_id, std::vector<int> micro_steps) {
  v1::Task* task = plan.add_tasks();
  task->set_task_index(plan.tasks_size() - 1);
  for (int r : ranks) task->add_ranks(r);
  for (int64_t s : samples) task->add_samples(s);
  for (int64_t l : lengths) task->add_lengths(l);
  task->set_group_id(group_id);
  for (int m : micro_steps) task->add_micro_steps(m);
  return task;
}

void AddGroup(v1::StepPlan& plan, int32_t id, std::vector<int> ranks,
              std::string prefix) {
  v1::CommGroup* group = plan.add_groups();
  group->set_id(id);
  for (int r : ranks) group->add_ranks(r);
  group->set_rendezvous_prefix(prefix);
}

// World of 4: a p=2 task on {0,1}, a p=1 task on {2}, then a p=4 task on
// everyone. Loss weights are sample tokens over step tokens.
v1::StepPlan ThreeTaskPlan() {
  v1::StepPlan plan;
  plan.set_epoch(3);
  plan.set_step(7);
  AddTask(plan, {0, 1}, {10, 11}, {5, 4}, 1, {0, 0});
  AddTask(plan, {2}, {12}, {7}, 0, {0});
  AddTask(plan, {0, 1, 2, 3}, {13}, {3}, 2, {1, 1, 1, 0})->set_recompute(0.5);
  AddGroup(plan, 1, {0, 1}, "sess/e3/g0-1");
  AddGroup(plan, 2, {0, 1, 2, 3}, "sess/e3/g0-1-2-3");
  int64_t total = 0;
  for (const v1::Task& task : plan.tasks()) {
    for (int64_t l : task.lengths()) total += l;
  }
  plan.set_total_tokens(total);
  for (v1::Task& task : *plan.mutable_tasks()) {
    for (int64_t l : task.lengths()) {
      task.add_loss_weights(static_cast<double>(l) / total);
    }
  }
  return plan;
}

// What the scheduler streams to `rank`: the tasks and groups naming it.
v1::RankStep RankViewOf(const v1::StepPlan& plan, int rank) {
  v1::RankStep out;
  out.set_epoch(plan.epoch());
  out.set_step(plan.step());
  out.set_rank(rank);
  out.set_total_tokens(plan.total_tokens());
  auto names = [rank](const auto& ranks) {
    return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
  };
  for (const v1::Task& task : plan.tasks()) {
    if (names(task.ranks())) *out.add_tasks() = task;
  }
  for (const v1::CommGroup& group : plan.groups()) {
    if (names(group.ranks())) *out.add_groups() = group;
  }
  return out;
}

TEST(ShardOfPackTest, ShardsTileThePaddedPackAndHoldEveryTokenOnce) {
  for (int64_t total = 0; total <= 40; ++total) {
    for (int p = 1; p <= 8; ++p) {
      int64_t next_begin = 0;
      int64_t real = 0;
      const PackShard first = ShardOfPack(total, p, 0);
      for (int g = 0; g < p; ++g) {
        const PackShard shard = ShardOfPack(total, p, g);
        SCOPED_TRACE(testing::Message()
                     << "T=" << total << " p=" << p << " g=" << g);
        EXPECT_EQ(shard.begin, next_begin);
        EXPECT_EQ(shard.count, first.count);
        EXPECT_EQ(shard.padded_tokens, p * first.count);
        EXPECT_LE(shard.real_tokens, shard.count);
        // Only the tail of the pack is padding.
        if (shard.real_tokens < shard.count) {
          EXPECT_EQ(shard.begin + shard.real_tokens,
                    std::max(total, shard.begin));
        }
        next_begin += shard.count;
        real += shard.real_tokens;
      }
      EXPECT_EQ(real, total);
      // The smallest multiple of p that holds the pack.
      EXPECT_GE(first.padded_tokens, total);
      EXPECT_LT(first.padded_tokens - total, p);
      EXPECT_EQ(first.padded_tokens % p, 0);
    }
  }
}

TEST(ShardOfPackTest, MatchesTheDefinition) {
  // T = 10, p = 4: ceil(10 / 4) = 3, padded to 12.
  const PackShard last = ShardOfPack(10, 4, 3);
  EXPECT_EQ(last.begin, 9);
  EXPECT_EQ(last.count, 3);
  EXPECT_EQ(last.real_tokens, 1);
  EXPECT_EQ(last.padded_tokens, 12);
}

TEST(RankPlanTest, RankOfTwoGroupsGetsBothTasksInOrder) {
  const v1::StepPlan plan = ThreeTaskPlan();
  absl::StatusOr<RankPlan> got = RankPlanFromStep(plan, 1);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->epoch, 3);
  EXPECT_EQ(got->step, 7);
  EXPECT_EQ(got->rank, 1);
  EXPECT_EQ(got->step_tokens, 5 + 4 + 7 + 3);
  ASSERT_EQ(got->tasks.size(), 2u);

  const RankTask& first = got->tasks[0];
  EXPECT_EQ(first.task_index, 0);
  EXPECT_EQ(first.micro_step, 0);
  EXPECT_EQ(first.group_id, 1);
  EXPECT_THAT(first.group_ranks, ElementsAre(0, 1));
  EXPECT_EQ(first.group_rank, 1);
  EXPECT_EQ(first.rendezvous_prefix, "sess/e3/g0-1");
  EXPECT_THAT(first.samples, ElementsAre(10, 11));
  EXPECT_THAT(first.lengths, ElementsAre(5, 4));
  EXPECT_THAT(first.loss_weights, ElementsAre(5.0 / 19, 4.0 / 19));
  EXPECT_EQ(first.total_tokens, 9);
  // Nine tokens over two members: five each, the last one padding.
  EXPECT_EQ(first.shard.begin, 5);
  EXPECT_EQ(first.shard.count, 5);
  EXPECT_EQ(first.shard.real_tokens, 4);

  const RankTask& second = got->tasks[1];
  EXPECT_EQ(second.task_index, 2);
  EXPECT_EQ(second.micro_step, 1);
  EXPECT_EQ(second.group_id, 2);
  EXPECT_EQ(second.group_rank, 1);
  EXPECT_EQ(second.recompute, 0.5);
  EXPECT_EQ(second.shard.begin, 1);
  EXPECT_EQ(second.shard.count, 1);
}

// Rank 1's tasks of ThreeTaskPlan, three times shorter: 5 -> 2, 4 -> 2,
// and every length at least one token.
TEST(ScaledRankPlanTest, ShortensEverySampleAndReshards) {
  absl::StatusOr<RankPlan> got = RankPlanFromStep(ThreeTaskPlan(), 1);
  ASSERT_TRUE(got.ok()) << got.status();
  const RankPlan scaled = ScaledRankPlan(*got, 3);
  EXPECT_EQ(scaled.step_tokens, (got->step_tokens + 2) / 3);
  ASSERT_EQ(scaled.tasks.size(), got->tasks.size());
  for (size_t t = 0; t < scaled.tasks.size(); ++t) {
    const RankTask& before = got->tasks[t];
    const RankTask& after = scaled.tasks[t];
    ASSERT_EQ(after.lengths.size(), before.lengths.size());
    int64_t total = 0;
    for (size_t i = 0; i < after.lengths.size(); ++i) {
      EXPECT_EQ(after.lengths[i], std::max<int64_t>(1, (before.lengths[i] + 2) / 3));
      total += after.lengths[i];
    }
    EXPECT_EQ(after.total_tokens, total);
    const PackShard want = ShardOfPack(
        total, static_cast<int>(after.group_ranks.size()), after.group_rank);
    EXPECT_EQ(after.shard.begin, want.begin);
    EXPECT_EQ(after.shard.count, want.count);
    EXPECT_EQ(after.shard.real_tokens, want.real_tokens);
    EXPECT_EQ(after.samples, before.samples);
    EXPECT_EQ(after.loss_weights, before.loss_weights);
    EXPECT_EQ(after.group_ranks, before.group_ranks);
  }
  EXPECT_THAT(scaled.tasks[0].lengths, ElementsAre(2, 2));
}

TEST(ScaledRankPlanTest, ScaleOneIsTheSamePlan) {
  absl::StatusOr<RankPlan> got = RankPlanFromStep(ThreeTaskPlan(), 1);
  ASSERT_TRUE(got.ok()) << got.status();
  const RankPlan same = ScaledRankPlan(*got, 1);
  ASSERT_EQ(same.tasks.size(), got->tasks.size());
  EXPECT_EQ(same.tasks[0].lengths, got->tasks[0].lengths);
  EXPECT_EQ(same.tasks[0].shard.begin, got->tasks[0].shard.begin);
  EXPECT_EQ(same.step_tokens, got->step_tokens);
}

TEST(RankPlanTest, SingleRankTaskHasNoGroupAndHoldsThePack) {
  absl::StatusOr<RankPlan> got = RankPlanFromStep(ThreeTaskPlan(), 2);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->tasks.size(), 2u);
  const RankTask& solo = got->tasks[0];
  EXPECT_EQ(solo.group_id, 0);
  EXPECT_THAT(solo.group_ranks, ElementsAre(2));
  EXPECT_EQ(solo.group_rank, 0);
  EXPECT_THAT(solo.rendezvous_prefix, IsEmpty());
  EXPECT_EQ(solo.shard.begin, 0);
  EXPECT_EQ(solo.shard.count, 7);
  EXPECT_EQ(solo.shard.real_tokens, 7);
}

TEST(RankPlanTest, ShardOfOnlyPaddingForATinyPack) {
  // Three tokens over four ranks: rank 3 holds one padding position.
  absl::StatusOr<RankPlan> got = RankPlanFromStep(ThreeTaskPlan(), 3);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->tasks.size(), 1u);
  EXPECT_EQ(got->tasks[0].micro_step, 0);
  EXPECT_EQ(got->tasks[0].shard.begin, 3);
  EXPECT_EQ(got->tasks[0].shard.real_tokens, 0);
}

TEST(RankPlanTest, RankWithoutTasksGetsAnEmptyList) {
  absl::StatusOr<RankPlan> got = RankPlanFromStep(ThreeTaskPlan(), 5);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->rank, 5);
  EXPECT_THAT(got->tasks, IsEmpty());
}

TEST(RankPlanTest, RankViewGivesWhatTheWholePlanGives) {
  const v1::StepPlan plan = ThreeTaskPlan();
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE(rank);
    absl::StatusOr<RankPlan> whole = RankPlanFromStep(plan, rank);
    absl::StatusOr<RankPlan> view =
        RankPlanFromRankStep(RankViewOf(plan, rank));
    ASSERT_TRUE(whole.ok()) << whole.status();
    ASSERT_TRUE(view.ok()) << view.status();
    ASSERT_EQ(whole->tasks.size(), view->tasks.size());
    for (size_t i = 0; i < whole->tasks.size(); ++i) {
      const RankTask& a = whole->tasks[i];
      const RankTask& b = view->tasks[i];
      EXPECT_EQ(a.task_index, b.task_index);
      EXPECT_EQ(a.micro_step, b.micro_step);
      EXPECT_EQ(a.group_ranks, b.group_ranks);
      EXPECT_EQ(a.rendezvous_prefix, b.rendezvous_prefix);
      EXPECT_EQ(a.samples, b.samples);
      EXPECT_EQ(a.loss_weights, b.loss_weights);
      EXPECT_EQ(a.shard.begin, b.shard.begin);
    }
  }
}

TEST(RankPlanTest, MicroStepsMayBeLeftOut) {
  v1::StepPlan plan = ThreeTaskPlan();
  for (v1::Task& task : *plan.mutable_tasks()) task.clear_micro_steps();
  absl::StatusOr<RankPlan> got = RankPlanFromStep(plan, 0);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->tasks.size(), 2u);
  EXPECT_EQ(got->tasks[1].micro_step, 1);
}

// The message a rejected plan gets names the rank, the step and the task.
void ExpectRejected(const absl::StatusOr<RankPlan>& got, int rank, int task,
                    const std::string& why) {
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument)
      << got.status();
  EXPECT_THAT(std::string(got.status().message()),
              AllOf(HasSubstr(absl::StrCat("rank ", rank)), HasSubstr("step 7"),
                    HasSubstr(absl::StrCat("task ", task)), HasSubstr(why)));
}

TEST(RankPlanTest, RejectsLossWeightsOfTheWrongSize) {
  v1::StepPlan plan = ThreeTaskPlan();
  plan.mutable_tasks(0)->add_loss_weights(0.1);
  ExpectRejected(RankPlanFromStep(plan, 0), 0, 0, "3 loss_weights for 2");
}

TEST(RankPlanTest, RejectsWeightsOnSomeTasksOnly) {
  v1::StepPlan plan = ThreeTaskPlan();
  plan.mutable_tasks(2)->clear_loss_weights();
  ExpectRejected(RankPlanFromStep(plan, 0), 0, 2, "on every task");
}

TEST(RankPlanTest, RejectsARankNotInTheTasksGroup) {
  v1::RankStep view = RankViewOf(ThreeTaskPlan(), 3);
  *view.add_tasks() = ThreeTaskPlan().tasks(1);  // Rank 2's task.
  // Keep task_index ascending so that membership is what fails.
  view.mutable_tasks(1)->set_task_index(5);
  ExpectRejected(RankPlanFromRankStep(view), 3, 5, "not in the task's group");
}

TEST(RankPlanTest, RejectsMicroStepsOutOfOrder) {
  v1::StepPlan plan = ThreeTaskPlan();
  plan.mutable_tasks(2)->set_micro_steps(1, 0);  // Rank 1's second task.
  ExpectRejected(RankPlanFromStep(plan, 1), 1, 2, "out of order");
  // The other ranks' views are unaffected.
  EXPECT_TRUE(RankPlanFromStep(plan, 0).ok());
}

TEST(RankPlanTest, RejectsARankViewWhoseTasksComeOutOfOrder) {
  v1::RankStep view = RankViewOf(ThreeTaskPlan(), 0);
  ASSERT_EQ(view.tasks_size(), 2);
  view.mutable_tasks()->SwapElements(0, 1);
  // The micro_steps the plan carries tell first...
  ExpectRejected(RankPlanFromRankStep(view), 0, 2, "out of order");
  // ...and without them, the task order does.
  for (v1::Task& task : *view.mutable_tasks()) task.clear_micro_steps();
  ExpectRejected(RankPlanFromRankStep(view), 0, 0, "comes after task 2");
}

TEST(RankPlanTest, RejectsAGroupTheViewDoesNotCarry) {
  v1::RankStep view = RankViewOf(ThreeTaskPlan(), 0);
  view.mutable_groups()->RemoveLast();
  ExpectRejected(RankPlanFromRankStep(view), 0, 2, "names no group");
}

TEST(RankPlanTest, RejectsAGroupWithOtherRanks) {
  v1::StepPlan plan = ThreeTaskPlan();
  plan.mutable_groups(0)->set_ranks(1, 2);
  ExpectRejected(RankPlanFromStep(plan, 0), 0, 0, "differ from those of group");
}

// A plan of a shrunk epoch: ranks 0, 2 and 3 of a job of four, rank 1 left
// out.
v1::StepPlan ShrunkPlan() {
  v1::StepPlan plan;
  plan.set_epoch(1);
  plan.set_step(7);
  AddTask(plan, {0, 2}, {20, 21}, {6, 2}, 1, {0, 0});
  AddTask(plan, {3}, {22}, {4}, 0, {0});
  AddGroup(plan, 1, {0, 2}, "sess/e1/g0-2");
  plan.set_total_tokens(12);
  return plan;
}

v1::RankStep ShrunkView(int rank) {
  v1::RankStep view = RankViewOf(ShrunkPlan(), rank);
  for (int r : {0, 2, 3}) view.add_world_ranks(r);
  return view;
}

TEST(RankPlanTest, CarriesTheEpochsWorld) {
  absl::StatusOr<RankPlan> got = RankPlanFromRankStep(ShrunkView(3));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(got->world_ranks, ElementsAre(0, 2, 3));
  // A view that does not say is of the whole world.
  absl::StatusOr<RankPlan> whole =
      RankPlanFromRankStep(RankViewOf(ShrunkPlan(), 3));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_THAT(whole->world_ranks, IsEmpty());
}

TEST(RankPlanTest, RejectsAWorldWithoutTheRankOrItsTasksRanks) {
  v1::RankStep unsorted = ShrunkView(0);
  unsorted.mutable_world_ranks()->SwapElements(0, 1);
  EXPECT_THAT(RankPlanFromRankStep(unsorted).status().message(),
              HasSubstr("world_ranks [2,0,3] are not non-negative"));
  v1::RankStep outside = ShrunkView(0);
  outside.set_rank(1);
  EXPECT_THAT(RankPlanFromRankStep(outside).status().message(),
              HasSubstr("the rank is not in the epoch's world [0,2,3]"));
  v1::RankStep task_outside = ShrunkView(0);
  task_outside.mutable_tasks(0)->set_ranks(1, 1);
  ExpectRejected(RankPlanFromRankStep(task_outside), 0, 0,
                 "rank 1 is not in the epoch's world [0,2,3]");
}

TEST(RankPlanTest, RejectsNonPositiveLengthsAndBadRecompute) {
  v1::StepPlan plan = ThreeTaskPlan();
  plan.mutable_tasks(1)->set_lengths(0, 0);
  ExpectRejected(RankPlanFromStep(plan, 2), 2, 1, "sample 12 has length 0");
  plan = ThreeTaskPlan();
  plan.mutable_tasks(1)->set_recompute(1.5);
  ExpectRejected(RankPlanFromStep(plan, 2), 2, 1, "recompute 1.5");
}

}  // namespace
}  // namespace dcp
