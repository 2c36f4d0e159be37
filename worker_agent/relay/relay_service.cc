#include "worker_agent/relay/relay_service.h"

#include <deque>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "grpcpp/client_context.h"
#include "worker_agent/relay/plan_mux.h"
#include "worker_agent/relay/report_batcher.h"

namespace dcp {
namespace {

absl::Status ShuttingDown() {
  return absl::UnavailableError("the node relay is shutting down");
}

}  // namespace

class LocalPlanStream;
class LocalReportStream;
class UpstreamPlans;
class UpstreamReports;

/// Everything the relay's reactors share, under `mu`.
struct RelayCore {
  RelayCore(v1::Scheduler::Stub* stub, RelayServiceOptions options)
      : stub(stub),
        clock(options.clock != nullptr ? options.clock : RealClock::Default()),
        mux(options.gather_window),
        batcher(options.report_linger) {}

  /// Opens an upstream StreamNodePlans call for `call`.
  void OpenPlans(PlanMux::Upstream call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  /// Cancels upstream plan call `id` (no local call left on it).
  void CancelPlans(int64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  /// Opens the upstream report call if none is open and writes the queued
  /// reports as a batch if they are due and no write is in flight.
  void PumpReports() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  /// The timer thread: opens the gathered subscriptions and writes the
  /// lingering report batch when due.
  void Gather();
  /// The earliest of the gathering's deadline and the queued reports'
  /// (not while a batch write is in flight: its end pumps); InfiniteFuture
  /// when neither.
  absl::Time NextDue() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  /// Whether the timer thread must look again: stopping, or something is
  /// due before what it sleeps until (`sleeping_until`).
  bool TimerWakes() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return stopping || NextDue() < sleeping_until;
  }
  bool UpstreamsDone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return upstream_calls == 0;
  }

  v1::Scheduler::Stub* const stub;
  Clock* const clock;
  absl::Mutex mu;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  PlanMux mux ABSL_GUARDED_BY(mu);
  ReportBatcher batcher ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<int64_t, UpstreamPlans*> upstream_plans
      ABSL_GUARDED_BY(mu);
  UpstreamReports* upstream_reports ABSL_GUARDED_BY(mu) = nullptr;
  absl::flat_hash_map<int64_t, LocalReportStream*> report_streams
      ABSL_GUARDED_BY(mu);
  int64_t next_origin ABSL_GUARDED_BY(mu) = 1;
  /// Upstream reactors not yet done.
  int upstream_calls ABSL_GUARDED_BY(mu) = 0;
  /// What the timer thread sleeps until.
  absl::Time sleeping_until ABSL_GUARDED_BY(mu) = absl::InfiniteFuture();
  std::thread gatherer;
};

/// One local StreamPlans call: a `PlanSink` that writes what the mux sends,
/// one write in flight. State under the core's lock.
class LocalPlanStream final : public grpc::ServerWriteReactor<v1::PlanUpdate>,
                              public PlanSink {
 public:
  explicit LocalPlanStream(RelayCore* core) : core_(core) {}

  void Send(const v1::PlanUpdate& update) override {
    if (ended_) return;
    queue_.push_back(update);
    WriteNext();
  }
  void End(const absl::Status& status) override {
    if (ended_) return;
    ended_ = true;
    end_ = status;
    WriteNext();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&core_->mu);
    writing_ = false;
    queue_.pop_front();
    if (!ok) {
      queue_.clear();
      Leave();
      End(absl::CancelledError("the agent's plan stream broke"));
    }
    WriteNext();
  }
  void OnCancel() override {
    absl::MutexLock lock(&core_->mu);
    // A write in flight fails, and the queue goes with it (OnWriteDone).
    Leave();
    End(absl::CancelledError("the agent cancelled its plan stream"));
  }
  void OnDone() override {
    {
      absl::MutexLock lock(&core_->mu);
      Leave();
    }
    delete this;
  }

