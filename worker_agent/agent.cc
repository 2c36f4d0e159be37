#include "worker_agent/agent.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "proto/scheduler_service.grpc.pb.h"
#include "comm/communicator_cache.h"
#include "comm/gloo_communicator.h"
#include "worker_agent/report_stream.h"
#include "comm/scheduler_rendezvous_store.h"

namespace dcp {
namespace {

std::chrono::system_clock::time_point Deadline(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
}

bool Newer(int64_t epoch, int64_t step, int64_t than_epoch, int64_t than_step) {
  return epoch > than_epoch || (epoch == than_epoch && step > than_step);
}

absl::Status CheckOptions(const AgentOptions& o) {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("agent options: ", what));
  };
  if (o.scheduler_address.empty()) return bad("scheduler_address is empty");
  if (o.rank < 0) return bad(absl::StrCat("rank must be >= 0, not ", o.rank));
  if (o.world_size < 0) return bad("world_size must be >= 0 (0 = any)");
  if (o.world_size > 0 && o.rank >= o.world_size) {
    return bad(absl::StrCat("rank ", o.rank, " is outside the world of ",
                            o.world_size));
  }
  if (o.prefetch_depth < 1) return bad("prefetch_depth must be at least 1");
  if (o.max_reconnect_attempts < 0) {
    return bad("max_reconnect_attempts must be >= 0");
  }
  if (o.rendezvous_timeout <= absl::ZeroDuration() ||
      o.connect_timeout <= absl::ZeroDuration() ||
      o.rpc_timeout <= absl::ZeroDuration() ||
      o.initial_backoff <= absl::ZeroDuration() ||
      o.max_backoff < o.initial_backoff) {
    return bad(
        "timeouts and backoffs must be positive and max_backoff >= "
        "initial_backoff");
  }
  return absl::OkStatus();
}

}  // namespace

struct Agent::Stub {
  std::unique_ptr<v1::Scheduler::Stub> stub;
};

/// Passes through to the scheduler's store, but waits in short slices so
/// that `Cancel` ends every wait within one slice (CANCELLED).
class Agent::CancellableStore final : public RendezvousStoreInterface {
 public:
  explicit CancellableStore(RendezvousStoreInterface* store) : store_(store) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override {
    RETURN_IF_ERROR(Check());
    return store_->Set(key, value);
  }

  absl::StatusOr<std::vector<std::string>> Wait(
      absl::Span<const std::string> keys, absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      RETURN_IF_ERROR(Check());
      const absl::Duration left = deadline - absl::Now();
      absl::StatusOr<std::vector<std::string>> values =
          store_->Wait(keys, std::min(left, kSlice));
      if (values.ok() || !absl::IsDeadlineExceeded(values.status()) ||
          left <= kSlice) {
        return values;
      }
    }
  }

  void Cancel() { cancelled_ = true; }

 private:
  static constexpr absl::Duration kSlice = absl::Milliseconds(200);

  absl::Status Check() const {
    if (cancelled_.load()) {
      return absl::CancelledError("the agent is shutting down");
    }
    return absl::OkStatus();
  }

  RendezvousStoreInterface* const store_;
  std::atomic<bool> cancelled_{false};
};

struct Agent::AsyncCalls {
  absl::Mutex mu;
  int in_flight ABSL_GUARDED_BY(mu) = 0;
};

Agent::Agent(AgentOptions options)
    : options_(std::move(options)),
      stub_(std::make_unique<Stub>()),
      async_calls_(std::make_shared<AsyncCalls>()) {}

