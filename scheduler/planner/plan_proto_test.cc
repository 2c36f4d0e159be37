#include "scheduler/planner/plan_proto.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/arena.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Sample lengths 0..5; the window truncates sample 5 (9000 tokens) to 8192.
const std::vector<int32_t> kLengths = {100, 200, 300, 4096, 50, 9000};

class PlanProtoTest : public ::testing::Test {
 protected:
  LengthView lengths() const { return LengthView(kLengths, 8192); }

  // Four ranks, one step: [0,1] runs sample 5 split, rank 2 packs 0 and 1,
  // [0,1] again on sample 3, rank 1 alone on 4, [2,3] on sample 2 as a
  // ring of two (Ulysses degree 1).
  static StepPlan Plan() {
    StepPlan plan;
    plan.step = 7;
    plan.samples = {0, 1, 2, 3, 4, 5};
    plan.predicted_makespan_s = 2.5;
    plan.tasks = {
        {{0, 1}, {5}, {}, 0.5}, {{2}, {0, 1}, {}, 0.0},  {{0, 1}, {3}, {}, 1.0},
        {{1}, {4}, {}, 0.0},    {{2, 3}, {2}, {}, 0.25},
    };
    const double total = 8192 + 100 + 200 + 4096 + 50 + 300;
    plan.tasks[0].loss_weights = {8192 / total};
    plan.tasks[1].loss_weights = {100 / total, 200 / total};
    plan.tasks[2].loss_weights = {4096 / total};
    plan.tasks[3].loss_weights = {50 / total};
    plan.tasks[4].loss_weights = {300 / total};
    plan.tasks[4].ulysses = 1;
    return plan;
  }

  v1::StepPlan Wire() const { return ToProto(Plan(), lengths(), /*epoch=*/2); }
};

TEST_F(PlanProtoTest, ToProtoFillsLengthsTokensIndicesAndGroups) {
  const v1::StepPlan wire = Wire();
  EXPECT_EQ(wire.epoch(), 2);
  EXPECT_EQ(wire.step(), 7);
  EXPECT_THAT(wire.samples(), ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_EQ(wire.total_tokens(), 8192 + 100 + 200 + 4096 + 50 + 300);
  EXPECT_DOUBLE_EQ(wire.predicted_makespan_s(), 2.5);
  ASSERT_EQ(wire.tasks_size(), 5);

  EXPECT_THAT(wire.tasks(0).lengths(), ElementsAre(8192));  // truncated
  EXPECT_THAT(wire.tasks(1).lengths(), ElementsAre(100, 200));
  EXPECT_DOUBLE_EQ(wire.tasks(2).recompute(), 1.0);
  for (int i = 0; i < wire.tasks_size(); ++i) {
    EXPECT_EQ(wire.tasks(i).task_index(), i);
  }

  // Micro-step index = position among the tasks naming the rank.
  EXPECT_THAT(wire.tasks(0).micro_steps(), ElementsAre(0, 0));
  EXPECT_THAT(wire.tasks(1).micro_steps(), ElementsAre(0));
  EXPECT_THAT(wire.tasks(2).micro_steps(), ElementsAre(1, 1));
  EXPECT_THAT(wire.tasks(3).micro_steps(), ElementsAre(2));
  EXPECT_THAT(wire.tasks(4).micro_steps(), ElementsAre(1, 0));

  // Groups: distinct multi-rank sets, numbered from 1 by first use.
  ASSERT_EQ(wire.groups_size(), 2);
  EXPECT_EQ(wire.groups(0).id(), 1);
  EXPECT_THAT(wire.groups(0).ranks(), ElementsAre(0, 1));
  EXPECT_EQ(wire.groups(1).id(), 2);
  EXPECT_THAT(wire.groups(1).ranks(), ElementsAre(2, 3));
  EXPECT_EQ(wire.tasks(0).group_id(), 1);
  EXPECT_EQ(wire.tasks(1).group_id(), 0);
  EXPECT_EQ(wire.tasks(2).group_id(), 1);
  EXPECT_EQ(wire.tasks(3).group_id(), 0);
  EXPECT_EQ(wire.tasks(4).group_id(), 2);
}

TEST_F(PlanProtoTest, LossWeightsOfAStepSumToOne) {
  double sum = 0;
  const v1::StepPlan wire = Wire();
  for (const v1::Task& task : wire.tasks()) {
    for (double w : task.loss_weights()) sum += w;
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

TEST_F(PlanProtoTest, RoundTripsThroughBytesAndFromProto) {
  std::string bytes;
  ASSERT_TRUE(Wire().SerializeToString(&bytes));
  v1::StepPlan parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));

  absl::StatusOr<StepPlan> back = FromProto(parsed);
  ASSERT_TRUE(back.ok()) << back.status();
  const StepPlan plan = Plan();
  EXPECT_EQ(back->step, plan.step);
  EXPECT_EQ(back->samples, plan.samples);
  EXPECT_DOUBLE_EQ(back->predicted_makespan_s, plan.predicted_makespan_s);
  ASSERT_EQ(back->tasks.size(), plan.tasks.size());
  for (size_t i = 0; i < plan.tasks.size(); ++i) {
    EXPECT_EQ(back->tasks[i].ranks, plan.tasks[i].ranks) << i;
    EXPECT_EQ(back->tasks[i].samples, plan.tasks[i].samples) << i;
    EXPECT_EQ(back->tasks[i].loss_weights, plan.tasks[i].loss_weights) << i;
    EXPECT_EQ(back->tasks[i].recompute, plan.tasks[i].recompute) << i;
    EXPECT_EQ(back->tasks[i].ulysses, plan.tasks[i].ulysses) << i;
  }
  EXPECT_EQ(parsed.tasks(4).ulysses(), 1);
  // And the wire form is a fixed point.
  EXPECT_EQ(ToProto(*back, lengths(), 2).SerializeAsString(), bytes);
}

TEST_F(PlanProtoTest, PlansWithoutWeightsOrDerivedFieldsAreAccepted) {
  StepPlan plan = Plan();
  for (TaskPlan& task : plan.tasks) task.loss_weights.clear();
  v1::StepPlan wire = ToProto(plan, lengths(), 0);
  for (v1::Task& task : *wire.mutable_tasks()) {
    task.clear_lengths();
    task.clear_micro_steps();
    task.clear_task_index();
  }
  wire.clear_total_tokens();
  absl::StatusOr<StepPlan> back = FromProto(wire);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->tasks[0].loss_weights.empty());
}

