#include "worker_agent/profile_responder.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/backoff.h"
#include "common/grpc_status.h"
#include "common/rpc_timeout.h"
#include "common/status_macros.h"
#include "grpcpp/client_context.h"

namespace dcp {

ProfileResponder::ProfileResponder(v1::Scheduler::StubInterface* stub,
                                   ProfileResponderOptions options)
    : stub_(stub), options_(std::move(options)) {}

void ProfileResponder::Handle(const v1::ProfileRequest& request) {
  const int64_t epoch = request.epoch();
  const int rank = options_.rank;
  GroupResolver groups =
      [this, epoch,
       rank](const v1::CommGroup& group)
      -> absl::StatusOr<c10d::ProcessGroup*> {
    std::vector<int> ranks(group.ranks().begin(), group.ranks().end());
    if (ranks.size() < 2 || group.rendezvous_prefix().empty() ||
        std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("profile group [", absl::StrJoin(ranks, ","),
                       "] needs two or more ranks including ", rank,
                       " and a rendezvous prefix"));
    }
    ASSIGN_OR_RETURN(CommKey key, CommKey::Make(std::move(ranks), epoch));
    return options_.form_group(key, group.rendezvous_prefix());
  };
  absl::StatusOr<v1::Profile> profile = options_.run(request, groups);
  absl::Status status = profile.status();
  if (profile.ok()) {
    v1::ProfileReport report;
    report.set_rank(rank);
    report.set_epoch(epoch);
    *report.mutable_profile() = *std::move(profile);
    status = Send(report);
  }
  absl::MutexLock lock(&mu_);
  ++(status.ok() ? sent_ : failures_);
}

absl::Status ProfileResponder::Send(const v1::ProfileReport& report) {
  absl::Status status;
  Backoff backoff(options_.initial_backoff, options_.max_backoff);
  constexpr int kAttempts = 3;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    {
      absl::MutexLock lock(&mu_);
      if (attempt > 0) {
        options_.clock->AwaitWithTimeout(&mu_, absl::Condition(&cancelled_),
                                         backoff.Next());
      }
      if (cancelled_) return absl::UnavailableError("the agent is shut down");
    }
    grpc::ClientContext context;
    SetRpcTimeout(context, options_.rpc_timeout);
    v1::ReportAck ack;
    status = FromGrpcStatus(stub_->ReportProfile(&context, report, &ack));
    if (!absl::IsUnavailable(status) && !absl::IsDeadlineExceeded(status)) {
      return status;
    }
  }
  return status;
}

void ProfileResponder::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
}

int64_t ProfileResponder::sent() const {
  absl::MutexLock lock(&mu_);
  return sent_;
}

int64_t ProfileResponder::failures() const {
  absl::MutexLock lock(&mu_);
  return failures_;
}

}  // namespace dcp
