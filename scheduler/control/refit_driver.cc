#include "scheduler/control/refit_driver.h"

#include <utility>

namespace dcp {

RefitDriver::RefitDriver(CostModel prior, double prior_weight,
                         ReportLedger* ledger,
                         std::function<void(const RefitEvent&)> on_refit)
    : prior_(std::move(prior)),
      prior_weight_(prior_weight),
      ledger_(ledger),
      on_refit_(std::move(on_refit)) {}

absl::StatusOr<CostModel> RefitDriver::Fit(const CostModel& prior,
                                           const RefitInput& input,
                                           double prior_weight) {
  absl::StatusOr<CostModel> fitted =
      prior.Fit(input.observations, prior_weight);
  // The task fit keeps the prior's sync, so the sync is shrunk towards that
  // prior too.
  if (fitted.ok()) fitted = fitted->FitSync(input.syncs, prior_weight);
  return fitted;
}

bool RefitDriver::RunDue() {
  std::optional<RefitInput> input = ledger_->TakeDueRefit();
  if (!input.has_value()) return false;
  Run(*input);
  return true;
}

bool RefitDriver::RunNow() {
  std::optional<RefitInput> input = ledger_->TakeRefit();
  return input.has_value() && Run(*input);
}

bool RefitDriver::Run(const RefitInput& input) {
  absl::StatusOr<CostModel> fitted = Fit(prior_, input, prior_weight_);
  if (!fitted.ok()) return false;  // Validated input: cannot happen.
  const double error_after = fitted->MeanRelativeError(input.observations);
  std::optional<RefitEvent> event =
      ledger_->Install(*std::move(fitted), input, error_after);
  if (!event.has_value()) return false;
  if (on_refit_) on_refit_(*event);
  return true;
}

}  // namespace dcp
