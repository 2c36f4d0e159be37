// StepWindow's drain, stop and status: how a job ends and what
// `ControlPlane::Status` reports of the window.

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
    for (RankState& rank : ranks_) rank.stream = 0;
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
  out->set_epoch(epoch_);
  out->set_world_size(options_.world_size);
  out->set_model(options_.model_name);
  out->set_planned_steps(planned_steps_);
  out->set_completed_steps(completed_steps_ - abandoned_steps_);
  out->set_draining(draining_ || PlannedAll());
  out->set_live_ranks(liveness_.live_ranks());
  out->set_rank_failures(liveness_.failures());
  if (detects_failures()) {
    out->set_on_rank_failure(
        std::string(RankFailurePolicyName(options_.on_rank_failure)));
  }
  out->set_holding(Holding());
  out->set_abandoned_steps(abandoned_steps_);
  out->set_epoch_world_size(
      static_cast<int32_t>(std::count(members_.begin(), members_.end(), true)));
  for (int r = 0; r < options_.world_size; ++r) {
    const RankState& state = ranks_[r];
    v1::RankStatus* rank = out->add_ranks();
    rank->set_rank(r);
    rank->set_host(state.host);
    rank->set_connected(state.stream != 0);
    rank->set_last_reported_step(state.last_reported_step);
    rank->set_last_sent_step(state.last_sent_step);
    rank->set_lag_steps(planned_steps_ - state.reported_steps);
    rank->set_gpu(state.gpu);
    rank->set_pid(state.pid);
    rank->set_registered(state.registered);
    rank->set_failed(liveness_.failed(r));
    rank->set_member(members_[r]);
    if (state.registered) {
      rank->set_idle_seconds(absl::ToDoubleSeconds(now - state.last_seen));
    }
  }
  out->set_stopping(stop_requested_);
  if (!planner_error_.ok()) {
    out->set_planner_error(std::string(planner_error_.message()));
  }
}

}  // namespace dcp
