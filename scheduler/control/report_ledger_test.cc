#include "scheduler/control/report_ledger.h"

#include <cmath>
#include <vector>

#include "common/model_spec.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

CostModel Prior() {
  return CostModel::FromSpecs(ClusterSpec::H200(), *BuiltinModel("llama3-8b"),
                              4);
}

/// Observations that take `slowdown` times what `Prior()` predicts, so each
/// one's relative error under it is |1 - slowdown| / slowdown.
std::vector<TaskObservation> Observed(double slowdown, int n = 4) {
  const CostModel prior = Prior();
  std::vector<TaskObservation> out;
  for (int i = 0; i < n; ++i) {
    TaskObservation& o = out.emplace_back();
    o.group_size = 1 << (i % 3);
    o.intra_node = true;
    o.lengths = {1024 * (i + 1), 256};
    o.seconds = slowdown * prior.TaskSeconds(o.group_size, o.intra_node,
                                             o.lengths, o.recompute);
  }
  return out;
}

ReportLedgerOptions Options() {
  ReportLedgerOptions o{Prior()};
  o.observation_window = 8;
  o.refit_every = 4;
  o.step_error_window = 2;
  o.sync_window = 2;
  o.refit_error = 0;  // the cadence alone (see ...AFarOffModelRefitsEveryStep)
  return o;
}

v1::StatusResponse StatusOf(const ReportLedger& ledger) {
  v1::StatusResponse status;
  ledger.FillStatus(&status);
  return status;
}

TEST(ReportLedgerTest, TheModelErrorIsTheMeanOverTheWindow) {
  ReportLedgerOptions o = Options();
  o.observation_window = 3;
  ReportLedger ledger(o);
  EXPECT_EQ(ledger.ModelError(), 0);  // none yet
  ledger.AddObservations(Observed(1.5, 2), 0);
  EXPECT_NEAR(ledger.ModelError(), 1.0 / 3, 1e-12);
  // Two exact ones: the window keeps the last three, errors {1/3, 0, 0}.
  ledger.AddObservations(Observed(1.0, 2), 0);
  EXPECT_EQ(ledger.observations(), 3);
  EXPECT_NEAR(ledger.ModelError(), 1.0 / 9, 1e-12);
  EXPECT_NEAR(StatusOf(ledger).model_error(), 1.0 / 9, 1e-12);
}

TEST(ReportLedgerTest, ARefitIsDueEveryRefitEveryAtMostOncePerStep) {
  ReportLedger ledger(Options());  // refit_every = 4
  EXPECT_FALSE(ledger.AddObservations(Observed(1.5, 3), 0));
  EXPECT_FALSE(ledger.TakeDueRefit().has_value());
  // The first refit may come before any step completes.
  EXPECT_TRUE(ledger.AddObservations(Observed(1.5, 1), 0));
  std::optional<RefitInput> input = ledger.TakeDueRefit();
  ASSERT_TRUE(input.has_value());
  EXPECT_EQ(input->observations.size(), 4u);
  EXPECT_EQ(input->version, 0);
  EXPECT_FALSE(ledger.TakeDueRefit().has_value());  // taken once

  // Enough new observations, but no step completed since: not due.
  EXPECT_FALSE(ledger.AddObservations(Observed(1.5, 4), 0));
  // A step completed: due (the 5 new observations count).
  EXPECT_TRUE(ledger.AddObservations(Observed(1.5, 1), 1));
  EXPECT_FALSE(ledger.AddObservations(Observed(1.5, 4), 1));
  // A late report with an older count does not reopen the step.
  EXPECT_FALSE(ledger.AddObservations(Observed(1.5, 4), 0));
  // Two refits due before one is taken are taken as one, of everything.
  EXPECT_TRUE(ledger.AddObservations(Observed(1.5, 4), 3));
  ASSERT_TRUE(ledger.TakeDueRefit().has_value());
  EXPECT_FALSE(ledger.TakeDueRefit().has_value());
  EXPECT_EQ(StatusOf(ledger).refits(), 0);  // the ledger fits nothing
}

