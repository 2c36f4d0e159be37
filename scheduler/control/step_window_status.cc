// StepWindow's drain, stop and status: how a job ends and what
// `ControlPlane::Status` reports of the window.

#include <algorithm>

#include "scheduler/control/step_window.h"

namespace dcp {

// ---------------------------------------------------------- drain and stop

int64_t StepWindow::Drain(bool stop) {
  WakeList wakes;
  int64_t last_step = -1;
  {
    absl::MutexLock lock(&mu_);
    draining_ = true;
    stop_requested_ = stop_requested_ || stop;
    last_step = planned_steps_ - 1;
    wakes = AllWakes();
  }
  CallAll(wakes);
  return last_step;
}

bool StepWindow::StreamsEnded() const { return streams_.empty(); }

bool StepWindow::stopped() const {
  absl::MutexLock lock(&mu_);
  return stop_requested_ && StreamsEnded();
}

bool StepWindow::WaitForStop(absl::Duration grace) {
  auto requested = [](const StepWindow* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return w->stop_requested_ || w->shutdown_;
  };
  auto ended = [](const StepWindow* w)
                   ABSL_NO_THREAD_SAFETY_ANALYSIS { return w->StreamsEnded(); };
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(+requested, static_cast<const StepWindow*>(this)));
  if (shutdown_) return StreamsEnded();
  return mu_.AwaitWithTimeout(
      absl::Condition(+ended, static_cast<const StepWindow*>(this)), grace);
}

void StepWindow::Shutdown() {
  WakeList wakes;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    for (auto& [id, stream] : streams_) {
      if (!stream.closed.has_value()) {
        stream.closed =
            absl::UnavailableError("the scheduler is shutting down");
      }
    }
    std::fill(rank_streams_.begin(), rank_streams_.end(), 0);
    wakes = AllWakes();
  }
  CallAll(wakes);
}

bool StepWindow::shut_down() const {
  absl::MutexLock lock(&mu_);
  return shutdown_;
}

void StepWindow::FillStatus(v1::StatusResponse* out) const {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  out->set_session_id(options_.session_id);
  out->set_world_size(options_.world_size);
  out->set_model(options_.model_name);
  out->set_planned_steps(planned_steps_);
  out->set_completed_steps(completed_steps_ - abandoned_steps_);
  out->set_draining(draining_ || PlannedAll());
  out->set_abandoned_steps(abandoned_steps_);
  const int first = out->ranks_size();
  world_.FillStatus(now, out);
  for (int r = 0; r < options_.world_size; ++r) {
    v1::RankStatus* rank = out->mutable_ranks(first + r);
    rank->set_connected(rank_streams_[r] != 0);
    rank->set_lag_steps(planned_steps_ - world_.rank(r).reported_steps);
  }
  out->set_stopping(stop_requested_);
  if (!planner_error_.ok()) {
    out->set_planner_error(std::string(planner_error_.message()));
  }
}

}  // namespace dcp
