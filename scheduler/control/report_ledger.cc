#include "scheduler/control/report_ledger.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>

namespace dcp {
namespace {

/// Appends `value`, dropping the oldest entries beyond `window`.
template <typename T>
void PushWindowed(std::deque<T>& entries, T value, int window) {
  entries.push_back(std::move(value));
  while (static_cast<int>(entries.size()) > window) entries.pop_front();
}

// The mean of `count` errors kept as a running `sum` (0 with none); the sum
// is clamped at 0 against the rounding of its additions and subtractions.
double MeanOfSum(double sum, size_t count) {
  if (count == 0) return 0;
  return std::max(0.0, sum) / static_cast<double>(count);
}

}  // namespace

ReportLedger::ReportLedger(ReportLedgerOptions options)
    : options_(std::move(options)), model_(options_.initial_model) {}

void ReportLedger::CountTimingReport() {
  absl::MutexLock lock(&mu_);
  ++timing_reports_;
}

void ReportLedger::AddCompletedStep(const MeasuredStep& step) {
  const double measured = step.measured_seconds;
  absl::MutexLock lock(&mu_);
  if (measured > 0 && step.predicted_seconds > 0) {
    PushWindowed(step_errors_,
                 std::abs(step.predicted_seconds - measured) / measured,
                 options_.step_error_window);
  }
  if (step.sync_reported && measured > 0) {
    PushWindowed(syncs_,
                 SyncObservation{
                     std::max(0.0, measured - step.max_busy_seconds), measured},
                 options_.sync_window);
  }
}

bool ReportLedger::AddObservations(std::vector<TaskObservation> observations,
                                   int64_t completed_steps) {
  absl::MutexLock lock(&mu_);
  completed_steps_ = std::max(completed_steps_, completed_steps);
  new_observations_ += static_cast<int64_t>(observations.size());
  for (TaskObservation& o : observations) {
    const double error = RelativeError(o);
    observation_errors_.push_back(error);
    observation_error_sum_ += error;
    observations_.push_back(std::move(o));
    // The current model predicted it before any fit saw it.
    unseen_errors_.push_back(error);
    unseen_error_sum_ += error;
    new_error_sum_ += error;
    since_refit_error_sum_ += error;
    ++since_refit_;
  }
  while (static_cast<int>(unseen_errors_.size()) > options_.observation_window) {
    unseen_error_sum_ -= unseen_errors_.front();
    unseen_errors_.pop_front();
  }
  while (static_cast<int>(observations_.size()) > options_.observation_window) {
    observation_error_sum_ -= observation_errors_.front();
    observation_errors_.pop_front();
    observations_.pop_front();
  }
  // Only once a step completed: before that, observations are the start-up
  // profile's, which refits once at its end.
  const bool far_off =
      options_.refit_error > 0 && completed_steps_ > 0 &&
      new_observations_ > 0 &&
      new_error_sum_ > options_.refit_error *
                           static_cast<double>(new_observations_);
  if ((new_observations_ < options_.refit_every && !far_off) ||
      observations_.empty()) {
    return false;
  }
  // At most one refit per completed step: at a thousand ranks a step brings
  // thousands of observations, and a refit per `refit_every` of them would
  // fit dozens of times a step to change the plans of the next one once.
  if (completed_steps_ == refit_completed_steps_) return false;
  refit_completed_steps_ = completed_steps_;
  new_observations_ = 0;
  new_error_sum_ = 0;
  refit_due_ = true;
  return true;
}

std::optional<RefitInput> ReportLedger::TakeDueRefit() {
  absl::MutexLock lock(&mu_);
  if (!refit_due_) return std::nullopt;
  refit_due_ = false;
  return MakeInput();
}

std::optional<RefitInput> ReportLedger::TakeRefit() {
  absl::MutexLock lock(&mu_);
  refit_due_ = false;
  if (observations_.empty()) return std::nullopt;
  new_observations_ = 0;
  new_error_sum_ = 0;
  return MakeInput();
}

RefitInput ReportLedger::MakeInput() const {
  RefitInput input{{observations_.begin(), observations_.end()},
                   {},
                   {},
                   model_,
                   model_version_};
  input.syncs.reserve(syncs_.size());
  input.sync_step_seconds.reserve(syncs_.size());
  for (const SyncObservation& sync : syncs_) {
    input.syncs.push_back(sync.seconds);
    input.sync_step_seconds.push_back(sync.step_seconds);
  }
  return input;
}

std::optional<RefitEvent> ReportLedger::Install(RefitResult result,
                                                const RefitInput& input) {
  absl::MutexLock lock(&mu_);
  if (model_version_ != input.version) return std::nullopt;
  RefitEvent event;
  event.observations = static_cast<int64_t>(input.observations.size());
  event.error_before = model_.MeanRelativeError(input.observations);
  event.error_after = result.error_after;
  event.kept_current = result.kept_current;
  event.kept_current_sync = result.kept_current_sync;
  model_ = std::move(result.model);
  ++model_version_;
  observation_error_sum_ = 0;
  for (size_t i = 0; i < observations_.size(); ++i) {
    observation_errors_[i] = RelativeError(observations_[i]);
    observation_error_sum_ += observation_errors_[i];
  }
  event.replaced_observations_since = since_refit_;
  event.replaced_error_since = SinceRefitErrorLocked();
  since_refit_error_sum_ = 0;
  since_refit_ = 0;
  event.refits = ++refits_;
  event.step_error = StepError();
  event.sync_error = SyncError();
  refit_error_before_ = event.error_before;
  refit_error_after_ = event.error_after;
  return event;
}

std::optional<CostModel> ReportLedger::ModelIfNewer(int64_t* version) const {
  absl::MutexLock lock(&mu_);
  if (*version == model_version_) return std::nullopt;
  *version = model_version_;
  return model_;
}

void ReportLedger::RestoreModel(CostModel model, int64_t refits) {
  absl::MutexLock lock(&mu_);
  model_ = std::move(model);
  ++model_version_;
  refits_ = refits;
  since_refit_error_sum_ = 0;
  since_refit_ = 0;
  observation_error_sum_ = 0;
  for (size_t i = 0; i < observations_.size(); ++i) {
    observation_errors_[i] = RelativeError(observations_[i]);
    observation_error_sum_ += observation_errors_[i];
  }
}

int64_t ReportLedger::refits() const {
  absl::MutexLock lock(&mu_);
  return refits_;
}

double ReportLedger::RelativeError(const TaskObservation& o) const {
  const double predicted =
      model_.TaskSeconds(o.group_size, o.intra_node, o.lengths, o.recompute,
                         o.ulysses);
  return std::abs(predicted - o.seconds) / o.seconds;
}

double ReportLedger::ModelError() const {
  absl::MutexLock lock(&mu_);
  return ModelErrorLocked();
}

double ReportLedger::ModelErrorLocked() const {
  return MeanOfSum(observation_error_sum_, observations_.size());
}

double ReportLedger::UnseenError() const {
  absl::MutexLock lock(&mu_);
  return UnseenErrorLocked();
}

double ReportLedger::UnseenErrorLocked() const {
  return MeanOfSum(unseen_error_sum_, unseen_errors_.size());
}

double ReportLedger::SinceRefitErrorLocked() const {
  return MeanOfSum(since_refit_error_sum_, since_refit_);
}

int64_t ReportLedger::observations() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(observations_.size());
}