TEST(ReportLedgerTest, AFarOffModelRefitsEveryStepHoweverFewItsReports) {
  ReportLedgerOptions o = Options();  // refit_every = 4
  o.refit_error = 0.25;
  ReportLedger ledger(o);
  // Before any step completes (a start-up profile's rows), the cadence.
  EXPECT_FALSE(ledger.AddObservations(Observed(1.5, 1), 0));
  // One observation 1.5x the prior (1/3 off) a step: due at each completed
  // step, not every 4 observations.
  EXPECT_TRUE(ledger.AddObservations(Observed(1.5, 1), 1));
  ASSERT_TRUE(ledger.TakeDueRefit().has_value());
  EXPECT_FALSE(ledger.AddObservations(Observed(1.5, 1), 1));  // same step
  EXPECT_TRUE(ledger.AddObservations(Observed(1.5, 1), 2));
  ASSERT_TRUE(ledger.TakeDueRefit().has_value());
  // 1.2x is 1/6 off, below the threshold: the cadence again (4 new).
  EXPECT_FALSE(ledger.AddObservations(Observed(1.2, 1), 3));
  EXPECT_FALSE(ledger.AddObservations(Observed(1.2, 2), 4));
  EXPECT_TRUE(ledger.AddObservations(Observed(1.2, 1), 5));
  ASSERT_TRUE(ledger.TakeDueRefit().has_value());
  // What counts is the mean since the last due refit: one 1/3 off after
  // two exact ones is 1/9 off.
  EXPECT_FALSE(ledger.AddObservations(Observed(1.0, 2), 6));
  EXPECT_FALSE(ledger.AddObservations(Observed(1.5, 1), 7));
}

TEST(ReportLedgerTest, CompletedStepsFillTheStepAndSyncWindows) {
  ReportLedger ledger(Options());  // both windows hold 2 steps
  const double g = Prior().SyncSeconds();
  // Sync = measured - max busy: 1 s of a 4 s step; step error 2/4.
  ledger.AddCompletedStep({2.0, 4.0, 3.0, /*sync_reported=*/true});
  // No sync measured; step error 1/2.
  ledger.AddCompletedStep({3.0, 2.0, 2.0, /*sync_reported=*/false});
  // Sync 0.5 of a 1 s step; step error 0. The first step leaves the step
  // window, not the sync window (it had only one step before).
  ledger.AddCompletedStep({1.0, 1.0, 0.5, /*sync_reported=*/true});
  const v1::StatusResponse status = StatusOf(ledger);
  EXPECT_NEAR(status.step_error(), (0.5 + 0.0) / 2, 1e-12);
  EXPECT_NEAR(status.sync_error(),
              (std::abs(g - 1.0) / 4.0 + std::abs(g - 0.5) / 1.0) / 2, 1e-12);
  ledger.AddObservations(Observed(1.0, 1), 0);
  std::optional<RefitInput> input = ledger.TakeRefit();
  ASSERT_TRUE(input.has_value());
  EXPECT_EQ(input->syncs, (std::vector<double>{1.0, 0.5}));
  EXPECT_EQ(input->sync_step_seconds, (std::vector<double>{4.0, 1.0}));
  // A step measured at 0 s teaches nothing.
  ledger.AddCompletedStep({1.0, 0.0, 0.0, true});
  EXPECT_NEAR(StatusOf(ledger).step_error(), 0.25, 1e-12);
}

TEST(ReportLedgerTest, InstallKeepsTheFirstModelFittedFromAVersion) {
  ReportLedger ledger(Options());
  ledger.CountTimingReport();
  ledger.AddObservations(Observed(1.5), 0);
  std::optional<RefitInput> first = ledger.TakeRefit();
  std::optional<RefitInput> second = ledger.TakeRefit();
  ASSERT_TRUE(first.has_value() && second.has_value());
  // An input carries the model it would replace.
  EXPECT_EQ(first->model.coefficients().lin, Prior().coefficients().lin);
  absl::StatusOr<CostModel> fitted = Prior().Fit(first->observations);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  const double error_after = fitted->MeanRelativeError(first->observations);

  std::optional<RefitEvent> event =
      ledger.Install(RefitResult{*fitted, error_after, /*kept_current=*/false,
                                 /*kept_current_sync=*/true},
                     *first);
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->refits, 1);
  EXPECT_EQ(event->observations, 4);
  EXPECT_NEAR(event->error_before, 1.0 / 3, 1e-12);
  EXPECT_EQ(event->error_after, error_after);
  EXPECT_FALSE(event->kept_current);
  EXPECT_TRUE(event->kept_current_sync);
  // Errors are now those of the fitted model.
  EXPECT_NEAR(ledger.ModelError(), error_after, 1e-12);
  // The second refit started from the same version: dropped.
  EXPECT_FALSE(ledger.Install(RefitResult{Prior(), 0}, *second).has_value());

  const v1::StatusResponse status = StatusOf(ledger);
  EXPECT_EQ(status.refits(), 1);
  EXPECT_EQ(status.timing_reports(), 1);
  EXPECT_EQ(status.refit_error_after(), error_after);
  EXPECT_EQ(status.coefficients().at("lin"), fitted->coefficients().lin);
  int64_t version = 0;
  std::optional<CostModel> model = ledger.ModelIfNewer(&version);
  ASSERT_TRUE(model.has_value());
  EXPECT_EQ(version, 1);
  EXPECT_EQ(model->coefficients().lin, fitted->coefficients().lin);
  EXPECT_FALSE(ledger.ModelIfNewer(&version).has_value());
  std::optional<RefitInput> next = ledger.TakeRefit();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->version, 1);
  EXPECT_EQ(next->model.coefficients().lin, fitted->coefficients().lin);
}