 private:
  /// Writes the next queued message, or finishes once ended and written.
  void WriteNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_->mu) {
    if (writing_ || finished_) return;
    if (!queue_.empty()) {
      writing_ = true;
      StartWrite(&queue_.front());
      return;
    }
    if (ended_) {
      finished_ = true;
      Finish(ToGrpcStatus(end_));
    }
  }
  /// Takes this call off the mux (its agent is gone) and cancels the
  /// upstream call it leaves empty.
  void Leave() ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_->mu) {
    if (std::optional<int64_t> empty = core_->mux.Unsubscribe(this)) {
      core_->CancelPlans(*empty);
    }
  }

  RelayCore* const core_;
  std::deque<v1::PlanUpdate> queue_;
  bool writing_ = false;
  bool ended_ = false;
  bool finished_ = false;
  absl::Status end_;
};

/// One upstream StreamNodePlans call; deletes itself when done.
class UpstreamPlans final : public grpc::ClientReadReactor<v1::NodePlanUpdate> {
 public:
  UpstreamPlans(RelayCore* core, PlanMux::Upstream call)
      : core_(core), id_(call.id), request_(std::move(call.request)) {
    core_->stub->async()->StreamNodePlans(&context_, &request_, this);
    StartRead(&update_);
    StartCall();
  }

  void Cancel() { context_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows with the status.
    absl::MutexLock lock(&core_->mu);
    core_->mux.Deliver(id_, update_);
    StartRead(&update_);
  }
  void OnDone(const grpc::Status& status) override {
    {
      absl::MutexLock lock(&core_->mu);
      core_->mux.EndUpstream(id_, FromGrpcStatus(status));
      core_->upstream_plans.erase(id_);
      --core_->upstream_calls;
    }
    delete this;
  }

 private:
  RelayCore* const core_;
  const int64_t id_;
  const v1::NodePlansRequest request_;
  grpc::ClientContext context_;
  v1::NodePlanUpdate update_;
};

/// One local StreamReports call: its reports go to the batcher, its results
/// come back in order, one write in flight. Ends OK after the agent's
/// half-close and its last result; with the upstream call's status when
/// that broke with reports of it outstanding. State under the core's lock.
class LocalReportStream final
    : public grpc::ServerBidiReactor<v1::TimingReport, v1::ReportResult> {
 public:
  LocalReportStream(RelayCore* core, int64_t origin)
      : core_(core), origin_(origin) {
    core_->batcher.Open(origin_);
    StartRead(&report_);
  }

  /// The scheduler's answer to one of this call's reports.
  void Answer(v1::ReportResult result) {
    --outstanding_;
    if (failure_.has_value()) return;
    results_.push_back(std::move(result));
    WriteNext();
  }
  /// Ends the call with `status` once the write in flight is done; the
  /// results not yet written are dropped (the agent resends their reports).
  void Fail(const absl::Status& status) {
    if (failure_.has_value()) return;
    failure_ = status;
    core_->batcher.Close(origin_);
    WriteNext();
  }

  void OnReadDone(bool ok) override {
    absl::MutexLock lock(&core_->mu);
    if (!ok) {
      half_closed_ = true;
      core_->batcher.Close(origin_);
      // The node's batch no longer waits for this call.
      core_->PumpReports();
      WriteNext();
      return;
    }
    if (failure_.has_value()) return;
    if (core_->stopping) {
      Fail(ShuttingDown());
      return;
    }
    ++outstanding_;
    core_->batcher.Add(origin_, std::move(report_), core_->clock->Now());
    core_->PumpReports();
    StartRead(&report_);
  }
  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&core_->mu);
    writing_ = false;
    results_.pop_front();
    if (!ok) Fail(absl::CancelledError("the agent's report stream broke"));
    WriteNext();
  }
  void OnCancel() override {
    absl::MutexLock lock(&core_->mu);
    Fail(absl::CancelledError("the agent cancelled its report stream"));
  }
  void OnDone() override {
    {
      absl::MutexLock lock(&core_->mu);
      core_->batcher.Close(origin_);
      core_->report_streams.erase(origin_);
      core_->PumpReports();
    }
    delete this;
  }

 private:
  void WriteNext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_->mu) {
    if (writing_ || finished_) return;
    if (!failure_.has_value() && !results_.empty()) {
      writing_ = true;
      StartWrite(&results_.front());
      return;
    }
    if (failure_.has_value() || (half_closed_ && outstanding_ == 0)) {
      finished_ = true;
      Finish(ToGrpcStatus(failure_.value_or(absl::OkStatus())));
    }
  }

  RelayCore* const core_;
  const int64_t origin_;
  v1::TimingReport report_;
  std::deque<v1::ReportResult> results_;
  int outstanding_ = 0;
  bool writing_ = false;
  bool half_closed_ = false;
  bool finished_ = false;
  std::optional<absl::Status> failure_;
};