absl::StatusOr<std::unique_ptr<Agent>> Agent::Start(AgentOptions options) {
  RETURN_IF_ERROR(CheckOptions(options));
  auto agent = absl::WrapUnique(new Agent(std::move(options)));
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetMaxReceiveMessageSize(64 << 20);
  agent->channel_ =
      grpc::CreateCustomChannel(agent->options_.scheduler_address,
                                grpc::InsecureChannelCredentials(), args);
  agent->stub_->stub = v1::Scheduler::NewStub(agent->channel_);

  ASSIGN_OR_RETURN(agent->registration_,
                   agent->Register(agent->options_.connect_timeout,
                                   /*wait_for_ready=*/true));
  {
    absl::MutexLock lock(&agent->mu_);
    agent->registrations_ = 1;
  }
  SchedulerRendezvousStore::Options store_options;
  store_options.session_id = agent->registration_.session_id();
  ASSIGN_OR_RETURN(
      agent->scheduler_store_,
      SchedulerRendezvousStore::Create(agent->channel_, store_options));
  agent->store_ =
      std::make_unique<CancellableStore>(agent->scheduler_store_.get());

  Agent* raw = agent.get();
  agent->cache_ = std::make_unique<CommunicatorCache>(
      [raw](const CommKey& key, const std::string& prefix)
          -> absl::StatusOr<std::unique_ptr<Communicator>> {
        const AgentOptions& o = raw->options_;
        if (o.make_communicator) {
          return o.make_communicator(key, o.rank, prefix, raw->store_.get());
        }
        GlooCommunicator::Options gloo;
        gloo.hostname = o.gloo_hostname;
        gloo.timeout = o.rendezvous_timeout;
        return GlooCommunicator::Create(key, o.rank, prefix, raw->store_.get(),
                                        gloo);
      });
  agent->reader_thread_ = std::thread([raw] { raw->ReaderLoop(); });
  agent->waiter_thread_ = std::thread([raw] { raw->WaiterLoop(); });
  return agent;
}

Agent::~Agent() {
  Shutdown();
  // Waits for a warm-up in progress (its rendezvous was cancelled; a
  // connection under way ends by the rendezvous timeout) and destroys the
  // communicators before the store they were formed through.
  cache_.reset();
}

void Agent::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (!shutdown_) {
      shutdown_ = true;
      if (stream_context_ != nullptr) stream_context_->TryCancel();
    }
  }
  // Formations under way finish first (their peers are connecting to us);
  // then whatever still waits for peers is cancelled.
  if (cache_ != nullptr) cache_->Quiesce(options_.shutdown_formation_grace);
  if (store_ != nullptr) store_->Cancel();
  absl::MutexLock lock(&join_mu_);
  // Not from the agent's own threads (a callback must not shut it down):
  // they would wait for themselves.
  const std::thread::id self = std::this_thread::get_id();
  if (reader_thread_.joinable() && reader_thread_.get_id() != self) {
    reader_thread_.join();
  }
  if (waiter_thread_.joinable() && waiter_thread_.get_id() != self) {
    waiter_thread_.join();
  }
  if (cache_ != nullptr) cache_->AbortAll();
  // Unanswered reports on the streams fail over to ReportTimings, which
  // now refuses at once (shut down).
  CloseReportStreams();
  // Report callbacks touch this agent; each ends by its RPC deadline.
  AsyncCalls& calls = *async_calls_;
  absl::MutexLock wait(&calls.mu);
  auto idle = [&calls]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(calls.mu) {
    return calls.in_flight == 0;
  };
  calls.mu.Await(absl::Condition(&idle));
}

// ------------------------------------------------------------ registration

absl::StatusOr<v1::RegisterResponse> Agent::Register(absl::Duration timeout,
                                                     bool wait_for_ready) {
  v1::RegisterRequest request;
  request.set_rank(options_.rank);
  request.set_host(options_.host);
  request.set_gpu(options_.gpu);
  request.set_pid(static_cast<int64_t>(getpid()));
  request.set_world_size(options_.world_size);
  v1::RegisterResponse response;
  grpc::ClientContext context;
  context.set_deadline(Deadline(timeout));
  context.set_wait_for_ready(wait_for_ready);
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::UnavailableError("the agent is shut down");
    stream_context_ = &context;
  }
  const grpc::Status status =
      stub_->stub->Register(&context, request, &response);
  {
    absl::MutexLock lock(&mu_);
    stream_context_ = nullptr;
  }
  if (!status.ok()) {
    const absl::Status s = FromGrpcStatus(status);
    return absl::Status(
        s.code(), absl::StrCat("registering rank ", options_.rank, " with '",
                               options_.scheduler_address, "': ", s.message()));
  }
  return response;
}

