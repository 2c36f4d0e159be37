#include "scheduler/control/refit_driver.h"

#include <cmath>
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

namespace {

/// Mean |grad_sync - measured sync| / measured step time over `input`'s
/// syncs (0 when none): the ledger's sync error on the refit's window.
double SyncError(const CostModel& model, const RefitInput& input) {
  if (input.syncs.empty()) return 0;
  double sum = 0;
  for (size_t i = 0; i < input.syncs.size(); ++i) {
    sum += std::abs(model.SyncSeconds() - input.syncs[i]) /
           input.sync_step_seconds[i];
  }
  return sum / static_cast<double>(input.syncs.size());
}

}  // namespace

RefitResult RefitDriver::KeepTheBetter(const CostModel& fitted,
                                       const RefitInput& input) {
  const CostModel& current = input.model;
  const double fit_error = fitted.MeanRelativeError(input.observations);
  const double current_error = current.MeanRelativeError(input.observations);
  const bool keep_tasks = !(fit_error < current_error);
  const bool keep_sync =
      !(SyncError(fitted, input) < SyncError(current, input));
  // Task times do not depend on the sync, nor the sync on them (a step adds
  // it after its last task), so the parts are chosen independently.
  const CostModel& tasks = keep_tasks ? current : fitted;
  CostModel::Coefficients c = tasks.coefficients();
  c.grad_sync = (keep_sync ? current : fitted).SyncSeconds();
  return RefitResult{
      CostModel(c, tasks.model(), tasks.memory_cap(), tasks.gpus_per_node()),
      keep_tasks ? current_error : fit_error, keep_tasks, keep_sync};
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
  std::optional<RefitEvent> event =
      ledger_->Install(KeepTheBetter(*fitted, input), input);
  if (!event.has_value()) return false;
  if (on_refit_) on_refit_(*event);
  return true;
}

}  // namespace dcp
