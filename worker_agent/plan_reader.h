#ifndef DCP_WORKER_AGENT_PLAN_READER_H_
#define DCP_WORKER_AGENT_PLAN_READER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/plan.pb.h"
#include "proto/scheduler_service.grpc.pb.h"
#include "common/backoff.h"
#include "worker_agent/registration.h"
#include "worker_agent/step_mailbox.h"

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace dcp {

/// Configuration of a `PlanReader`.
struct PlanReaderOptions {
  int rank = -1;
  /// Reconnections in a row that may fail before the reader gives up, and
  /// how long the scheduler may stay unreachable (on `clock`, from the
  /// stream's break): the reader gives up only when both are passed, so a
  /// scheduler restart shorter than `max_outage` is only a pause.
  int max_reconnect_attempts = 8;
  absl::Duration max_outage = absl::Minutes(10);
  /// Sleep before the first reconnection; doubles up to `max_backoff`.
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  /// Deadline of a re-registration.
  absl::Duration rpc_timeout = absl::Seconds(10);
  /// What the back-off sleeps on. Not owned; required.
  Clock* clock = nullptr;
  /// Run on the reader thread with the epoch and the groups of each step
  /// put in the mailbox, in order (their warm-up), and with each profile
  /// request. May be empty.
  std::function<void(int64_t epoch, const std::vector<v1::CommGroup>& groups)>
      on_groups;
  std::function<void(const v1::ProfileRequest&)> on_profile;
  /// Run on the reader thread after each failed reconnection, with the
  /// failures in a row, the last error and how long the scheduler has been
  /// unreachable (for logs). May be empty.
  std::function<void(int failures, const absl::Status& last,
                     absl::Duration outage)>
      on_reconnect_failed;
  /// Run on the reader thread for each step put in the mailbox that has a
  /// planned-at time, with it and `clock`'s time on receipt. May be empty.
  std::function<void(absl::Time planned, absl::Time received)>
      on_step_received;
};

/// The reader thread of the plan stream: opens StreamPlans from a step,
/// puts each RankStep in the mailbox (waiting while it is full), marks the
/// drain, and when the stream breaks registers again and resumes after the
/// last step received, with exponential back-off, at most
/// `max_reconnect_attempts` times in a row. A rank taken over by another
/// agent (ABORTED), a refused registration, a restarted scheduler or too
/// many failed reconnections fail the mailbox.
///
/// Thread-safe. Borrows the stub, registration and mailbox, which must
/// outlive it. `Stop` cancels the call under way and ends the thread.
///
///   PlanReader reader(stub, &registration, &mailbox, options);
///   reader.Start(registration.first().next_step());
///   ...
///   reader.Stop();
class PlanReader {
 public:
  PlanReader(v1::Scheduler::StubInterface* stub, Registration* registration,
             StepMailbox* mailbox, PlanReaderOptions options);
  ~PlanReader();
  PlanReader(const PlanReader&) = delete;
  PlanReader& operator=(const PlanReader&) = delete;

  /// Starts the thread, reading from `from_step`. Once.
  void Start(int64_t from_step);

  /// Ends the call under way and any back-off; the thread ends soon after
  /// (a profile run in progress first). Idempotent.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);
  /// Waits for the thread after `Cancel`, unless called from it. Not
  /// concurrently with itself.
  void Join();

  /// Plan streams reopened after a break.
  int64_t reconnects() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop(int64_t from_step);
  /// Reads one stream until it ends; returns its status and whether any
  /// message arrived.
  absl::Status ReadStream(int64_t from_step, bool* got_message);
  /// Registers again after `backoff`s until one is accepted (returns the
  /// step to resume from) or the reader gives up (nullopt; the mailbox
  /// holds why). `failures` counts the attempts in a row, since the
  /// stream broke at `broke`.
  std::optional<int64_t> Reconnect(absl::Status last, int* failures,
                                   Backoff* backoff, absl::Time broke);
  void Dispatch(v1::PlanUpdate& update);
  /// The mailbox fails with `status`; nobody waits for a registration.
  void GiveUp(absl::Status status);

  /// `context` is the call under way until `Detach`; false (not attached)
  /// after `Cancel`.
  bool Attach(grpc::ClientContext* context) ABSL_LOCKS_EXCLUDED(mu_);
  void Detach() ABSL_LOCKS_EXCLUDED(mu_);

  v1::Scheduler::StubInterface* const stub_;
  Registration* const registration_;
  StepMailbox* const mailbox_;
  const PlanReaderOptions options_;
  Clock* const clock_;

  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  /// The call under way, to cancel it.
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t reconnects_ ABSL_GUARDED_BY(mu_) = 0;

  std::thread thread_;
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_PLAN_READER_H_