// ------------------------------------------------------------- plan stream

bool Agent::HasRoom() const {
  return shutdown_ || static_cast<int>(queue_.size()) < options_.prefetch_depth;
}

void Agent::Fail(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (failure_.ok()) failure_ = std::move(status);
}

void Agent::ReaderLoop() {
  int64_t from_step = registration_.next_step();
  int failures = 0;
  absl::Duration backoff = options_.initial_backoff;
  absl::Status last;
  while (true) {
    bool got_message = false;
    const absl::Status status = ReadStream(from_step, &got_message);
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_ || drained_) return;
    }
    if (got_message) {
      failures = 0;
      backoff = options_.initial_backoff;
    }
    if (absl::IsAborted(status)) {
      Fail(absl::FailedPreconditionError(
          absl::StrCat("the plan stream of rank ", options_.rank,
                       " was taken over (another agent registered the rank?): ",
                       status.message())));
      return;
    }
    if (absl::IsInvalidArgument(status)) {
      Fail(status);
      return;
    }
    last = status.ok() ? absl::UnavailableError(
                             "the plan stream ended without a drain marker")
                       : status;
    {
      absl::MutexLock lock(&mu_);
      reconnecting_ = true;
    }

    // Reconnect: back off, register again, resume after the last step.
    while (true) {
      if (++failures > options_.max_reconnect_attempts) {
        Fail(absl::UnavailableError(absl::StrCat(
            "the plan stream of rank ", options_.rank, " is lost (",
            last.ToString(), "); gave up after ",
            options_.max_reconnect_attempts, " reconnection attempts")));
        return;
      }
      {
        absl::MutexLock lock(&mu_);
        mu_.AwaitWithTimeout(absl::Condition(&shutdown_), backoff);
        if (shutdown_) return;
      }
      backoff = std::min(backoff * 2, options_.max_backoff);
      absl::StatusOr<v1::RegisterResponse> again =
          Register(options_.rpc_timeout, /*wait_for_ready=*/false);
      if (!again.ok()) {
        if (absl::IsInvalidArgument(again.status())) {
          Fail(again.status());
          return;
        }
        last = again.status();
        continue;
      }
      if (again->session_id() != registration_.session_id()) {
        Fail(absl::FailedPreconditionError(absl::StrCat(
            "the scheduler restarted (session '", registration_.session_id(),
            "' is now '", again->session_id(),
            "'): its plans no longer continue this job's; restart the "
            "agents")));
        return;
      }
      absl::MutexLock lock(&mu_);
      ++stats_.reconnects;
      ++registrations_;
      reconnecting_ = false;
      from_step = std::max(again->next_step(), last_step_ + 1);
      break;
    }
  }
}

absl::Status Agent::ReadStream(int64_t from_step, bool* got_message) {
  grpc::ClientContext context;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::UnavailableError("the agent is shut down");
    stream_context_ = &context;
  }
  v1::StreamPlansRequest request;
  request.set_rank(options_.rank);
  request.set_session_id(registration_.session_id());
  request.set_from_step(from_step);
  std::unique_ptr<grpc::ClientReader<v1::PlanUpdate>> reader =
      stub_->stub->StreamPlans(&context, request);
  v1::PlanUpdate update;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &Agent::HasRoom));
      if (shutdown_) break;  // Shutdown cancelled the context.
    }
    if (!reader->Read(&update)) break;
    *got_message = true;
    switch (update.update_case()) {
      case v1::PlanUpdate::kStep:
        HandleStep(std::move(*update.mutable_step()));
        break;
      case v1::PlanUpdate::kDrain: {
        absl::MutexLock lock(&mu_);
        drained_ = true;
        break;
      }
      case v1::PlanUpdate::kProfile:
        HandleProfile(update.profile());
        break;
      default:
        break;
    }
  }
  const grpc::Status status = reader->Finish();
  absl::MutexLock lock(&mu_);
  stream_context_ = nullptr;
  return FromGrpcStatus(status);
}

