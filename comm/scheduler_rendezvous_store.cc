#include "comm/scheduler_rendezvous_store.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/backoff.h"
#include "common/grpc_status.h"
#include "common/rpc_timeout.h"
#include "proto/scheduler_service.grpc.pb.h"

namespace dcp {
namespace {

// The gRPC status of `what`, with `what` in front of its message.
absl::Status FromGrpc(const grpc::Status& status, absl::string_view what) {
  absl::Status converted = FromGrpcStatus(status);
  if (converted.ok()) return converted;
  return absl::Status(converted.code(),
                      absl::StrCat(what, ": ", converted.message()));
}

// Sleeps until `clock` reads `until`: a wait on a condition that never holds.
void SleepUntil(Clock& clock, absl::Time until) {
  absl::Mutex mu;
  static constexpr bool kNever = false;
  absl::MutexLock lock(&mu);
  clock.AwaitWithDeadline(&mu, absl::Condition(&kNever), until);
}

}  // namespace

struct SchedulerRendezvousStore::Impl {
  std::unique_ptr<v1::Scheduler::Stub> stub;
  Options options;
};

absl::StatusOr<std::unique_ptr<SchedulerRendezvousStore>>
SchedulerRendezvousStore::Create(
    std::shared_ptr<grpc::ChannelInterface> channel, Options options) {
  if (channel == nullptr) {
    return absl::InvalidArgumentError("SchedulerRendezvousStore: null channel");
  }
  if (options.initial_backoff <= absl::ZeroDuration() ||
      options.max_backoff < options.initial_backoff ||
      options.rpc_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "SchedulerRendezvousStore: backoffs and rpc_timeout must be positive "
        "and max_backoff >= initial_backoff");
  }
  if (options.clock == nullptr) options.clock = RealClock::Default();
  auto impl = std::make_unique<Impl>();
  impl->stub = v1::Scheduler::NewStub(channel);
  impl->options = std::move(options);
  return std::unique_ptr<SchedulerRendezvousStore>(
      new SchedulerRendezvousStore(std::move(impl)));
}

SchedulerRendezvousStore::SchedulerRendezvousStore(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

SchedulerRendezvousStore::~SchedulerRendezvousStore() = default;

absl::Status SchedulerRendezvousStore::Set(absl::string_view key,
                                           absl::string_view value) {
  v1::StoreSetRequest request;
  request.set_session_id(impl_->options.session_id);
  request.set_key(std::string(key));
  request.set_value(std::string(value));
  Clock& clock = *impl_->options.clock;
  const absl::Time deadline = clock.Now() + impl_->options.set_retry_timeout;
  Backoff backoff(impl_->options.initial_backoff, impl_->options.max_backoff);
  while (true) {
    v1::StoreSetResponse response;
    grpc::ClientContext context;
    SetRpcTimeout(context, impl_->options.rpc_timeout);
    const grpc::Status status =
        impl_->stub->StoreSet(&context, request, &response);
    const bool retry =
        status.error_code() == grpc::StatusCode::UNAVAILABLE ||
        status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!retry || clock.Now() >= deadline) {
      return FromGrpc(status, absl::StrCat("StoreSet ", key));
    }
    // The scheduler is away (restarting): the same Set again, once it is
    // back.
    SleepUntil(clock, std::min(clock.Now() + backoff.Next(), deadline));
  }
}

absl::StatusOr<std::vector<std::string>> SchedulerRendezvousStore::Wait(
    absl::Span<const std::string> keys, absl::Duration timeout) {
  v1::StoreGetRequest request;
  request.set_session_id(impl_->options.session_id);
  for (const std::string& key : keys) request.add_keys(key);

  Clock& clock = *impl_->options.clock;
  const absl::Time deadline = clock.Now() + timeout;
  Backoff backoff(impl_->options.initial_backoff, impl_->options.max_backoff);
  absl::Status last = absl::NotFoundError("not polled yet");
  while (true) {
    const absl::Duration left = deadline - clock.Now();
    if (left <= absl::ZeroDuration()) break;
    v1::StoreGetResponse response;
    grpc::ClientContext context;
    SetRpcTimeout(context, std::min(left, impl_->options.rpc_timeout));
    grpc::Status status = impl_->stub->StoreGet(&context, request, &response);
    if (status.ok()) {
      if (response.values_size() != static_cast<int>(keys.size())) {
        return absl::InternalError(
            absl::StrCat("StoreGet returned ", response.values_size(),
                         " values for ", keys.size(), " keys"));
      }
      return std::vector<std::string>(response.values().begin(),
                                      response.values().end());
    }
    last = FromGrpc(status, "StoreGet");
    switch (status.error_code()) {
      case grpc::StatusCode::NOT_FOUND:
      case grpc::StatusCode::UNAVAILABLE:
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        break;  // Not all set yet, or the scheduler is briefly away: poll.
      default:
        return last;
    }
    SleepUntil(clock, std::min(clock.Now() + backoff.Next(), deadline));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "rendezvous keys not all set after ", absl::FormatDuration(timeout), " (",
      absl::StrJoin(keys, ", "), "); last poll: ", last.ToString()));
}

}  // namespace dcp
