#include "scheduler/control/refit_driver.h"

#include <vector>

#include "common/model_spec.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

constexpr double kPriorWeight = 2.0;

CostModel Prior() {
  return CostModel::FromSpecs(ClusterSpec::H200(), *BuiltinModel("llama3-8b"),
                              4);
}

/// Four observations taking 1.5 times what the prior predicts.
std::vector<TaskObservation> Slower() {
  const CostModel prior = Prior();
  std::vector<TaskObservation> out;
  for (int i = 0; i < 4; ++i) {
    TaskObservation& o = out.emplace_back();
    o.group_size = 1 << (i % 3);
    o.lengths = {2048 * (i + 1), 512};
    o.seconds = 1.5 * prior.TaskSeconds(o.group_size, o.intra_node, o.lengths,
                                        o.recompute);
  }
  return out;
}

class RefitDriverTest : public ::testing::Test {
 protected:
  RefitDriverTest()
      : ledger_(LedgerOptions()),
        driver_(Prior(), kPriorWeight, &ledger_,
                [this](const RefitEvent& e) { events_.push_back(e); }) {}

  static ReportLedgerOptions LedgerOptions() {
    ReportLedgerOptions o{Prior()};
    o.observation_window = 4;
    o.refit_every = 4;
    return o;
  }

  double Coefficient(const char* name) {
    v1::StatusResponse status;
    ledger_.FillStatus(&status);
    return status.coefficients().at(name);
  }

  ReportLedger ledger_;
  RefitDriver driver_;
  std::vector<RefitEvent> events_;
};

TEST_F(RefitDriverTest, RunsTheDueRefitFromThePriorTasksThenSync) {
  EXPECT_FALSE(driver_.RunDue());  // nothing due
  EXPECT_TRUE(events_.empty());
  // One completed step whose sync took 0.3 s beyond its 2 s of tasks.
  ledger_.AddCompletedStep({2.0, 2.3, 2.0, /*sync_reported=*/true});
  ASSERT_TRUE(ledger_.AddObservations(Slower(), 1));
  EXPECT_TRUE(driver_.RunDue());

  // What the refit must be, from the prior, by the cost model's own fits.
  absl::StatusOr<CostModel> tasks = Prior().Fit(Slower(), kPriorWeight);
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  absl::StatusOr<CostModel> expected = tasks->FitSync({0.3}, kPriorWeight);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_DOUBLE_EQ(Coefficient("lin"), expected->coefficients().lin);
  EXPECT_DOUBLE_EQ(Coefficient("grad_sync"),
                   expected->coefficients().grad_sync);
  EXPECT_GT(Coefficient("lin"), Prior().coefficients().lin);

  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].refits, 1);
  EXPECT_EQ(events_[0].observations, 4);
  EXPECT_NEAR(events_[0].error_before, 0.5 / 1.5, 1e-12);
  EXPECT_DOUBLE_EQ(events_[0].error_after,
                   expected->MeanRelativeError(Slower()));
  EXPECT_LT(events_[0].error_after, events_[0].error_before);
  EXPECT_FALSE(driver_.RunDue());  // taken
  EXPECT_EQ(events_.size(), 1u);
}

TEST_F(RefitDriverTest, EveryRefitStartsFromThePrior) {
  ASSERT_TRUE(ledger_.AddObservations(Slower(), 0));
  ASSERT_TRUE(driver_.RunDue());
  const double first = Coefficient("lin");
  // The same window again (the old one leaves it): a refit from the current
  // model would move further; one from the prior lands in the same place.
  ASSERT_TRUE(ledger_.AddObservations(Slower(), 1));
  ASSERT_TRUE(driver_.RunDue());
  ASSERT_EQ(events_.size(), 2u);
  EXPECT_DOUBLE_EQ(Coefficient("lin"), first);
  EXPECT_LT(events_[1].error_before, events_[0].error_before);
}

TEST_F(RefitDriverTest, RunNowRefitsWhatIsHeldDueOrNot) {
  EXPECT_FALSE(driver_.RunNow());  // no observations
  std::vector<TaskObservation> two = Slower();
  two.resize(2);
  ASSERT_FALSE(ledger_.AddObservations(two, 0));  // 2 < refit_every
  EXPECT_TRUE(driver_.RunNow());
  ASSERT_EQ(events_.size(), 1u);
  EXPECT_EQ(events_[0].observations, 2);
  EXPECT_FALSE(driver_.RunDue());
}

}  // namespace
}  // namespace dcp
