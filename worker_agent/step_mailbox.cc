#include "worker_agent/step_mailbox.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dcp {
namespace {

bool Newer(int64_t epoch, int64_t step, int64_t than_epoch, int64_t than_step) {
  return epoch > than_epoch || (epoch == than_epoch && step > than_step);
}

absl::Status ClosedError() {
  return absl::UnavailableError("the agent is shut down");
}

}  // namespace

StepMailbox::StepMailbox(StepMailboxOptions options)
    : options_(std::move(options)), clock_(options_.clock) {
  waiter_thread_ = std::thread([this] { WaiterLoop(); });
}

StepMailbox::~StepMailbox() {
  Close();
  Join();
}

bool StepMailbox::HasRoom() const {
  return closed_ || static_cast<int>(queue_.size()) < options_.capacity;
}

bool StepMailbox::AwaitRoom() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &StepMailbox::HasRoom));
  return !closed_;
}

bool StepMailbox::Put(v1::RankStep step) {
  absl::MutexLock lock(&mu_);
  if (!Newer(step.epoch(), step.step(), last_epoch_, last_step_)) {
    ++stats_.stale_dropped;
    return false;
  }
  last_epoch_ = step.epoch();
  last_step_ = step.step();
  queue_.push_back(std::move(step));
  ++stats_.steps_received;
  return true;
}

void StepMailbox::Drain() {
  absl::MutexLock lock(&mu_);
  drained_ = true;
}

void StepMailbox::Fail(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (failure_.ok()) failure_ = std::move(status);
}

bool StepMailbox::drained() const {
  absl::MutexLock lock(&mu_);
  return drained_;
}

int64_t StepMailbox::last_step() const {
  absl::MutexLock lock(&mu_);
  return last_step_;
}

std::optional<absl::StatusOr<NextStepResult>> StepMailbox::TakeLocked(
    int64_t after_step) {
  if (closed_) return ClosedError();
  while (!queue_.empty() && queue_.front().step() <= after_step) {
    queue_.pop_front();
    ++stats_.stale_dropped;
  }
  NextStepResult result;
  if (delivered_.has_value() && delivered_->step() > after_step) {
    result.step = *delivered_;  // Asked again: the same answer.
    return result;
  }
  if (!queue_.empty()) {
    delivered_ = std::move(queue_.front());
    queue_.pop_front();
    ++stats_.steps_delivered;
    result.step = *delivered_;
    return result;
  }
  if (drained_) {
    drain_delivered_ = true;
    result.drained = true;
    return result;
  }
  if (!failure_.ok()) return failure_;
  return std::nullopt;
}

bool StepMailbox::AnswerableLocked(int64_t after_step) const {
  if (closed_ || drained_ || !failure_.ok()) return true;
  if (delivered_.has_value() && delivered_->step() > after_step) return true;
  return !queue_.empty() && queue_.back().step() > after_step;
}

absl::StatusOr<NextStepResult> StepMailbox::NextStep(int64_t after_step,
                                                     absl::Duration timeout) {
  struct Ready {
    const StepMailbox* mailbox;
    int64_t after_step;
  } ready{this, after_step};
  auto answerable = [](Ready* r) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return r->mailbox->AnswerableLocked(r->after_step);
  };
  absl::MutexLock lock(&mu_);
  clock_->AwaitWithTimeout(&mu_, absl::Condition(+answerable, &ready), timeout);
  if (std::optional<absl::StatusOr<NextStepResult>> r = TakeLocked(after_step);
      r.has_value()) {
    return *std::move(r);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("rank ", options_.rank, ": no step after ", after_step,
                   " arrived within ", absl::FormatDuration(timeout)));
}

int64_t StepMailbox::NextStepAsync(int64_t after_step, absl::Time deadline,
                                   Callback done) {
  std::optional<absl::StatusOr<NextStepResult>> now;
  {
    absl::MutexLock lock(&mu_);
    now = TakeLocked(after_step);
    if (!now.has_value()) {
      const int64_t id = next_waiter_id_++;
      waiters_[id] = Waiter{after_step, deadline, std::move(done)};
      ++waiters_generation_;
      return id;
    }
  }
  done(*std::move(now));
  return 0;
}

bool StepMailbox::CancelNextStep(int64_t id) {
  absl::MutexLock lock(&mu_);
  return waiters_.erase(id) > 0;
}

bool StepMailbox::ShouldWakeWaiterLoop() const {
  if (closed_ || waiters_generation_ != seen_generation_) return true;
  for (const auto& [id, waiter] : waiters_) {
    if (AnswerableLocked(waiter.after_step)) return true;
  }
  return false;
}

void StepMailbox::WaiterLoop() {
  while (true) {
    std::vector<std::pair<Callback, absl::StatusOr<NextStepResult>>> answers;
    bool exit = false;
    {
      absl::MutexLock lock(&mu_);
      absl::Time next = absl::InfiniteFuture();
      for (const auto& [id, waiter] : waiters_) {
        next = std::min(next, waiter.deadline);
      }
      clock_->AwaitWithDeadline(
          &mu_, absl::Condition(this, &StepMailbox::ShouldWakeWaiterLoop),
          next);
      seen_generation_ = waiters_generation_;
      const absl::Time now = clock_->Now();
      for (auto it = waiters_.begin(); it != waiters_.end();) {
        std::optional<absl::StatusOr<NextStepResult>> answer =
            TakeLocked(it->second.after_step);
        if (!answer.has_value() && now >= it->second.deadline) {
          answer = absl::DeadlineExceededError(absl::StrCat(
              "rank ", options_.rank, ": no step after ", it->second.after_step,
              " arrived before the deadline"));
        }
        if (answer.has_value()) {
          answers.emplace_back(std::move(it->second.done), *std::move(answer));
          it = waiters_.erase(it);
        } else {
          ++it;
        }
      }
      exit = closed_;
    }
    for (auto& [done, answer] : answers) done(std::move(answer));
    if (exit) return;
  }
}

absl::Status StepMailbox::WaitForDrainDelivered(absl::Duration timeout) {
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return drain_delivered_ || closed_ || !failure_.ok();
  };
  absl::MutexLock lock(&mu_);
  if (!clock_->AwaitWithTimeout(&mu_, absl::Condition(&done), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("rank ", options_.rank, ": the job did not drain within ",
                     absl::FormatDuration(timeout)));
  }
  if (drain_delivered_) return absl::OkStatus();
  if (!failure_.ok()) return failure_;
  return ClosedError();
}

absl::StatusOr<std::optional<int64_t>> StepMailbox::DeliveredEpoch() const {
  absl::MutexLock lock(&mu_);
  if (closed_) return ClosedError();
  if (!delivered_.has_value()) return std::optional<int64_t>();
  return std::optional<int64_t>(delivered_->epoch());
}

void StepMailbox::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

void StepMailbox::Join() {
  if (waiter_thread_.joinable() &&
      waiter_thread_.get_id() != std::this_thread::get_id()) {
    waiter_thread_.join();
  }
}

StepMailbox::Stats StepMailbox::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace dcp
