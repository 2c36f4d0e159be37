#ifndef DCP_SCHEDULER_CONTROL_REFIT_DRIVER_H_
#define DCP_SCHEDULER_CONTROL_REFIT_DRIVER_H_

#include <functional>
#include <optional>

#include "absl/status/statusor.h"
#include "scheduler/control/control_events.h"
#include "scheduler/control/report_ledger.h"
#include "scheduler/planner/cost_model.h"

namespace dcp {

/// Refits the cost model from a `ReportLedger`'s windows: always from the
/// prior (the initial model), so the windows alone decide how far the fit
/// moves from it and nothing drifts from refit to refit; the task fit
/// first, then the gradient sync, both shrunk towards the prior by
/// `prior_weight` pseudo-observations. Then it keeps the better of the fit
/// and the ledger's current model, part by part, on the refit's own
/// windows: the task coefficients by `CostModel::MeanRelativeError` on the
/// observations, the gradient sync by its mean |grad_sync - measured sync|
/// / measured step time on the syncs (the ledger's sync error). A refit
/// therefore never raises the task error on the window it was fitted to.
///
/// A refit is a solve over the whole observation window, the most
/// expensive thing a report leads to, so reports only mark it due in the
/// ledger and the control plane's planner thread runs it here, with no
/// lock held during the fit. No state of its own beyond constants: calls
/// may run at once on any threads (the ledger keeps the first model
/// installed from a given version, and the comparison is with the model of
/// that version).
///
///   RefitDriver refits(prior, 1.0, &ledger, on_refit);
///   refits.RunDue();  // on the planner thread, before planning a step
class RefitDriver {
 public:
  /// `ledger` is not owned and must outlive the driver. `on_refit` (may be
  /// empty) is called after each installed refit, on the calling thread,
  /// with no lock held.
  RefitDriver(CostModel prior, double prior_weight, ReportLedger* ledger,
              std::function<void(const RefitEvent&)> on_refit);
  RefitDriver(const RefitDriver&) = delete;
  RefitDriver& operator=(const RefitDriver&) = delete;

  /// The prior fitted to `input`: tasks, then the sync.
  static absl::StatusOr<CostModel> Fit(const CostModel& prior,
                                       const RefitInput& input,
                                       double prior_weight);

  /// The better of `fitted` and `input.model`, part by part (see the class
  /// comment); ties keep `input.model`'s part.
  static RefitResult KeepTheBetter(const CostModel& fitted,
                                   const RefitInput& input);

  /// Runs the refit the ledger has due, if any. Returns whether one was due.
  bool RunDue();

  /// Refits from everything the ledger holds, due or not (the end of the
  /// profile stage). Returns whether a model was installed.
  bool RunNow();

 private:
  /// Fits `input`, installs the better of the fit and the current model
  /// and tells `on_refit_`.
  bool Run(const RefitInput& input);

  const CostModel prior_;
  const double prior_weight_;
  ReportLedger* const ledger_;
  const std::function<void(const RefitEvent&)> on_refit_;
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_CONTROL_REFIT_DRIVER_H_