TEST_F(PlanProtoTest, EmptyStepIsValid) {
  StepPlan empty;
  empty.step = 3;
  v1::StepPlan wire = ToProto(empty, lengths(), 1);
  EXPECT_EQ(wire.total_tokens(), 0);
  EXPECT_EQ(wire.groups_size(), 0);
  EXPECT_TRUE(FromProto(wire).ok());
  EXPECT_EQ(RankView(wire, 0).tasks_size(), 0);
}

TEST_F(PlanProtoTest, RankViewListsMicroStepsInOrder) {
  const v1::StepPlan wire = Wire();

  const v1::RankStep rank1 = RankView(wire, 1);
  EXPECT_EQ(rank1.epoch(), 2);
  EXPECT_EQ(rank1.step(), 7);
  EXPECT_EQ(rank1.rank(), 1);
  EXPECT_EQ(rank1.total_tokens(), wire.total_tokens());
  ASSERT_EQ(rank1.tasks_size(), 3);
  for (int i = 0; i < rank1.tasks_size(); ++i) {
    const v1::Task& task = rank1.tasks(i);
    const int pos = static_cast<int>(
        std::find(task.ranks().begin(), task.ranks().end(), 1) -
        task.ranks().begin());
    EXPECT_EQ(task.micro_steps(pos), i);
  }
  EXPECT_EQ(rank1.tasks(0).task_index(), 0);
  EXPECT_EQ(rank1.tasks(1).task_index(), 2);
  EXPECT_EQ(rank1.tasks(2).task_index(), 3);
  ASSERT_EQ(rank1.groups_size(), 1);
  EXPECT_EQ(rank1.groups(0).id(), 1);

  const v1::RankStep rank2 = RankView(wire, 2);
  ASSERT_EQ(rank2.tasks_size(), 2);
  EXPECT_THAT(rank2.tasks(0).samples(), ElementsAre(0, 1));
  EXPECT_THAT(rank2.tasks(1).samples(), ElementsAre(2));
  ASSERT_EQ(rank2.groups_size(), 1);
  EXPECT_THAT(rank2.groups(0).ranks(), ElementsAre(2, 3));

  const v1::RankStep idle = RankView(wire, 9);
  EXPECT_EQ(idle.rank(), 9);
  EXPECT_EQ(idle.tasks_size(), 0);
  EXPECT_EQ(idle.groups_size(), 0);
}

