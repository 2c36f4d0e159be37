#ifndef DCP_WORKER_AGENT_PROFILE_RESPONDER_H_
#define DCP_WORKER_AGENT_PROFILE_RESPONDER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/comm_key.h"
#include "common/clock.h"
#include "proto/scheduler_service.grpc.pb.h"
#include "worker_agent/agent_options.h"

namespace dcp {

/// Configuration of a `ProfileResponder`.
struct ProfileResponderOptions {
  int rank = -1;
  /// Deadline of each ReportProfile call.
  absl::Duration rpc_timeout = absl::Seconds(10);
  /// Sleep before a retry; doubles up to `max_backoff`.
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  /// What the back-off sleeps on. Not owned; required.
  Clock* clock = nullptr;
  /// Runs a request with the resolver of its groups. Required.
  std::function<absl::StatusOr<v1::Profile>(const v1::ProfileRequest& request,
                                            const GroupResolver& groups)>
      run;
  /// Forms (or finds) the process group of `key` under `prefix`. Required.
  std::function<absl::StatusOr<c10d::ProcessGroup*>(const CommKey& key,
                                                    const std::string& prefix)>
      form_group;
};

/// Answers the scheduler's profile requests: runs each with `run`, its
/// groups formed for the request's epoch, and sends the result with
/// ReportProfile, retrying UNAVAILABLE / DEADLINE_EXCEEDED a few times.
/// Failures are counted, not returned: the scheduler's timeout covers a rank
/// that does not answer.
///
/// Thread-safe. Does not own the stub, which must outlive it.
class ProfileResponder {
 public:
  ProfileResponder(v1::Scheduler::StubInterface* stub,
                   ProfileResponderOptions options);

  /// Runs and reports `request`; blocks for the run and the report.
  void Handle(const v1::ProfileRequest& request) ABSL_LOCKS_EXCLUDED(mu_);
  /// Ends a back-off under way; later reports are refused. Idempotent.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);

  int64_t sent() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t failures() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Status Send(const v1::ProfileReport& report) ABSL_LOCKS_EXCLUDED(mu_);

  v1::Scheduler::StubInterface* const stub_;
  const ProfileResponderOptions options_;

  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  int64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_PROFILE_RESPONDER_H_