void Agent::HandleStep(v1::RankStep step) {
  std::vector<CommGroupSpec> groups;
  {
    absl::MutexLock lock(&mu_);
    if (!Newer(step.epoch(), step.step(), last_epoch_, last_step_)) {
      ++stats_.stale_dropped;
      return;
    }
    last_epoch_ = step.epoch();
    last_step_ = step.step();
    for (const v1::CommGroup& group : step.groups()) {
      if (group.ranks_size() < 2) continue;
      absl::StatusOr<CommKey> key = CommKey::Make(
          std::vector<int>(group.ranks().begin(), group.ranks().end()),
          step.epoch());
      // A malformed group is reported by `Group` when the step uses it.
      if (key.ok()) {
        groups.push_back(
            CommGroupSpec{*std::move(key), group.rendezvous_prefix()});
      }
    }
    queue_.push_back(std::move(step));
    ++stats_.steps_received;
  }
  // Steps arrive in order on this one thread, so every member queues the
  // groups it shares with another in the same order (the plan's).
  if (!groups.empty()) cache_->Warm(groups).IgnoreError();
}

void Agent::HandleProfile(const v1::ProfileRequest& request) {
  if (!options_.run_profile) return;
  const int64_t epoch = request.epoch();
  GroupResolver groups =
      [this,
       epoch](const v1::CommGroup& group) -> absl::StatusOr<Communicator*> {
    std::vector<int> ranks(group.ranks().begin(), group.ranks().end());
    if (ranks.size() < 2 || group.rendezvous_prefix().empty() ||
        std::find(ranks.begin(), ranks.end(), options_.rank) == ranks.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("profile group [", absl::StrJoin(ranks, ","),
                       "] needs two or more ranks including ", options_.rank,
                       " and a rendezvous prefix"));
    }
    ASSIGN_OR_RETURN(CommKey key, CommKey::Make(std::move(ranks), epoch));
    return cache_->Get(key, group.rendezvous_prefix());
  };
  absl::StatusOr<v1::Profile> profile =
      options_.run_profile(*this, request, groups);
  absl::Status status = profile.status();
  if (profile.ok()) {
    v1::ProfileReport report;
    report.set_rank(options_.rank);
    report.set_epoch(epoch);
    *report.mutable_profile() = *std::move(profile);
    status = SendProfile(report);
  }
  absl::MutexLock lock(&mu_);
  ++(status.ok() ? stats_.profiles_sent : stats_.profile_failures);
}

absl::Status Agent::SendProfile(const v1::ProfileReport& report) {
  absl::Status status;
  absl::Duration backoff = options_.initial_backoff;
  constexpr int kAttempts = 3;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    if (attempt > 0) {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&shutdown_), backoff);
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_) return absl::UnavailableError("the agent is shut down");
    }
    grpc::ClientContext context;
    context.set_deadline(Deadline(options_.rpc_timeout));
    v1::ReportAck ack;
    status = FromGrpcStatus(stub_->stub->ReportProfile(&context, report, &ack));
    if (!absl::IsUnavailable(status) && !absl::IsDeadlineExceeded(status)) {
      return status;
    }
  }
  return status;
}

// ----------------------------------------------------------------- handing

std::optional<absl::StatusOr<NextStepResult>> Agent::TakeLocked(
    int64_t after_step) {
  if (shutdown_) return absl::UnavailableError("the agent is shut down");
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

absl::StatusOr<NextStepResult> Agent::NextStep(int64_t after_step,
                                               absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  struct Ready {
    const Agent* agent;
    int64_t after_step;
  } ready{this, after_step};
  auto answerable = [](Ready* r) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const Agent& a = *r->agent;
    if (a.shutdown_ || a.drained_ || !a.failure_.ok()) return true;
    if (a.delivered_.has_value() && a.delivered_->step() > r->after_step) {
      return true;
    }
    return !a.queue_.empty() && a.queue_.back().step() > r->after_step;
  };
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithDeadline(absl::Condition(+answerable, &ready), deadline);
  if (std::optional<absl::StatusOr<NextStepResult>> r = TakeLocked(after_step);
      r.has_value()) {
    return *std::move(r);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("rank ", options_.rank, ": no step after ", after_step,
                   " arrived within ", absl::FormatDuration(timeout)));
}

