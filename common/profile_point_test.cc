#include "common/profile_point.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/scheduler_service.pb.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kCapAtNoRecompute = 1000;
constexpr int64_t kCapAtFullRecompute = 3000;
constexpr int64_t kAllGroupsUpTo = 2048;

/// Groups of 1, 2 and 4; two ratios, each with its cap; long lengths only
/// on the largest group.
v1::ProfileRequest Request() {
  v1::ProfileRequest request;
  for (int p : {1, 4, 2}) request.add_group_sizes(p);
  request.add_recompute(0.0);
  request.add_recompute(1.0);
  request.add_max_tokens_per_gpu(kCapAtNoRecompute);
  request.add_max_tokens_per_gpu(kCapAtFullRecompute);
  request.set_all_groups_up_to_length(kAllGroupsUpTo);
  return request;
}

TEST(ProfilePointTest, APointFitsUpToItsRatiosCapTimesTheGroupSize) {
  const v1::ProfileRequest request = Request();
  for (int p : {1, 2, 4}) {
    EXPECT_TRUE(ProfilePointFits(request, kCapAtNoRecompute * p, p, 0)) << p;
    EXPECT_FALSE(ProfilePointFits(request, kCapAtNoRecompute * p + 1, p, 0))
        << p;
    EXPECT_TRUE(ProfilePointFits(request, kCapAtFullRecompute * p, p, 1)) << p;
    EXPECT_FALSE(ProfilePointFits(request, kCapAtFullRecompute * p + 1, p, 1))
        << p;
  }
}

TEST(ProfilePointTest, WithoutACapForEachRatioEveryPointFits) {
  v1::ProfileRequest request = Request();
  request.clear_max_tokens_per_gpu();
  request.add_max_tokens_per_gpu(1);  // one cap for two ratios: no caps
  EXPECT_TRUE(ProfilePointFits(request, int64_t{1} << 40, 1, 0));
  EXPECT_TRUE(ProfilePointFits(request, int64_t{1} << 40, 1, 1));
}

TEST(ProfilePointTest, LongLengthsAreMeasuredOnlyOnTheLargestGroup) {
  const v1::ProfileRequest request = Request();  // sizes 1, 4, 2
  const int64_t long_length = kAllGroupsUpTo + 1;
  for (int shape = 0; shape < 3; ++shape) {
    const int p = request.group_sizes(shape);
    // Full recompute: every group of the request holds both lengths.
    ASSERT_TRUE(ProfilePointFits(request, long_length, p, 1)) << p;
    EXPECT_TRUE(ProfilePointMeasured(request, kAllGroupsUpTo, shape, 1)) << p;
    EXPECT_EQ(ProfilePointMeasured(request, long_length, shape, 1), p == 4)
        << p;
  }
  // Not on the largest group either when it does not fit there.
  EXPECT_FALSE(
      ProfilePointMeasured(request, kCapAtNoRecompute * 4 + 1, 1, 0));
  v1::ProfileRequest every = request;
  every.set_all_groups_up_to_length(0);
  EXPECT_TRUE(ProfilePointMeasured(every, long_length, 0, 1));
}

TEST(ProfilePointTest, LongLengthsTakeTheLargestSizesFirstShapeOnly) {
  v1::ProfileRequest request = Request();  // sizes 1, 4, 2, then 4 again
  request.add_group_sizes(4);
  for (int u : {1, 4, 2, 2}) request.add_ulysses(u);
  const int64_t long_length = kAllGroupsUpTo + 1;
  EXPECT_TRUE(ProfilePointMeasured(request, long_length, 1, 1));
  EXPECT_FALSE(ProfilePointMeasured(request, long_length, 3, 1));
  EXPECT_TRUE(ProfilePointMeasured(request, kAllGroupsUpTo, 3, 1));
}

TEST(ProfilePointTest, ShapesArePlainUlyssesWithoutDegrees) {
  const absl::StatusOr<std::vector<ProfileShape>> shapes =
      ProfileShapes(Request(), /*heads=*/4);
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  ASSERT_EQ(shapes->size(), 3u);
  for (const ProfileShape& shape : *shapes) EXPECT_EQ(shape.u, shape.p);
}

TEST(ProfilePointTest, ShapesTakeOneDegreeEachSize) {
  v1::ProfileRequest request = Request();  // sizes 1, 4, 2
  for (int u : {1, 2, 1}) request.add_ulysses(u);
  const absl::StatusOr<std::vector<ProfileShape>> shapes =
      ProfileShapes(request, /*heads=*/2);
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  ASSERT_EQ(shapes->size(), 3u);
  EXPECT_EQ((*shapes)[1].p, 4);
  EXPECT_EQ((*shapes)[1].u, 2);
  EXPECT_EQ((*shapes)[2].p, 2);
  EXPECT_EQ((*shapes)[2].u, 1);
}

TEST(ProfilePointTest, BadShapesAreNamed) {
  const auto message = [](const v1::ProfileRequest& request, int heads) {
    return std::string(ProfileShapes(request, heads).status().message());
  };
  v1::ProfileRequest one_short = Request();
  one_short.add_ulysses(1);
  EXPECT_THAT(message(one_short, 4),
              HasSubstr("1 Ulysses degrees for 3 group sizes"));
  v1::ProfileRequest not_dividing = Request();
  for (int u : {1, 3, 2}) not_dividing.add_ulysses(u);
  EXPECT_THAT(message(not_dividing, 12),
              AllOf(HasSubstr("shape 1 (group size 4, Ulysses degree 3)"),
                    HasSubstr("does not divide the group size")));
  v1::ProfileRequest too_many_heads = Request();
  for (int u : {1, 4, 2}) too_many_heads.add_ulysses(u);
  EXPECT_THAT(message(too_many_heads, 2),
              HasSubstr("does not divide the 2 heads"));
  v1::ProfileRequest zero = Request();
  zero.set_group_sizes(0, 0);
  EXPECT_THAT(message(zero, 4), HasSubstr("not positive"));
}

}  // namespace
}  // namespace dcp