TEST_F(PlanProtoTest, RankViewSortsGroupsById) {
  StepPlan plan;
  plan.samples = {0, 1};
  plan.tasks = {{{0, 1}, {0}, {}, 0.0}, {{1, 2}, {1}, {}, 0.0}};
  v1::StepPlan wire = ToProto(plan, lengths(), 0);
  ASSERT_EQ(wire.groups_size(), 2);
  wire.mutable_groups()->SwapElements(0, 1);
  ASSERT_TRUE(FromProto(wire).ok());

  const v1::RankStep view = RankView(wire, 1);
  ASSERT_EQ(view.groups_size(), 2);
  EXPECT_EQ(view.groups(0).id(), 1);
  EXPECT_THAT(view.groups(0).ranks(), ElementsAre(0, 1));
  EXPECT_EQ(view.groups(1).id(), 2);
  EXPECT_THAT(view.groups(1).ranks(), ElementsAre(1, 2));
}

TEST_F(PlanProtoTest, AllRankViewsEqualsRankViewOfEveryRank) {
  StepPlan plan;
  plan.samples = {0, 1, 2};
  plan.tasks = {
      {{0, 1}, {0}, {}, 0.0}, {{1, 2}, {1}, {}, 0.0}, {{1}, {2}, {}, 0.0}};
  v1::StepPlan wire = ToProto(plan, lengths(), 3);
  wire.mutable_groups()->SwapElements(0, 1);  // views must still sort by id
  for (const v1::StepPlan& p : {Wire(), wire}) {
    const std::vector<v1::RankStep> all = AllRankViews(p, 10);
    ASSERT_EQ(all.size(), 10u);
    for (int rank = 0; rank < 10; ++rank) {
      EXPECT_EQ(all[rank].SerializeAsString(),
                RankView(p, rank).SerializeAsString())
          << "rank " << rank;
    }
  }
  EXPECT_TRUE(AllRankViews(wire, 0).empty());
}

TEST_F(PlanProtoTest, FillRankViewsOnAnArenaEqualsRankViewOfEveryRank) {
  const v1::StepPlan wire = Wire();
  google::protobuf::Arena arena;
  std::vector<v1::RankStep*> views;
  for (int rank = 0; rank < 4; ++rank) {
    views.push_back(google::protobuf::Arena::CreateMessage<v1::RankStep>(&arena));
  }
  FillRankViews(wire, views);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(views[rank]->GetArena(), &arena);
    EXPECT_EQ(views[rank]->SerializeAsString(),
              RankView(wire, rank).SerializeAsString())
        << "rank " << rank;
  }
}

// Each case breaks one rule of a valid plan; FromProto must reject it with a
// message that says what is wrong.
struct BadCase {
  std::string name;
  void (*Break)(v1::StepPlan&);
  std::string message;
};

void PrintTo(const BadCase& bad, std::ostream* os) { *os << bad.name; }

class FromProtoRejectsTest : public PlanProtoTest,
                             public ::testing::WithParamInterface<BadCase> {};

