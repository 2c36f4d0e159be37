#include "scheduler/control/profile_stage.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);

ProfileStageOptions Options(int world) {
  ProfileStageOptions o;
  o.enabled = true;
  o.timeout = absl::Seconds(60);
  o.session_id = "sess";
  o.world_size = world;
  o.gpus_per_node = 8;
  o.heads = 32;
  return o;
}

TEST(ProfileStageTest, TheRequestCoversEveryGroupSizeThatDividesBoth) {
  ProfileStageOptions o = Options(12);
  o.heads = 12;  // p <= 8 dividing 12 (world) and 12 (heads): 1 2 3 4 6
  o.lengths = {128, 512};
  o.recompute = {0.5};
  o.repetitions = 3;
  const v1::ProfileRequest request = ProfileStage::MakeRequest(o);
  EXPECT_EQ(request.epoch(), 0);
  EXPECT_EQ(
      std::vector<int64_t>(request.lengths().begin(), request.lengths().end()),
      (std::vector<int64_t>{128, 512}));
  EXPECT_EQ(request.recompute_size(), 1);
  EXPECT_EQ(request.repetitions(), 3);
  const std::vector<int> sizes = {1, 2, 3, 4, 6};
  EXPECT_EQ(std::vector<int>(request.group_sizes().begin(),
                             request.group_sizes().end()),
            sizes);
  // The aligned blocks [k*p, (k+1)*p) of every p > 1, numbered from 1.
  int i = 0;
  for (int p : sizes) {
    if (p == 1) continue;
    for (int first = 0; first < 12; first += p, ++i) {
      ASSERT_LT(i, request.groups_size());
      const v1::CommGroup& group = request.groups(i);
      EXPECT_EQ(group.id(), i + 1);
      std::string ranks;
      for (int r = first; r < first + p; ++r) {
        ASSERT_EQ(group.ranks(r - first), r);
        absl::StrAppend(&ranks, r == first ? "" : "-", r);
      }
      EXPECT_EQ(group.rendezvous_prefix(),
                absl::StrCat("sess/e0/profile/g", ranks));
    }
  }
  EXPECT_EQ(request.groups_size(), i);
}

TEST(ProfileStageTest, TheRequestStaysWithinANode) {
  ProfileStageOptions o = Options(32);
  o.gpus_per_node = 4;
  const v1::ProfileRequest request = ProfileStage::MakeRequest(o);
  EXPECT_EQ(std::vector<int>(request.group_sizes().begin(),
                             request.group_sizes().end()),
            (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(request.groups_size(), 32 / 2 + 32 / 4);
  // The message streams send is the same request.
  ProfileStage stage(o);
  EXPECT_EQ(stage.request()->profile().SerializeAsString(),
            request.SerializeAsString());
}

TEST(ProfileStageTest, EndsWhenEveryRankAnsweredOnce) {
  ProfileStage stage(Options(3));
  EXPECT_TRUE(stage.pending());
  stage.OnRegistration(kStart);
  EXPECT_TRUE(stage.ShouldAsk(1));
  EXPECT_FALSE(stage.Answer(1));
  EXPECT_FALSE(stage.ShouldAsk(1));
  EXPECT_FALSE(stage.Answer(1));  // again: not a second answer
  EXPECT_FALSE(stage.Answer(0));
  EXPECT_FALSE(stage.BeginEnd(kStart).has_value());
  EXPECT_TRUE(stage.Answer(2));  // the last one
  std::optional<bool> timed_out = stage.BeginEnd(kStart);
  ASSERT_TRUE(timed_out.has_value());
  EXPECT_FALSE(*timed_out);
  EXPECT_FALSE(stage.BeginEnd(kStart).has_value());  // one caller ends it
  // Ending: planning still waits, no rank is asked.
  EXPECT_TRUE(stage.pending());
  const ProfileDoneEvent done = stage.Outcome(false, 27);
  EXPECT_EQ(done.answered, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(done.missing.empty());
  EXPECT_EQ(done.observations, 27);
  stage.End();
  EXPECT_FALSE(stage.pending());
  EXPECT_FALSE(stage.Answer(0));
}

TEST(ProfileStageTest, TimesOutAfterTheFirstRegistration) {
  ProfileStage stage(Options(4));
  // No deadline before anyone registers, however late it is.
  EXPECT_FALSE(stage.BeginEnd(kStart + absl::Hours(1)).has_value());
  stage.OnRegistration(kStart);
  stage.OnRegistration(kStart + absl::Seconds(30));  // not a new deadline
  stage.Answer(2);
  EXPECT_FALSE(stage.BeginEnd(kStart + absl::Seconds(59)).has_value());
  std::optional<bool> timed_out = stage.BeginEnd(kStart + absl::Seconds(60));
  ASSERT_TRUE(timed_out.has_value());
  EXPECT_TRUE(*timed_out);
  // An answer while the stage ends does not count.
  EXPECT_FALSE(stage.Answer(0));
  const ProfileDoneEvent done = stage.Outcome(true, 0);
  EXPECT_TRUE(done.timed_out);
  EXPECT_EQ(done.answered, (std::vector<int>{2}));
  EXPECT_EQ(done.missing, (std::vector<int>{0, 1, 3}));
}

TEST(ProfileStageTest, WithoutAStageNothingIsPending) {
  ProfileStageOptions o = Options(2);
  o.enabled = false;
  ProfileStage stage(o);
  stage.OnRegistration(kStart);
  EXPECT_FALSE(stage.pending());
  EXPECT_FALSE(stage.ShouldAsk(0));
  EXPECT_FALSE(stage.Answer(0));
  EXPECT_FALSE(stage.Answer(1));
  EXPECT_FALSE(stage.BeginEnd(kStart + absl::Hours(1)).has_value());
}

}  // namespace
}  // namespace dcp