/// The upstream StreamNodeReports call; deletes itself when done.
class UpstreamReports final
    : public grpc::ClientBidiReactor<v1::TimingReportBatch,
                                     v1::ReportResultBatch> {
 public:
  explicit UpstreamReports(RelayCore* core) : core_(core) {
    core_->stub->async()->StreamNodeReports(&context_, this);
    StartRead(&results_);
    StartCall();
  }

  /// Writes `batch` (no write may be in flight).
  void Write(v1::TimingReportBatch batch) {
    batch_ = std::move(batch);
    writing_ = true;
    StartWrite(&batch_);
  }
  bool writing() const { return writing_; }
  void Cancel() { context_.TryCancel(); }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&core_->mu);
    writing_ = false;
    if (ok) core_->PumpReports();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows with the status.
    absl::MutexLock lock(&core_->mu);
    auto routed = core_->batcher.Answer(results_);
    if (!routed.ok()) {
      error_ = routed.status();
      context_.TryCancel();
      return;
    }
    for (auto& [origin, result] : *routed) {
      auto local = core_->report_streams.find(origin);
      if (local != core_->report_streams.end()) {
        local->second->Answer(std::move(result));
      }
    }
    StartRead(&results_);
  }
  void OnDone(const grpc::Status& status) override {
    {
      absl::MutexLock lock(&core_->mu);
      const absl::Status end = error_.value_or(FromGrpcStatus(status));
      for (int64_t origin : core_->batcher.Fail()) {
        auto local = core_->report_streams.find(origin);
        if (local != core_->report_streams.end()) local->second->Fail(end);
      }
      core_->upstream_reports = nullptr;
      --core_->upstream_calls;
    }
    delete this;
  }

 private:
  RelayCore* const core_;
  grpc::ClientContext context_;
  v1::TimingReportBatch batch_;
  v1::ReportResultBatch results_;
  bool writing_ = false;
  std::optional<absl::Status> error_;
};

void RelayCore::OpenPlans(PlanMux::Upstream call) {
  const int64_t id = call.id;
  ++upstream_calls;
  upstream_plans[id] = new UpstreamPlans(this, std::move(call));
}

void RelayCore::CancelPlans(int64_t id) {
  auto call = upstream_plans.find(id);
  if (call != upstream_plans.end()) call->second->Cancel();
}

void RelayCore::PumpReports() {
  if (stopping) return;
  const std::optional<absl::Time> due = batcher.Due();
  if (!due.has_value()) return;
  if (upstream_reports != nullptr && upstream_reports->writing()) return;
  // At once needs no clock; a lingering batch is the timer's until due.
  const absl::Time now = *due == absl::InfinitePast() ? *due : clock->Now();
  if (*due > now) return;
  if (upstream_reports == nullptr) {
    ++upstream_calls;
    upstream_reports = new UpstreamReports(this);
  }
  upstream_reports->Write(*batcher.TakeBatch(now));
}

absl::Time RelayCore::NextDue() const {
  absl::Time next = mux.GatherDeadline().value_or(absl::InfiniteFuture());
  if (upstream_reports == nullptr || !upstream_reports->writing()) {
    next = std::min(next, batcher.Due().value_or(absl::InfiniteFuture()));
  }
  return next;
}

void RelayCore::Gather() {
  absl::MutexLock lock(&mu);
  while (!stopping) {
    const absl::Time due = NextDue();
    if (due != absl::InfiniteFuture()) {
      const absl::Time now = clock->Now();
      if (std::optional<PlanMux::Upstream> call = mux.TakeGathered(now)) {
        OpenPlans(std::move(*call));
        continue;
      }
      PumpReports();
    }
    sleeping_until = NextDue();
    clock->AwaitWithDeadline(&mu, absl::Condition(this, &RelayCore::TimerWakes),
                             sleeping_until);
    sleeping_until = absl::InfiniteFuture();
  }
}

RelayService::RelayService(std::shared_ptr<grpc::ChannelInterface> upstream,
                           RelayServiceOptions options)
    : stub_(v1::Scheduler::NewStub(std::move(upstream))),
      core_(std::make_unique<RelayCore>(stub_.get(), std::move(options))) {
  core_->gatherer = std::thread([core = core_.get()] { core->Gather(); });
}

