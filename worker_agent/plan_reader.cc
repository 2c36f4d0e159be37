#include "worker_agent/plan_reader.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "grpcpp/client_context.h"
#include "common/rpc_timeout.h"

namespace dcp {

PlanReader::PlanReader(v1::Scheduler::StubInterface* stub,
                       Registration* registration, StepMailbox* mailbox,
                       PlanReaderOptions options)
    : stub_(stub),
      registration_(registration),
      mailbox_(mailbox),
      options_(std::move(options)),
      clock_(options_.clock) {}

PlanReader::~PlanReader() {
  Cancel();
  Join();
}

void PlanReader::Start(int64_t from_step) {
  thread_ = std::thread([this, from_step] { Loop(from_step); });
}

void PlanReader::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (context_ != nullptr) context_->TryCancel();
}

void PlanReader::Join() {
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) {
    thread_.join();
  }
}

int64_t PlanReader::reconnects() const {
  absl::MutexLock lock(&mu_);
  return reconnects_;
}

bool PlanReader::Attach(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return false;
  context_ = context;
  return true;
}

void PlanReader::Detach() {
  absl::MutexLock lock(&mu_);
  context_ = nullptr;
}

void PlanReader::GiveUp(absl::Status status) {
  mailbox_->Fail(std::move(status));
  registration_->Abandon();
}

void PlanReader::Loop(int64_t from_step) {
  int failures = 0;
  Backoff backoff(options_.initial_backoff, options_.max_backoff);
  // When the scheduler was last known reachable: the outage starts there.
  std::optional<absl::Time> broke;
  while (true) {
    bool got_message = false;
    const absl::Status status = ReadStream(from_step, &got_message);
    {
      absl::MutexLock lock(&mu_);
      if (cancelled_) return;
    }
    if (mailbox_->drained()) return;
    if (got_message) {
      failures = 0;
      backoff.Reset();
      broke.reset();
    }
    if (!broke.has_value()) broke = clock_->Now();
    if (absl::IsAborted(status)) {
      GiveUp(absl::FailedPreconditionError(
          absl::StrCat("the plan stream of rank ", options_.rank,
                       " was taken over (another agent registered the rank?): ",
                       status.message())));
      return;
    }
    if (absl::IsInvalidArgument(status)) {
      GiveUp(status);
      return;
    }
    registration_->Reconnecting();
    std::optional<int64_t> resume = Reconnect(
        status.ok() ? absl::UnavailableError(
                          "the plan stream ended without a drain marker")
                    : status,
        &failures, &backoff, *broke);
    if (!resume.has_value()) return;
    from_step = *resume;
  }
}

std::optional<int64_t> PlanReader::Reconnect(absl::Status last, int* failures,
                                             Backoff* backoff,
                                             absl::Time broke) {
  while (true) {
    const absl::Duration outage = clock_->Now() - broke;
    if (++*failures > options_.max_reconnect_attempts &&
        outage >= options_.max_outage) {
      GiveUp(absl::UnavailableError(absl::StrCat(
          "the plan stream of rank ", options_.rank, " is lost (",
          last.ToString(), "); gave up after ", *failures - 1,
          " reconnection attempts over ", absl::FormatDuration(outage),
          " (max_outage ", absl::FormatDuration(options_.max_outage), ")")));
      return std::nullopt;
    }
    {
      absl::MutexLock lock(&mu_);
      clock_->AwaitWithTimeout(&mu_, absl::Condition(&cancelled_),
                               backoff->Next());
      if (cancelled_) return std::nullopt;
    }
    grpc::ClientContext context;
    SetRpcTimeout(context, options_.rpc_timeout);
    if (!Attach(&context)) return std::nullopt;
    absl::StatusOr<v1::RegisterResponse> again =
        registration_->Register(context);
    Detach();
    if (!again.ok()) {
      if (absl::IsInvalidArgument(again.status())) {
        GiveUp(again.status());
        return std::nullopt;
      }
      last = again.status();
      if (options_.on_reconnect_failed) {
        options_.on_reconnect_failed(*failures, last, clock_->Now() - broke);
      }
      continue;
    }
    if (absl::Status accepted = registration_->Accept(*again); !accepted.ok()) {
      GiveUp(std::move(accepted));
      return std::nullopt;
    }
    absl::MutexLock lock(&mu_);
    ++reconnects_;
    return std::max(again->next_step(), mailbox_->last_step() + 1);
  }
}

absl::Status PlanReader::ReadStream(int64_t from_step, bool* got_message) {
  grpc::ClientContext context;
  if (!Attach(&context)) {
    return absl::UnavailableError("the agent is shut down");
  }
  v1::StreamPlansRequest request;
  request.set_rank(options_.rank);
  request.set_session_id(registration_->first().session_id());
  request.set_from_step(from_step);
  std::unique_ptr<grpc::ClientReaderInterface<v1::PlanUpdate>> reader =
      stub_->StreamPlans(&context, request);
  v1::PlanUpdate update;
  // A full mailbox holds the next read back; once closed, `Cancel` has
  // cancelled the call.
  while (mailbox_->AwaitRoom() && reader->Read(&update)) {
    *got_message = true;
    Dispatch(update);
  }
  const grpc::Status status = reader->Finish();
  Detach();
  return FromGrpcStatus(status);
}

void PlanReader::Dispatch(v1::PlanUpdate& update) {
  switch (update.update_case()) {
    case v1::PlanUpdate::kStep: {
      const absl::Time received = options_.clock->Now();
      v1::RankStep& step = *update.mutable_step();
      const int64_t epoch = step.epoch();
      const int64_t planned = step.planned_at_unix_micros();
      const std::vector<v1::CommGroup> groups(step.groups().begin(),
                                              step.groups().end());
      // Steps arrive in order on this one thread, so every member sees the
      // groups it shares with another in the same order (the plan's).
      if (!mailbox_->Put(std::move(step))) break;
      if (planned != 0 && options_.on_step_received) {
        options_.on_step_received(absl::FromUnixMicros(planned), received);
      }
      if (options_.on_groups) options_.on_groups(epoch, groups);
      break;
    }
    case v1::PlanUpdate::kDrain:
      mailbox_->Drain();
      break;
    case v1::PlanUpdate::kProfile:
      if (options_.on_profile) options_.on_profile(update.profile());
      break;
    default:
      break;
  }
}

}  // namespace dcp
