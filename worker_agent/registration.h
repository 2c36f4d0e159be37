#ifndef DCP_WORKER_AGENT_REGISTRATION_H_
#define DCP_WORKER_AGENT_REGISTRATION_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "proto/scheduler_service.grpc.pb.h"

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace dcp {

/// Who registers: what the agent tells the scheduler about its rank.
struct RegistrationOptions {
  /// For messages: where the scheduler is.
  std::string scheduler_address;
  int rank = -1;
  std::string host;
  int gpu = 0;
  /// 0 accepts the scheduler's.
  int world_size = 0;
  /// What `AwaitRegisteredAgain` waits on. Not owned; required.
  Clock* clock = nullptr;
  /// `AgentOptions::fixed_world`, told to the scheduler.
  bool fixed_world = false;
};

/// The rank's registrations with the scheduler: the Register call, the
/// first answer (session, world, model) and the ones after a broken plan
/// stream, which must continue the same session. Report paths ask it
/// whether the rank is registered again after a scheduler came back
/// (`AwaitRegisteredAgain`).
///
/// Thread-safe. Does not own the stub, which must outlive it.
///
///   Registration registration(stub, options);
///   grpc::ClientContext context;
///   ASSIGN_OR_RETURN(v1::RegisterResponse hello,
///                    registration.Register(context));
///   RETURN_IF_ERROR(registration.Accept(hello));
class Registration {
 public:
  Registration(v1::Scheduler::StubInterface* stub, RegistrationOptions options);

  /// One Register call on `context` (whose deadline and cancellation are
  /// the caller's); the error names the rank and the scheduler.
  absl::StatusOr<v1::RegisterResponse> Register(grpc::ClientContext& context);

  /// Takes an answer of `Register`: the first becomes `first()`; a later
  /// one must carry the same session (FAILED_PRECONDITION: the scheduler
  /// restarted) and ends the reconnection under way.
  absl::Status Accept(const v1::RegisterResponse& response)
      ABSL_LOCKS_EXCLUDED(mu_);

  /// The plan stream broke: registrations after this are reconnections.
  void Reconnecting() ABSL_LOCKS_EXCLUDED(mu_);
  /// No registration will follow (the agent gave up or shuts down): waits
  /// in `AwaitRegisteredAgain` end.
  void Abandon() ABSL_LOCKS_EXCLUDED(mu_);

  /// Registrations accepted so far.
  int64_t count() const ABSL_LOCKS_EXCLUDED(mu_);
  /// Whether the plan stream broke and the reader is still trying to
  /// register again (it has neither succeeded nor given up).
  bool reconnecting() const ABSL_LOCKS_EXCLUDED(mu_);
  /// Blocks until a registration after the first `seen` was accepted, no
  /// reconnection is under way, `Abandon` was called or `timeout` passed;
  /// returns whether one was accepted.
  bool AwaitRegisteredAgain(int64_t seen, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);

  /// The first answer accepted. Set once, before any concurrent use.
  const v1::RegisterResponse& first() const { return first_; }

 private:
  v1::Scheduler::StubInterface* const stub_;
  const RegistrationOptions options_;
  v1::RegisterResponse first_;

  mutable absl::Mutex mu_;
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
  bool reconnecting_ ABSL_GUARDED_BY(mu_) = false;
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_REGISTRATION_H_