RelayService::~RelayService() { Shutdown(); }

void RelayService::Shutdown() {
  {
    absl::MutexLock lock(&core_->mu);
    if (!core_->stopping) {
      core_->stopping = true;
      core_->mux.EndAll(ShuttingDown());
      for (auto& [origin, local] : core_->report_streams) {
        local->Fail(ShuttingDown());
      }
      for (auto& [id, call] : core_->upstream_plans) call->Cancel();
      if (core_->upstream_reports != nullptr) core_->upstream_reports->Cancel();
    }
    core_->mu.Await(absl::Condition(core_.get(), &RelayCore::UpstreamsDone));
  }
  if (core_->gatherer.joinable()) core_->gatherer.join();
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* RelayService::Forward(
    grpc::CallbackServerContext* context, const Request* request,
    Response* response, AsyncMethod<Request, Response> method) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::shared_ptr<grpc::ClientContext> upstream =
      grpc::ClientContext::FromCallbackServerContext(*context);
  // The agent waited for its connection to the relay; the relay waits for
  // the scheduler the same way, up to the agent's deadline.
  upstream->set_wait_for_ready(true);
  (stub_->async()->*method)(
      upstream.get(), request, response,
      [reactor, upstream](grpc::Status status) { reactor->Finish(status); });
  return reactor;
}

grpc::ServerUnaryReactor* RelayService::Register(
    grpc::CallbackServerContext* context, const v1::RegisterRequest* request,
    v1::RegisterResponse* response) {
  return Forward(context, request, response,
                 &v1::Scheduler::Stub::async::Register);
}

grpc::ServerWriteReactor<v1::PlanUpdate>* RelayService::StreamPlans(
    grpc::CallbackServerContext* /*context*/,
    const v1::StreamPlansRequest* request) {
  auto* local = new LocalPlanStream(core_.get());
  absl::MutexLock lock(&core_->mu);
  if (core_->stopping) {
    local->End(ShuttingDown());
  } else {
    core_->mux.Subscribe(local, *request, core_->clock->Now());
  }
  return local;
}

grpc::ServerUnaryReactor* RelayService::ReportTimings(
    grpc::CallbackServerContext* context, const v1::TimingReport* request,
    v1::ReportAck* response) {
  return Forward(context, request, response,
                 &v1::Scheduler::Stub::async::ReportTimings);
}

grpc::ServerBidiReactor<v1::TimingReport, v1::ReportResult>*
RelayService::StreamReports(grpc::CallbackServerContext* /*context*/) {
  absl::MutexLock lock(&core_->mu);
  const int64_t origin = core_->next_origin++;
  auto* local = new LocalReportStream(core_.get(), origin);
  core_->report_streams[origin] = local;
  if (core_->stopping) local->Fail(ShuttingDown());
  return local;
}

grpc::ServerUnaryReactor* RelayService::ReportProfile(
    grpc::CallbackServerContext* context, const v1::ProfileReport* request,
    v1::ReportAck* response) {
  return Forward(context, request, response,
                 &v1::Scheduler::Stub::async::ReportProfile);
}

grpc::ServerUnaryReactor* RelayService::StoreSet(
    grpc::CallbackServerContext* context, const v1::StoreSetRequest* request,
    v1::StoreSetResponse* response) {
  return Forward(context, request, response,
                 &v1::Scheduler::Stub::async::StoreSet);
}

grpc::ServerUnaryReactor* RelayService::StoreGet(
    grpc::CallbackServerContext* context, const v1::StoreGetRequest* request,
    v1::StoreGetResponse* response) {
  return Forward(context, request, response,
                 &v1::Scheduler::Stub::async::StoreGet);
}

grpc::ServerUnaryReactor* RelayService::GetStatus(
    grpc::CallbackServerContext* context, const v1::StatusRequest* request,
    v1::StatusResponse* response) {
  return Forward(context, request, response,
                 &v1::Scheduler::Stub::async::GetStatus);
}

grpc::ServerUnaryReactor* RelayService::Drain(
    grpc::CallbackServerContext* context, const v1::DrainRequest* request,
    v1::DrainResponse* response) {
  return Forward(context, request, response,
                 &v1::Scheduler::Stub::async::Drain);
}

}  // namespace dcp