int64_t Agent::NextStepAsync(int64_t after_step, absl::Time deadline,
                             NextStepCallback done) {
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

bool Agent::CancelNextStep(int64_t id) {
  absl::MutexLock lock(&mu_);
  return waiters_.erase(id) > 0;
}

bool Agent::ShouldWakeWaiterLoop() const {
  if (shutdown_ || waiters_generation_ != seen_generation_) return true;
  if (waiters_.empty()) return false;
  if (drained_ || !failure_.ok()) return true;
  for (const auto& [id, waiter] : waiters_) {
    if (delivered_.has_value() && delivered_->step() > waiter.after_step) {
      return true;
    }
    if (!queue_.empty() && queue_.back().step() > waiter.after_step) {
      return true;
    }
  }
  return false;
}

void Agent::WaiterLoop() {
  while (true) {
    std::vector<std::pair<NextStepCallback, absl::StatusOr<NextStepResult>>>
        answers;
    bool exit = false;
    {
      absl::MutexLock lock(&mu_);
      absl::Time next = absl::InfiniteFuture();
      for (const auto& [id, waiter] : waiters_) {
        next = std::min(next, waiter.deadline);
      }
      mu_.AwaitWithDeadline(absl::Condition(this, &Agent::ShouldWakeWaiterLoop),
                            next);
      seen_generation_ = waiters_generation_;
      const absl::Time now = absl::Now();
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
      exit = shutdown_;
    }
    for (auto& [done, answer] : answers) done(std::move(answer));
    if (exit) return;
  }
}

absl::Status Agent::WaitForDrainDelivered(absl::Duration timeout) {
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return drain_delivered_ || shutdown_ || !failure_.ok();
  };
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(&done), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("rank ", options_.rank, ": the job did not drain within ",
                     absl::FormatDuration(timeout)));
  }
  if (drain_delivered_) return absl::OkStatus();
  if (!failure_.ok()) return failure_;
  return absl::UnavailableError("the agent is shut down");
}

// ------------------------------------------------------ groups and reports

absl::StatusOr<Communicator*> Agent::Group(const v1::CommGroup& group) {
  std::vector<int> ranks(group.ranks().begin(), group.ranks().end());
  if (ranks.size() < 2 ||
      std::find(ranks.begin(), ranks.end(), options_.rank) == ranks.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", group.id(), " [", absl::StrJoin(ranks, ","),
                     "] needs at least two ranks, including this agent's rank ",
                     options_.rank));
  }
  if (group.rendezvous_prefix().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", group.id(),
                     " has no rendezvous prefix: plans must come from a "
                     "scheduler to form communicators"));
  }
  ASSIGN_OR_RETURN(const int64_t epoch, GroupEpoch());
  ASSIGN_OR_RETURN(CommKey key, CommKey::Make(std::move(ranks), epoch));
  return cache_->Get(key, group.rendezvous_prefix());
}

absl::StatusOr<int64_t> Agent::GroupEpoch() const {
  absl::MutexLock lock(&mu_);
  if (shutdown_) return absl::UnavailableError("the agent is shut down");
  return delivered_.has_value() ? delivered_->epoch() : registration_.epoch();
}

absl::StatusOr<Communicator*> Agent::DataParallelGroup() {
  const int world = registration_.world_size();
  if (world < 2) {
    return absl::FailedPreconditionError(
        "a world of one rank has no data-parallel group");
  }
  ASSIGN_OR_RETURN(const int64_t epoch, GroupEpoch());
  std::vector<int> ranks(world);
  std::iota(ranks.begin(), ranks.end(), 0);
  ASSIGN_OR_RETURN(CommKey key, CommKey::Make(std::move(ranks), epoch,
                                              CommPurpose::kDataParallel));
  return cache_->Get(key, absl::StrCat(registration_.session_id(), "/e",
                                       epoch, "/dp"));
}