TEST(ReportLedgerTest, TheUnseenErrorIsEachPredictionBeforeItsFit) {
  ReportLedgerOptions o = Options();
  o.observation_window = 4;
  ReportLedger ledger(o);
  // Four observations 1.5x the prior: each 1/3 off as it arrives.
  ledger.AddObservations(Observed(1.5, 4), 0);
  std::optional<RefitInput> input = ledger.TakeRefit();
  ASSERT_TRUE(input.has_value());
  // A model that predicts them exactly: every time coefficient of the
  // prior's times 1.5 (a task's time is linear in them).
  const CostModel prior = Prior();
  CostModel::Coefficients c = prior.coefficients();
  for (double* t : {&c.lin, &c.attn, &c.fixed, &c.a2a_byte_intra,
                    &c.a2a_fixed_intra, &c.a2a_byte_inter, &c.a2a_fixed_inter,
                    &c.ring_byte_intra, &c.ring_fixed_intra,
                    &c.ring_byte_inter, &c.ring_fixed_inter}) {
    *t *= 1.5;
  }
  const CostModel exact(c, prior.model(), prior.memory_cap(),
                        prior.gpus_per_node());
  const double fitted = exact.MeanRelativeError(input->observations);
  ASSERT_LT(fitted, 1e-9);
  ASSERT_TRUE(ledger.Install(RefitResult{exact, fitted}, *input).has_value());
  v1::StatusResponse status = StatusOf(ledger);
  // In sample, the window is the fit's; out of sample, the predictions
  // were the prior's.
  EXPECT_NEAR(status.model_error(), fitted, 1e-12);
  EXPECT_NEAR(status.unseen_task_error(), 1.0 / 3, 1e-12);
  EXPECT_EQ(status.observations_since_refit(), 0);
  EXPECT_EQ(status.refit_error_since(), 0);

  // Two more, at the prior's speed: the refitted model is 1/2 off on each
  // (it predicts 1.5x). The unseen window keeps the last four.
  ledger.AddObservations(Observed(1.0, 2), 1);
  status = StatusOf(ledger);
  const double next = exact.MeanRelativeError(Observed(1.0, 2));
  EXPECT_NEAR(next, 0.5, 1e-9);
  EXPECT_NEAR(status.refit_error_since(), next, 1e-12);
  EXPECT_EQ(status.observations_since_refit(), 2);
  EXPECT_NEAR(status.unseen_task_error(), (2.0 / 3 + 2 * next) / 4, 1e-12);
  EXPECT_NEAR(ledger.UnseenError(), status.unseen_task_error(), 1e-15);
  // The next refit judges the model it replaces on those two.
  std::optional<RefitInput> again = ledger.TakeRefit();
  ASSERT_TRUE(again.has_value());
  std::optional<RefitEvent> event =
      ledger.Install(RefitResult{prior, 0.1}, *again);
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->replaced_observations_since, 2);
  EXPECT_NEAR(event->replaced_error_since, next, 1e-12);
  ledger.AddObservations(Observed(1.0, 1), 2);
  EXPECT_EQ(StatusOf(ledger).observations_since_refit(), 1);
  // A restored model starts its own count.
  ledger.RestoreModel(Prior(), 2);
  EXPECT_EQ(StatusOf(ledger).observations_since_refit(), 0);
}

TEST(ReportLedgerTest, KeepingTheCurrentModelStillTakesAVersion) {
  ReportLedger ledger(Options());
  ledger.AddObservations(Observed(1.5), 0);
  std::optional<RefitInput> first = ledger.TakeRefit();
  std::optional<RefitInput> second = ledger.TakeRefit();
  ASSERT_TRUE(first.has_value() && second.has_value());
  const double error = Prior().MeanRelativeError(first->observations);
  std::optional<RefitEvent> event =
      ledger.Install(RefitResult{first->model, error, true, true}, *first);
  ASSERT_TRUE(event.has_value());
  EXPECT_TRUE(event->kept_current);
  EXPECT_EQ(event->error_after, event->error_before);
  EXPECT_EQ(StatusOf(ledger).coefficients().at("lin"),
            Prior().coefficients().lin);
  // `second` was taken before that refit: stale, as after any install.
  EXPECT_FALSE(ledger.Install(RefitResult{Prior(), 0}, *second).has_value());
  EXPECT_EQ(StatusOf(ledger).refits(), 1);
}

}  // namespace
}  // namespace dcp
