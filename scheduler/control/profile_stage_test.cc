#include "scheduler/control/profile_stage.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/model_spec.h"
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

std::vector<int> Sizes(const v1::ProfileRequest& request) {
  return {request.group_sizes().begin(), request.group_sizes().end()};
}

std::vector<int> Degrees(const v1::ProfileRequest& request) {
  return {request.ulysses().begin(), request.ulysses().end()};
}

TEST(ProfileStageTest, TheRequestCoversEveryGroupSizeThatDividesTheWorld) {
  ProfileStageOptions o = Options(12);
  o.heads = 12;  // p <= 8 dividing 12 (world): 1 2 3 4 6, each dividing heads
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
  // Each p > 1 twice: plain Ulysses, and its shortest ring.
  EXPECT_EQ(Sizes(request), (std::vector<int>{1, 2, 2, 3, 3, 4, 4, 6, 6}));
  EXPECT_EQ(Degrees(request), (std::vector<int>{1, 2, 1, 3, 1, 4, 2, 6, 3}));
  const std::vector<int> sizes = {1, 2, 3, 4, 6};
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

TEST(ProfileStageTest, TheDefaultLengthsReachTheWindow) {
  EXPECT_EQ(DefaultProfileLengths(32768),
            (std::vector<int64_t>{256, 1024, 4096, 16384, 32768}));
  EXPECT_EQ(DefaultProfileLengths(4096),
            (std::vector<int64_t>{256, 1024, 4096}));
  EXPECT_EQ(DefaultProfileLengths(100), (std::vector<int64_t>{256}));
}

TEST(ProfileStageTest, TheDefaultGridAsksOnlyForPointsThatFit) {
  const ModelSpec model = *BuiltinModel("llama3-70b");
  const CostModel cost = CostModel::FromSpecs(ClusterSpec::H200(), model, 64);
  ProfileStageOptions o = Options(64);
  o.heads = model.heads;
  o.lengths.clear();
  CompleteProfileGrid(cost, 524288, o);
  EXPECT_EQ(o.lengths, DefaultProfileLengths(524288));
  // One cap per ratio of the grid (0 and 1), what the model says fits.
  ASSERT_EQ(o.max_tokens_per_gpu.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(o.max_tokens_per_gpu[i],
              static_cast<int64_t>(
                  std::floor(cost.MaxTokensPerGpu(o.recompute[i]))));
  }
  const v1::ProfileRequest request = ProfileStage::MakeRequest(o);
  ASSERT_EQ(request.max_tokens_per_gpu_size(), 2);
  for (int i = 0; i < 2; ++i) {
    const int64_t cap = o.max_tokens_per_gpu[i];
    EXPECT_EQ(request.max_tokens_per_gpu(i), cap);
    EXPECT_TRUE(ProfilePointFits(request, cap, 1, i));
    EXPECT_FALSE(ProfilePointFits(request, cap + 1, 1, i));
    EXPECT_TRUE(ProfilePointFits(request, 8 * cap, 8, i));
    EXPECT_FALSE(ProfilePointFits(request, 8 * cap + 1, 8, i));
  }
  // Recompute frees memory: r = 1 holds more.
  EXPECT_GT(o.max_tokens_per_gpu[1], o.max_tokens_per_gpu[0]);
  // Given lengths stay; without caps every point is asked for.
  o.lengths = {128};
  CompleteProfileGrid(cost, 524288, o);
  EXPECT_EQ(o.lengths, std::vector<int64_t>{128});
  v1::ProfileRequest uncapped = request;
  uncapped.clear_max_tokens_per_gpu();
  EXPECT_TRUE(ProfilePointFits(uncapped, int64_t{1} << 40, 1, 0));
}

// Up to kProfileAllGroupsUpToLength every shape that holds a length
// measures it; longer lengths only the largest group size, as plain Ulysses.
TEST(ProfileStageTest, LongLengthsAreMeasuredOnlyOnTheLargestGroup) {
  const ModelSpec model = *BuiltinModel("llama3-8b");
  const CostModel cost = CostModel::FromSpecs(ClusterSpec::H200(), model, 16);
  ProfileStageOptions o = Options(16);
  o.heads = model.heads;
  o.lengths.clear();
  CompleteProfileGrid(cost, 524288, o);
  EXPECT_EQ(o.all_groups_up_to_length, kProfileAllGroupsUpToLength);
  const v1::ProfileRequest request = ProfileStage::MakeRequest(o);
  EXPECT_EQ(request.all_groups_up_to_length(), kProfileAllGroupsUpToLength);
  const int largest = *std::max_element(request.group_sizes().begin(),
                                        request.group_sizes().end());
  ASSERT_EQ(largest, 16);  // two nodes of 8
  const int64_t short_length = kProfileAllGroupsUpToLength;
  const int64_t long_length = 4 * kProfileAllGroupsUpToLength;
  int long_shapes = 0;
  for (int shape = 0; shape < request.group_sizes_size(); ++shape) {
    const int p = request.group_sizes(shape);
    ASSERT_TRUE(ProfilePointFits(request, long_length, p, 1)) << p;
    EXPECT_TRUE(ProfilePointMeasured(request, short_length, shape, 1)) << p;
    if (ProfilePointMeasured(request, long_length, shape, 1)) {
      ++long_shapes;
      EXPECT_EQ(p, largest);
      EXPECT_EQ(request.ulysses(shape), largest);
    }
  }
  EXPECT_EQ(long_shapes, 1);
  const int first_largest = static_cast<int>(
      std::find(request.group_sizes().begin(), request.group_sizes().end(),
                largest) -
      request.group_sizes().begin());
  // A point that does not fit is not measured on any group.
  const int64_t too_long = largest * o.max_tokens_per_gpu[0] + 1;
  EXPECT_FALSE(ProfilePointMeasured(request, too_long, first_largest, 0));
  // Without the field every fitting point is measured.
  v1::ProfileRequest every = request;
  every.set_all_groups_up_to_length(0);
  EXPECT_TRUE(ProfilePointMeasured(every, long_length, 1, 1));
}

TEST(ProfileStageTest, FewHeadsAreProfiledInsideRings) {
  ProfileStageOptions o = Options(16);
  o.gpus_per_node = 4;
  o.heads = 2;  // groups of 4 and 8 hold 2-way Ulysses inside a ring
  const v1::ProfileRequest request = ProfileStage::MakeRequest(o);
  EXPECT_EQ(Sizes(request), (std::vector<int>{1, 2, 2, 4, 8}));
  EXPECT_EQ(Degrees(request), (std::vector<int>{1, 2, 1, 2, 2}));
  EXPECT_EQ(request.groups_size(), 16 / 2 + 16 / 4 + 16 / 8);
  const absl::StatusOr<std::vector<ProfileShape>> shapes =
      ProfileShapes(request, o.heads);
  EXPECT_TRUE(shapes.ok()) << shapes.status();
}

TEST(ProfileStageTest, TheRequestSpansTwoNodesAtMost) {
  ProfileStageOptions o = Options(32);
  o.gpus_per_node = 4;
  const v1::ProfileRequest request = ProfileStage::MakeRequest(o);
  // Up to a node of 4, and groups of two nodes: 8.
  EXPECT_EQ(Sizes(request), (std::vector<int>{1, 2, 2, 4, 4, 8, 8}));
  EXPECT_EQ(Degrees(request), (std::vector<int>{1, 2, 1, 4, 2, 8, 4}));
  EXPECT_EQ(request.groups_size(), 32 / 2 + 32 / 4 + 32 / 8);
  // No group of two nodes where the world is one node, or does not divide.
  ProfileStageOptions small = o;
  small.world_size = 4;
  EXPECT_EQ(Sizes(ProfileStage::MakeRequest(small)),
            (std::vector<int>{1, 2, 2, 4, 4}));
  small.world_size = 12;
  EXPECT_EQ(Sizes(ProfileStage::MakeRequest(small)),
            (std::vector<int>{1, 2, 2, 3, 4, 4}));  // 3 a ring of 3
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