std::shared_ptr<ReportStream> Agent::CurrentReportStream() {
  if (!options_.report_stream) return nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return nullptr;
    if (!report_streams_.empty() && !report_streams_.back()->ended()) {
      return report_streams_.back();
    }
  }
  // Opened outside the lock: gRPC may run the call's reactions at once.
  std::shared_ptr<ReportStream> opened = ReportStream::Open(stub_->stub.get());
  absl::MutexLock lock(&mu_);
  // Streams whose calls are over need no waiting for at shutdown.
  report_streams_.erase(
      std::remove_if(report_streams_.begin(), report_streams_.end(),
                     [](const std::shared_ptr<ReportStream>& s) {
                       return s->AwaitDone(absl::ZeroDuration());
                     }),
      report_streams_.end());
  report_streams_.push_back(opened);
  if (shutdown_) {
    // Shutdown may have closed the others already: this one is never used.
    opened->Cancel();
    return nullptr;
  }
  return opened;
}

void Agent::CloseReportStreams() {
  std::vector<std::shared_ptr<ReportStream>> streams;
  {
    absl::MutexLock lock(&mu_);
    streams = report_streams_;
  }
  // A half-close lets the scheduler answer what it read; then cancel.
  for (const std::shared_ptr<ReportStream>& s : streams) s->Close();
  for (const std::shared_ptr<ReportStream>& s : streams) {
    if (!s->AwaitDone(options_.rpc_timeout)) {
      s->Cancel();
      s->AwaitDone(absl::InfiniteDuration());
    }
  }
}

std::optional<absl::Status> Agent::ReportOnStream(
    const v1::TimingReport& report) {
  std::shared_ptr<ReportStream> stream = CurrentReportStream();
  if (stream == nullptr) return std::nullopt;
  struct Answer {
    absl::Notification done;
    absl::Status status;
  };
  auto answer = std::make_shared<Answer>();
  if (!stream->Send(report, [answer](absl::Status status) {
        answer->status = std::move(status);
        answer->done.Notify();
      })) {
    return std::nullopt;
  }
  if (!answer->done.WaitForNotificationWithTimeout(options_.rpc_timeout)) {
    return std::nullopt;  // ReportTimings: ALREADY_EXISTS if it got there.
  }
  return SettleStreamAnswer(answer->status, report.step());
}

std::optional<absl::Status> Agent::SettleStreamAnswer(
    const absl::Status& answer, int64_t step) {
  if (answer.ok() || absl::IsAlreadyExists(answer)) {
    absl::MutexLock lock(&mu_);
    ++stats_.reports_sent;
    return absl::OkStatus();
  }
  if (absl::IsInvalidArgument(answer)) {
    return absl::Status(answer.code(),
                        absl::StrCat("reporting timings of step ", step, ": ",
                                     answer.message()));
  }
  return std::nullopt;
}

absl::Status Agent::ReportTimings(const v1::TimingReport& report) {
  if (report.rank() != options_.rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("agent of rank ", options_.rank,
                     " cannot send a report of rank ", report.rank()));
  }
  if (std::optional<absl::Status> streamed = ReportOnStream(report);
      streamed.has_value()) {
    return *streamed;
  }
  // The stream could not deliver it: unary calls, with retries.
  const bool fallback = options_.report_stream;
  absl::Duration backoff = options_.initial_backoff;
  absl::Status status;
  constexpr int kAttempts = 5;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    int64_t registrations = 0;
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_) return absl::UnavailableError("the agent is shut down");
      if (attempt > 0) {
        mu_.AwaitWithTimeout(absl::Condition(&shutdown_), backoff);
      }
      registrations = registrations_;
    }
    backoff = std::min(backoff * 2, options_.max_backoff);
    grpc::ClientContext context;
    context.set_deadline(Deadline(options_.rpc_timeout));
    v1::ReportAck ack;
    status = FromGrpcStatus(stub_->stub->ReportTimings(&context, report, &ack));
    if (status.ok() || absl::IsAlreadyExists(status)) {
      absl::MutexLock lock(&mu_);
      ++stats_.reports_sent;
      if (fallback) ++stats_.report_fallbacks;
      return absl::OkStatus();
    }
    if (absl::IsFailedPrecondition(status)) {
      // A scheduler that came back does not know this rank before the
      // reader registers again: wait for that, then retry.
      auto settled = [this,
                      registrations]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !reconnecting_ || registrations_ != registrations || shutdown_ ||
               !failure_.ok();
      };
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&settled), options_.rpc_timeout);
      if (registrations_ == registrations) break;
      continue;
    }
    if (!absl::IsUnavailable(status) && !absl::IsDeadlineExceeded(status)) {
      break;
    }
  }
  return absl::Status(status.code(),
                      absl::StrCat("reporting timings of step ", report.step(),
                                   ": ", status.message()));
}