TEST_P(FromProtoRejectsTest, Rejects) {
  v1::StepPlan wire = Wire();
  ASSERT_TRUE(FromProto(wire).ok());
  GetParam().Break(wire);
  absl::StatusOr<StepPlan> back = FromProto(wire);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(back.status().message(), HasSubstr(GetParam().message));
  EXPECT_THAT(back.status().message(),
              HasSubstr(absl::StrCat("step ", wire.step(), " (epoch ",
                                     wire.epoch(), ")")));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FromProtoRejectsTest,
    ::testing::Values(
        BadCase{"NegativeStep", [](v1::StepPlan& p) { p.set_step(-1); },
                "must be >= 0"},
        BadCase{"NanMakespan",
                [](v1::StepPlan& p) { p.set_predicted_makespan_s(NAN); },
                "predicted_makespan_s"},
        BadCase{"DuplicateStepSample",
                [](v1::StepPlan& p) { p.add_samples(0); }, "listed twice"},
        BadCase{"SampleInNoTask", [](v1::StepPlan& p) { p.add_samples(42); },
                "sample 42 is in no task"},
        BadCase{"SampleOutsideStep",
                [](v1::StepPlan& p) { p.mutable_tasks(3)->set_samples(0, 42); },
                "task 3: sample 42 is not a sample of the step"},
        BadCase{"SampleInTwoTasks",
                [](v1::StepPlan& p) { p.mutable_tasks(3)->set_samples(0, 5); },
                "task 3: sample 5 is already in an earlier task"},
        BadCase{"NoRanks",
                [](v1::StepPlan& p) { p.mutable_tasks(1)->clear_ranks(); },
                "task 1: no ranks"},
        BadCase{"UnsortedRanks",
                [](v1::StepPlan& p) {
                  p.mutable_tasks(0)->set_ranks(0, 1);
                  p.mutable_tasks(0)->set_ranks(1, 0);
                },
                "strictly ascending"},
        BadCase{"RecomputeAboveOne",
                [](v1::StepPlan& p) { p.mutable_tasks(2)->set_recompute(1.5); },
                "outside [0, 1]"},
        BadCase{"UlyssesNotDividingTheGroup",
                [](v1::StepPlan& p) { p.mutable_tasks(4)->set_ulysses(3); },
                "task 4: Ulysses degree 3 must be 0 (the whole group) or "
                "divide the group of 2"},
        BadCase{"NegativeUlysses",
                [](v1::StepPlan& p) { p.mutable_tasks(0)->set_ulysses(-2); },
                "task 0: Ulysses degree -2"},
        BadCase{"TooFewWeights",
                [](v1::StepPlan& p) {
                  p.mutable_tasks(1)->mutable_loss_weights()->RemoveLast();
                },
                "1 loss_weights for 2 samples"},
        BadCase{
            "WeightsOnSomeTasksOnly",
            [](v1::StepPlan& p) { p.mutable_tasks(4)->clear_loss_weights(); },
            "every task of a step or on none"},
        BadCase{"NegativeWeight",
                [](v1::StepPlan& p) {
                  p.mutable_tasks(0)->set_loss_weights(0, -0.5);
                },
                "loss weight"},
        BadCase{"TooFewLengths",
                [](v1::StepPlan& p) {
                  p.mutable_tasks(1)->mutable_lengths()->RemoveLast();
                },
                "1 lengths for 2 samples"},
        BadCase{"WrongTotalTokens",
                [](v1::StepPlan& p) { p.set_total_tokens(1); },
                "total_tokens is 1"},
        BadCase{"WrongTaskIndex",
                [](v1::StepPlan& p) { p.mutable_tasks(2)->set_task_index(4); },
                "task 2: task_index is 4"},
        BadCase{
            "WrongMicroStep",
            [](v1::StepPlan& p) { p.mutable_tasks(2)->set_micro_steps(1, 0); },
            "micro-step on rank 1 is 0"},
        BadCase{"MissingGroup",
                [](v1::StepPlan& p) { p.mutable_tasks(4)->set_group_id(7); },
                "group_id 7 names no group"},
        BadCase{"SingleRankTaskWithGroup",
                [](v1::StepPlan& p) { p.mutable_tasks(1)->set_group_id(1); },
                "single-rank task"},
        BadCase{"TaskRanksDifferFromGroup",
                [](v1::StepPlan& p) { p.mutable_tasks(4)->set_group_id(1); },
                "differ from those of group 1"},
        BadCase{"GroupIdZero",
                [](v1::StepPlan& p) { p.mutable_groups(1)->set_id(0); },
                "group ids start at 1"},
        BadCase{"DuplicateGroupId",
                [](v1::StepPlan& p) { p.mutable_groups(1)->set_id(1); },
                "group id used twice"},
        BadCase{"DuplicateGroupRanks",
                [](v1::StepPlan& p) {
                  v1::CommGroup* g = p.add_groups();
                  g->set_id(3);
                  g->add_ranks(0);
                  g->add_ranks(1);
                },
                "same ranks as group 1"},
        BadCase{"SingletonGroup",
                [](v1::StepPlan& p) {
                  v1::CommGroup* g = p.add_groups();
                  g->set_id(3);
                  g->add_ranks(2);
                },
                "at least two ranks"},
        BadCase{"UnusedGroup",
                [](v1::StepPlan& p) {
                  v1::CommGroup* g = p.add_groups();
                  g->set_id(3);
                  g->add_ranks(1);
                  g->add_ranks(2);
                },
                "group 3 is used by no task"}),
    [](const ::testing::TestParamInfo<BadCase>& info) {
      return info.param.name;
    });

}  // namespace
}  // namespace dcp
