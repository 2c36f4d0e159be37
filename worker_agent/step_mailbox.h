#ifndef DCP_WORKER_AGENT_STEP_MAILBOX_H_
#define DCP_WORKER_AGENT_STEP_MAILBOX_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/plan.pb.h"
#include "worker_agent/agent_options.h"

namespace dcp {

/// Configuration of a `StepMailbox`.
struct StepMailboxOptions {
  /// The rank, for messages.
  int rank = -1;
  /// Steps queued ahead of the consumer before `AwaitRoom` blocks; >= 1.
  int capacity = 4;
  /// Deadlines and timeouts are on this clock. Not owned; required.
  Clock* clock = nullptr;
};

/// The steps between the plan stream and the training loop: the reader puts
/// each RankStep in (dropping any whose (epoch, step) is not newer than the
/// last), then the drain marker or a failure; consumers take the step after
/// the last one they ran, blocking (`NextStep`) or with a callback
/// (`NextStepAsync`, answered on the mailbox's own thread when a step
/// arrives, the deadline passes or the mailbox closes). No gRPC, no I/O.
///
/// Thread-safe. One producer (`AwaitRoom`, `Put`, `Drain`) is expected;
/// consumers may be many. `Close` fails what waits and all later calls with
/// UNAVAILABLE; the destructor closes and joins the thread.
///
///   StepMailbox mailbox({.rank = 0, .capacity = 4, .clock = clock});
///   mailbox.Put(step);          // reader thread
///   mailbox.NextStep(-1, absl::Seconds(10));  // training loop
class StepMailbox {
 public:
  using Callback = std::function<void(absl::StatusOr<NextStepResult> result)>;
  struct Stats {
    int64_t steps_received = 0;
    int64_t steps_delivered = 0;
    int64_t stale_dropped = 0;
  };

  explicit StepMailbox(StepMailboxOptions options);
  ~StepMailbox();
  StepMailbox(const StepMailbox&) = delete;
  StepMailbox& operator=(const StepMailbox&) = delete;

  /// Blocks until fewer than `capacity` steps are queued; false once closed.
  bool AwaitRoom() ABSL_LOCKS_EXCLUDED(mu_);
  /// Queues `step` when its (epoch, step) is newer than the last put; false
  /// (and counted in `stale_dropped`) otherwise.
  bool Put(v1::RankStep step) ABSL_LOCKS_EXCLUDED(mu_);
  /// No step follows the queued ones.
  void Drain() ABSL_LOCKS_EXCLUDED(mu_);
  /// The stream failed for good: once the queue is empty consumers get
  /// `status`. The first failure wins.
  void Fail(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  bool drained() const ABSL_LOCKS_EXCLUDED(mu_);
  /// The newest step put; -1 before any.
  int64_t last_step() const ABSL_LOCKS_EXCLUDED(mu_);

  /// See `Agent::NextStep`, `Agent::NextStepAsync`, `Agent::CancelNextStep`
  /// and `Agent::WaitForDrainDelivered`.
  absl::StatusOr<NextStepResult> NextStep(int64_t after_step,
                                          absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);
  int64_t NextStepAsync(int64_t after_step, absl::Time deadline, Callback done)
      ABSL_LOCKS_EXCLUDED(mu_);
  bool CancelNextStep(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status WaitForDrainDelivered(absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);

  /// The epoch of the last step handed out, nullopt before any; UNAVAILABLE
  /// once closed.
  absl::StatusOr<std::optional<int64_t>> DeliveredEpoch() const
      ABSL_LOCKS_EXCLUDED(mu_);

  /// Fails pending and later calls with UNAVAILABLE. Idempotent.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);
  /// Waits for the callback thread to end (after `Close`), unless called
  /// from it. Not concurrently with itself.
  void Join();

  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Waiter {
    int64_t after_step = 0;
    absl::Time deadline;
    Callback done;
  };

  void WaiterLoop() ABSL_LOCKS_EXCLUDED(mu_);
  /// NextStep's answer for `after_step` if known now; drops stale steps.
  std::optional<absl::StatusOr<NextStepResult>> TakeLocked(int64_t after_step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  /// Whether `TakeLocked(after_step)` has an answer.
  bool AnswerableLocked(int64_t after_step) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ShouldWakeWaiterLoop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasRoom() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const StepMailboxOptions options_;
  Clock* const clock_;

  mutable absl::Mutex mu_;
  /// Received, not yet handed out; ascending (epoch, step).
  std::deque<v1::RankStep> queue_ ABSL_GUARDED_BY(mu_);
  /// The newest (epoch, step) received; (-1, -1) before any.
  int64_t last_epoch_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t last_step_ ABSL_GUARDED_BY(mu_) = -1;
  /// The last step handed out, for repeated asks and for its epoch.
  std::optional<v1::RankStep> delivered_ ABSL_GUARDED_BY(mu_);
  bool drained_ ABSL_GUARDED_BY(mu_) = false;
  bool drain_delivered_ ABSL_GUARDED_BY(mu_) = false;
  /// Set when the stream failed for good.
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  int64_t next_waiter_id_ ABSL_GUARDED_BY(mu_) = 1;
  /// Bumped on every new waiter so the waiter thread re-reads deadlines.
  int64_t waiters_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t seen_generation_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);

  std::thread waiter_thread_;
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_STEP_MAILBOX_H_
