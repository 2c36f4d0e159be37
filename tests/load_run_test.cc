#include "tests/load_run.h"

#include <vector>

#include "gtest/gtest.h"

namespace dcp::load {
namespace {

TEST(SlopeTest, FitsALineExactly) {
  // y = 3 x - 7 at uneven x.
  const std::vector<double> x = {0, 1.5, 4, 10};
  std::vector<double> y;
  for (double v : x) y.push_back(3 * v - 7);
  EXPECT_DOUBLE_EQ(Slope(x, y), 3);
}

TEST(SlopeTest, IsTheLeastSquaresSlopeOfNoisyPoints) {
  // Residuals +1, -1, -1, +1 around y = 2 x cancel in the fit.
  const std::vector<double> x = {0, 1, 2, 3};
  const std::vector<double> y = {1, 1, 3, 7};
  EXPECT_DOUBLE_EQ(Slope(x, y), 2);
}

TEST(SlopeTest, NeedsTwoDistinctPoints) {
  EXPECT_EQ(Slope({}, {}), 0);
  EXPECT_EQ(Slope({5}, {9}), 0);
  EXPECT_EQ(Slope({2, 2}, {1, 8}), 0);
}

}  // namespace
}  // namespace dcp::load