double ReportLedger::StepError() const {
  if (step_errors_.empty()) return 0;
  double sum = 0;
  for (double e : step_errors_) sum += e;
  return sum / static_cast<double>(step_errors_.size());
}

double ReportLedger::SyncError() const {
  if (syncs_.empty()) return 0;
  double sum = 0;
  for (const SyncObservation& sync : syncs_) {
    sum += std::abs(model_.SyncSeconds() - sync.seconds) / sync.step_seconds;
  }
  return sum / static_cast<double>(syncs_.size());
}

void ReportLedger::FillStatus(v1::StatusResponse* out) const {
  absl::MutexLock lock(&mu_);
  out->set_model_error(ModelErrorLocked());
  out->set_timing_reports(timing_reports_);
  out->set_refits(refits_);
  const CostModel::Coefficients& c = model_.coefficients();
  auto& coefficients = *out->mutable_coefficients();
  coefficients["lin"] = c.lin;
  coefficients["gemm_half"] = c.gemm_half;
  coefficients["attn"] = c.attn;
  coefficients["attn_half"] = c.attn_half;
  coefficients["a2a_byte_intra"] = c.a2a_byte_intra;
  coefficients["a2a_fixed_intra"] = c.a2a_fixed_intra;
  coefficients["a2a_byte_inter"] = c.a2a_byte_inter;
  coefficients["a2a_fixed_inter"] = c.a2a_fixed_inter;
  coefficients["ring_byte_intra"] = c.ring_byte_intra;
  coefficients["ring_fixed_intra"] = c.ring_fixed_intra;
  coefficients["ring_byte_inter"] = c.ring_byte_inter;
  coefficients["ring_fixed_inter"] = c.ring_fixed_inter;
  coefficients["fixed"] = c.fixed;
  coefficients["grad_sync"] = c.grad_sync;
  coefficients["mem_static"] = c.mem_static;
  coefficients["mem_token"] = c.mem_token;
  coefficients["mem_token_recompute"] = c.mem_token_recompute;
  coefficients["mem_token_base"] = c.mem_token_base;
  // The form, not a coefficient: 1 where the ring's passes overlap
  // attention (a task waits for the longer), 0 where they add to it.
  coefficients["ring_overlaps_attention"] = c.ring_overlaps_attention ? 1 : 0;
  out->set_step_error(StepError());
  out->set_sync_error(SyncError());
  out->set_refit_error_before(refit_error_before_);
  out->set_refit_error_after(refit_error_after_);
  out->set_observations(static_cast<int64_t>(observations_.size()));
  out->set_unseen_task_error(UnseenErrorLocked());
  out->set_refit_error_since(SinceRefitErrorLocked());
  out->set_observations_since_refit(since_refit_);
}

}  // namespace dcp