void Agent::ReportTimingsAsync(const v1::TimingReport& report,
                               std::function<void(absl::Status)> done) {
  if (report.rank() != options_.rank) {
    done(absl::InvalidArgumentError(
        absl::StrCat("agent of rank ", options_.rank,
                     " cannot send a report of rank ", report.rank())));
    return;
  }
  std::shared_ptr<ReportStream> stream = CurrentReportStream();
  if (stream != nullptr) {
    {
      absl::MutexLock count(&async_calls_->mu);
      ++async_calls_->in_flight;
    }
    // Shared with the answer: `done` runs in exactly one place.
    auto pending = std::make_shared<std::function<void(absl::Status)>>(done);
    const bool sent = stream->Send(
        report, [this, report, pending, calls = async_calls_](
                    absl::Status status) {
          if (std::optional<absl::Status> settled =
                  SettleStreamAnswer(status, report.step());
              settled.has_value()) {
            (*pending)(*std::move(settled));
          } else {
            // Not delivered (or a stale registration): one unary call.
            ReportUnaryAsync(report, std::move(*pending));
          }
          // Last: once the count is zero the agent may be destroyed.
          absl::MutexLock lock(&calls->mu);
          --calls->in_flight;
        });
    if (sent) return;
    absl::MutexLock count(&async_calls_->mu);
    --async_calls_->in_flight;
  }
  ReportUnaryAsync(report, std::move(done));
}

void Agent::ReportUnaryAsync(const v1::TimingReport& report,
                             std::function<void(absl::Status)> done) {
  const bool fallback = options_.report_stream;
  struct Call {
    grpc::ClientContext context;
    v1::TimingReport report;
    v1::ReportAck ack;
  };
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) {
      done(absl::UnavailableError("the agent is shut down"));
      return;
    }
    absl::MutexLock count(&async_calls_->mu);
    ++async_calls_->in_flight;
  }
  auto call = std::make_shared<Call>();
  call->report = report;
  call->context.set_deadline(Deadline(options_.rpc_timeout));
  stub_->stub->async()->ReportTimings(
      &call->context, &call->report, &call->ack,
      [this, call, fallback, calls = async_calls_,
       done = std::move(done)](grpc::Status grpc_status) mutable {
        absl::Status status = FromGrpcStatus(grpc_status);
        const bool accepted = status.ok() || absl::IsAlreadyExists(status);
        if (!accepted) {
          status = absl::Status(
              status.code(),
              absl::StrCat("reporting timings of step ", call->report.step(),
                           ": ", status.message()));
        }
        {
          absl::MutexLock lock(&mu_);
          if (accepted) {
            ++stats_.reports_sent;
            if (fallback) ++stats_.report_fallbacks;
          }
        }
        done(accepted ? absl::OkStatus() : status);
        // The call's context holds a reference to the channel: dropped here,
        // while the agent (which holds another) is surely alive, not when
        // gRPC destroys this callback on its own thread.
        call.reset();
        // Last: once the count is zero the agent may be destroyed.
        absl::MutexLock lock(&calls->mu);
        --calls->in_flight;
      });
}

AgentStats Agent::Stats() const {
  AgentStats stats;
  {
    absl::MutexLock lock(&mu_);
    stats = stats_;
  }
  const CommunicatorCache::Stats cache = cache_->stats();
  stats.cache_hits = cache.hits;
  stats.cache_misses = cache.misses;
  stats.groups_warmed = cache.warmed;
  stats.group_failures = cache.build_failures;
  stats.groups_live = cache.live;
  return stats;
}

}  // namespace dcp
