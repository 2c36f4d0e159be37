#include "worker_agent/registration.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "grpcpp/client_context.h"

namespace dcp {

Registration::Registration(v1::Scheduler::StubInterface* stub,
                           RegistrationOptions options)
    : stub_(stub), options_(std::move(options)) {}

absl::StatusOr<v1::RegisterResponse> Registration::Register(
    grpc::ClientContext& context) {
  v1::RegisterRequest request;
  request.set_rank(options_.rank);
  request.set_host(options_.host);
  request.set_gpu(options_.gpu);
  request.set_pid(static_cast<int64_t>(getpid()));
  request.set_world_size(options_.world_size);
  request.set_fixed_world(options_.fixed_world);
  v1::RegisterResponse response;
  const absl::Status s =
      FromGrpcStatus(stub_->Register(&context, request, &response));
  if (!s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("registering rank ", options_.rank, " with '",
                               options_.scheduler_address, "': ", s.message()));
  }
  return response;
}

absl::Status Registration::Accept(const v1::RegisterResponse& response) {
  absl::MutexLock lock(&mu_);
  if (count_ == 0) {
    first_ = response;
  } else if (response.session_id() != first_.session_id()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the scheduler restarted (session '", first_.session_id(), "' is now '",
        response.session_id(),
        "'): its plans no longer continue this job's; restart the agents"));
  }
  ++count_;
  reconnecting_ = false;
  return absl::OkStatus();
}

void Registration::Reconnecting() {
  absl::MutexLock lock(&mu_);
  reconnecting_ = true;
}

void Registration::Abandon() {
  absl::MutexLock lock(&mu_);
  abandoned_ = true;
}

int64_t Registration::count() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

bool Registration::reconnecting() const {
  absl::MutexLock lock(&mu_);
  return reconnecting_ && !abandoned_;
}

bool Registration::AwaitRegisteredAgain(int64_t seen, absl::Duration timeout) {
  auto settled = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !reconnecting_ || count_ != seen || abandoned_;
  };
  absl::MutexLock lock(&mu_);
  options_.clock->AwaitWithTimeout(&mu_, absl::Condition(&settled), timeout);
  return count_ != seen;
}

}  // namespace dcp
