#include "scheduler/server/scheduler_service.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"

namespace dcp {

struct StreamLink;

/// The fan-out pool: `fanout_threads` shards, each a queue of woken stream
/// links and the one thread that pumps them. `Enqueue` (the wake) only
/// pushes the link, once until a shard thread takes it (the link's `queued`
/// flag coalesces repeated wakes), so it is cheap for the planner thread.
/// Thread-safe; `Stop` joins the threads, and `Enqueue` after it does
/// nothing.
class StreamFanOut {
 public:
  explicit StreamFanOut(int threads);
  ~StreamFanOut() { Stop(); }
  StreamFanOut(const StreamFanOut&) = delete;
  StreamFanOut& operator=(const StreamFanOut&) = delete;

  /// The shard for a new stream; one stream always uses the same shard.
  int PickShard() {
    return static_cast<int>(
        next_shard_.fetch_add(1, std::memory_order_relaxed) % shards_.size());
  }

  /// Queues `link` for a pump on its shard unless it is queued already.
  void Enqueue(const std::shared_ptr<StreamLink>& link);

  /// Stops and joins the threads; queued links are dropped. Idempotent.
  void Stop();

 private:
  struct Shard {
    absl::Mutex mu;
    std::vector<std::shared_ptr<StreamLink>> queue ABSL_GUARDED_BY(mu);
    bool stopping ABSL_GUARDED_BY(mu) = false;
    std::thread thread;
  };

  static void Run(Shard& shard);

  std::vector<std::unique_ptr<Shard>> shards_;
  std::atomic<uint64_t> next_shard_{0};
  absl::Mutex stop_mu_;
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
};

namespace {

/// Finishes a unary call with `result`, copying the value on success.
template <typename Response>
grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context,
                                absl::StatusOr<Response> result,
                                Response* response) {
  if (result.ok()) *response = *std::move(result);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(result.status()));
  return reactor;
}

grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context,
                                const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

class PlanStreamReactor;

}  // namespace

/// What a plan stream shares with the wake callback it gave the control
/// plane. The callback may run on any thread at any time, also after the
/// RPC is over, so it holds this (by shared_ptr) instead of the reactor, and
/// reaches the reactor only under `mu` while `reactor` is not null.
/// `OnDone` nulls it under `mu` before deleting the reactor: a wake either
/// finishes its use of the reactor before that, or sees null.
struct StreamLink {
  explicit StreamLink(int shard) : shard(shard) {}

  absl::Mutex mu;
  PlanStreamReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
  /// The fan-out shard that pumps this stream (-1 without a pool).
  const int shard;
  /// True from a wake's enqueue until the shard thread takes the link (and
  /// before it pumps), so wakes meanwhile are covered by that pump. Swapped
  /// with acq_rel so the pump sees what the wake's caller published.
  std::atomic<bool> queued{false};
};

namespace {
class ReportStreamReactor;
}  // namespace

/// The open StreamReports calls, so that `SchedulerService::Shutdown` can
/// end them (gRPC's own shutdown would wait for them until its deadline).
struct ReportStreams {
  absl::Mutex mu;
  absl::flat_hash_set<ReportStreamReactor*> reactors ABSL_GUARDED_BY(mu);
  bool shut_down ABSL_GUARDED_BY(mu) = false;
};

namespace {

/// One StreamPlans call. All its state is guarded by `link_->mu`, taken by
/// every reaction and by wakes; gRPC runs no reaction inline from
/// `StartWrite` or `Finish` (write and done callbacks are not inlineable on
/// the server), so calling them under the lock cannot deadlock. Lock order:
/// `link_->mu`, then the control plane's lock (`NextForStream`), which never
/// calls a wake while held.
class PlanStreamReactor final
    : public grpc::ServerWriteReactor<v1::PlanUpdate> {
 public:
  /// `fanout` null: wakes pump on the waking thread.
  PlanStreamReactor(ControlPlane* control_plane,
                    const std::shared_ptr<StreamFanOut>& fanout,
                    const v1::StreamPlansRequest& request)
      : control_plane_(control_plane),
        link_(std::make_shared<StreamLink>(
            fanout != nullptr ? fanout->PickShard() : -1)) {
    {
      absl::MutexLock lock(&link_->mu);
      link_->reactor = this;
    }
    // Not under link_->mu: OpenStream may wake the rank's older stream. A
    // wake of this stream before the id is known finds it not open yet and
    // does nothing; the pump below catches up. With a fan-out pool the wake
    // (on the planner thread, mostly) only queues the link and a pool thread
    // calls `Wake`; without one it pumps right there.
    std::function<void()> wake;
    if (fanout != nullptr) {
      wake = [fanout, link = link_] { fanout->Enqueue(link); };
    } else {
      wake = [link = link_] { Wake(*link); };
    }
    absl::StatusOr<int64_t> id =
        control_plane_->OpenStream(request.rank(), request.session_id(),
                                   request.from_step(), std::move(wake));
    absl::MutexLock lock(&link_->mu);
    if (!id.ok()) {
      FinishLocked(ToGrpcStatus(id.status()));
      return;
    }
    stream_id_ = *id;
    PumpLocked();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&link_->mu);
    write_in_flight_ = false;
    if (finish_status_.has_value()) {
      // Finish was wanted while the write was in flight.
      Finish(*finish_status_);
      return;
    }
    if (!ok) {
      FinishLocked(ToGrpcStatus(
          absl::CancelledError("the plan stream broke (client gone)")));
      return;
    }
    PumpLocked();
  }

  void OnCancel() override {
    absl::MutexLock lock(&link_->mu);
    FinishLocked(
        ToGrpcStatus(absl::CancelledError("the plan stream was cancelled")));
  }

  void OnDone() override {
    int64_t stream_id = 0;
    {
      absl::MutexLock lock(&link_->mu);
      link_->reactor = nullptr;  // From here on wakes do nothing.
      stream_id = stream_id_;
    }
    if (stream_id != 0) control_plane_->CloseStream(stream_id);
    delete this;
  }

  /// Pumps the stream behind `link`, if it is not done. Any thread.
  static void Wake(StreamLink& link) {
    absl::MutexLock lock(&link.mu);
    PlanStreamReactor* reactor = link.reactor;
    if (reactor == nullptr) return;
    reactor->link_->mu.AssertHeld();  // link is reactor->link_
    reactor->PumpLocked();
  }

 private:
  /// Starts the next write, or finishes, unless a write is in flight.
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_->mu) {
    if (stream_id_ == 0 || write_in_flight_ || finish_status_.has_value()) {
      return;
    }
    StreamNext next = control_plane_->NextForStream(stream_id_);
    switch (next.kind) {
      case StreamNext::Kind::kWait:
        return;
      case StreamNext::Kind::kSend:
        // The message must live until OnWriteDone; only one is in flight.
        current_ = std::move(next.update);
        write_in_flight_ = true;
        StartWrite(current_.get());
        return;
      case StreamNext::Kind::kEnd:
        FinishLocked(ToGrpcStatus(next.end_status));
        return;
    }
  }

  /// Finishes once; after the write in flight, if any, completes.
  void FinishLocked(grpc::Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_->mu) {
    if (finish_status_.has_value()) return;
    finish_status_ = std::move(status);
    if (!write_in_flight_) Finish(*finish_status_);
  }

  ControlPlane* const control_plane_;
  const std::shared_ptr<StreamLink> link_;
  /// 0 until the control plane opened the stream.
  int64_t stream_id_ ABSL_GUARDED_BY(link_->mu) = 0;
  bool write_in_flight_ ABSL_GUARDED_BY(link_->mu) = false;
  /// Set once Finish is wanted; Finish runs when no write is in flight.
  std::optional<grpc::Status> finish_status_ ABSL_GUARDED_BY(link_->mu);
  std::shared_ptr<const v1::PlanUpdate> current_ ABSL_GUARDED_BY(link_->mu);
};

/// One StreamReports call: reads reports one at a time, hands each to the
/// control plane on the reading thread (as the unary handler would; it only
/// validates and records, refits run on the control plane's planner) and
/// queues its result; writes results one at a time, in order. Reading pauses
/// while `kMaxQueuedResults` results wait, so an agent that stops reading
/// cannot make the scheduler buffer without bound. All state is under `mu_`:
/// read and write reactions may run at once on different threads.
class ReportStreamReactor final
    : public grpc::ServerBidiReactor<v1::TimingReport, v1::ReportResult> {
 public:
  static constexpr size_t kMaxQueuedResults = 64;

  /// Registers with `open` (the service's set), which `OnDone` leaves.
  ReportStreamReactor(ControlPlane* control_plane,
                      const std::function<void(absl::StatusCode)>* on_report,
                      ReportStreams* open)
      : control_plane_(control_plane), on_report_(on_report), open_(open) {
    // Lock order: the set's lock, then a reactor's (`End`); never both here.
    bool refused = false;
    {
      absl::MutexLock lock(&open_->mu);
      refused = open_->shut_down;
      open_->reactors.insert(this);
    }
    absl::MutexLock lock(&mu_);
    if (refused) FinishLocked(ShuttingDown());
    // Ended meanwhile by `End` (a shutdown), or refused: no reading.
    if (finish_status_.has_value()) return;
    read_in_flight_ = true;
    StartRead(&report_);
  }

  /// Ends the call with UNAVAILABLE once the write in flight, if any, is
  /// done (the scheduler is shutting down). Any thread.
  void End() {
    absl::MutexLock lock(&mu_);
    FinishLocked(ShuttingDown());
  }

  void OnReadDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    read_in_flight_ = false;
    if (finish_status_.has_value()) return;
    if (!ok) {
      // The agent half-closed (or the call broke): finish once every
      // result is written.
      reads_done_ = true;
      PumpLocked();
      return;
    }
    const absl::StatusOr<v1::ReportAck> ack =
        control_plane_->ReportTimings(report_);
    if (*on_report_) (*on_report_)(ack.status().code());
    v1::ReportResult& result = results_.emplace_back();
    result.set_step(report_.step());
    result.set_code(static_cast<int32_t>(ack.status().code()));
    if (ack.ok()) {
      *result.mutable_ack() = *ack;
    } else {
      result.set_message(std::string(ack.status().message()));
    }
    PumpLocked();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (finish_status_.has_value()) {
      // Finish was wanted while the write was in flight.
      FinishNowLocked();
      return;
    }
    if (!ok) {
      FinishLocked(ToGrpcStatus(
          absl::CancelledError("the report stream broke (client gone)")));
      return;
    }
    results_.pop_front();
    PumpLocked();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    FinishLocked(
        ToGrpcStatus(absl::CancelledError("the report stream was cancelled")));
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&open_->mu);
      open_->reactors.erase(this);
    }
    delete this;
  }

 private:
  static grpc::Status ShuttingDown() {
    return ToGrpcStatus(
        absl::UnavailableError("the scheduler is shutting down; resend reports "
                               "without an answer over ReportTimings"));
  }

  /// Starts the next write and the next read when they are due, or
  /// finishes after the last result of a half-closed stream.
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finish_status_.has_value()) return;
    if (!write_in_flight_ && !results_.empty()) {
      write_in_flight_ = true;
      StartWrite(&results_.front());
    }
    if (!reads_done_ && !read_in_flight_ &&
        results_.size() < kMaxQueuedResults) {
      read_in_flight_ = true;
      StartRead(&report_);
    }
    if (reads_done_ && !write_in_flight_ && results_.empty()) {
      FinishLocked(grpc::Status::OK);
    }
  }

  /// Finishes once, after the write in flight, if any, completes.
  void FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finish_status_.has_value()) return;
    finish_status_ = std::move(status);
    if (!write_in_flight_) FinishNowLocked();
  }

  void FinishNowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(*finish_status_);
  }

  ControlPlane* const control_plane_;
  /// The service's `on_stream_report` and set of open streams (they
  /// outlive every call).
  const std::function<void(absl::StatusCode)>* const on_report_;
  ReportStreams* const open_;
  absl::Mutex mu_;
  /// The report being read; the control plane is done with it before the
  /// next read starts.
  v1::TimingReport report_ ABSL_GUARDED_BY(mu_);
  /// Results not yet written; the front one is in flight when
  /// `write_in_flight_` (a deque: the message must not move while written).
  std::deque<v1::ReportResult> results_ ABSL_GUARDED_BY(mu_);
  bool read_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  /// Set once Finish is wanted; `finished_` once it was called.
  std::optional<grpc::Status> finish_status_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

int FanOutThreads(const SchedulerServiceOptions& options) {
  if (options.fanout_threads >= 0) return options.fanout_threads;
  // Auto: a pool only where it has cores to run on. On small hosts the pool
  // competes with the gRPC threads for the same cores and measured worse
  // (scheduler/server/plan_delivery_benchmark.cc on 2 cores).
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return cores >= 8 ? std::min(8, cores / 4) : 0;
}

}  // namespace

StreamFanOut::StreamFanOut(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    shards_.push_back(std::make_unique<Shard>());
  }
  for (const std::unique_ptr<Shard>& shard : shards_) {
    Shard* s = shard.get();
    s->thread = std::thread([s] { Run(*s); });
  }
}

void StreamFanOut::Enqueue(const std::shared_ptr<StreamLink>& link) {
  if (link->queued.exchange(true, std::memory_order_acq_rel)) return;
  Shard& shard = *shards_[link->shard];
  absl::MutexLock lock(&shard.mu);
  // After Stop the flag stays set: later wakes return above, cheaply.
  if (shard.stopping) return;
  shard.queue.push_back(link);
}

void StreamFanOut::Run(Shard& shard) {
  std::vector<std::shared_ptr<StreamLink>> batch;
  while (true) {
    {
      absl::MutexLock lock(&shard.mu);
      shard.mu.Await(absl::Condition(
          +[](Shard* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
            return s->stopping || !s->queue.empty();
          },
          &shard));
      if (shard.stopping) return;
      batch.swap(shard.queue);
    }
    for (const std::shared_ptr<StreamLink>& link : batch) {
      // Cleared before the pump: a wake from here on queues the link again,
      // and one before is covered by this pump.
      link->queued.exchange(false, std::memory_order_acq_rel);
      PlanStreamReactor::Wake(*link);
    }
    batch.clear();
  }
}

void StreamFanOut::Stop() {
  absl::MutexLock stop_lock(&stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  for (const std::unique_ptr<Shard>& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    shard->stopping = true;
    shard->queue.clear();
  }
  for (const std::unique_ptr<Shard>& shard : shards_) shard->thread.join();
}

SchedulerService::SchedulerService(ControlPlane* control_plane,
                                   SchedulerServiceOptions options)
    : control_plane_(control_plane),
      on_stream_report_(std::move(options.on_stream_report)),
      report_streams_(std::make_unique<ReportStreams>()),
      fanout_(FanOutThreads(options) > 0
                  ? std::make_shared<StreamFanOut>(FanOutThreads(options))
                  : nullptr) {}

void SchedulerService::Shutdown() {
  absl::MutexLock lock(&report_streams_->mu);
  report_streams_->shut_down = true;
  // Under the set's lock: a reactor leaves it (OnDone) only after this.
  for (ReportStreamReactor* reactor : report_streams_->reactors) {
    reactor->End();
  }
}

SchedulerService::~SchedulerService() {
  if (fanout_ != nullptr) fanout_->Stop();
}

grpc::ServerUnaryReactor* SchedulerService::Register(
    grpc::CallbackServerContext* context, const v1::RegisterRequest* request,
    v1::RegisterResponse* response) {
  return Reply(context, control_plane_->Register(*request), response);
}

grpc::ServerWriteReactor<v1::PlanUpdate>* SchedulerService::StreamPlans(
    grpc::CallbackServerContext* /*context*/,
    const v1::StreamPlansRequest* request) {
  return new PlanStreamReactor(control_plane_, fanout_, *request);
}

grpc::ServerUnaryReactor* SchedulerService::ReportTimings(
    grpc::CallbackServerContext* context, const v1::TimingReport* request,
    v1::ReportAck* response) {
  return Reply(context, control_plane_->ReportTimings(*request), response);
}

grpc::ServerBidiReactor<v1::TimingReport, v1::ReportResult>*
SchedulerService::StreamReports(grpc::CallbackServerContext* /*context*/) {
  return new ReportStreamReactor(control_plane_, &on_stream_report_,
                                 report_streams_.get());
}

grpc::ServerUnaryReactor* SchedulerService::ReportProfile(
    grpc::CallbackServerContext* context, const v1::ProfileReport* request,
    v1::ReportAck* response) {
  return Reply(context, control_plane_->ReportProfile(*request), response);
}

grpc::ServerUnaryReactor* SchedulerService::StoreSet(
    grpc::CallbackServerContext* context, const v1::StoreSetRequest* request,
    v1::StoreSetResponse* /*response*/) {
  return Reply(context,
               control_plane_->StoreSet(request->session_id(), request->key(),
                                        request->value()));
}

grpc::ServerUnaryReactor* SchedulerService::StoreGet(
    grpc::CallbackServerContext* context, const v1::StoreGetRequest* request,
    v1::StoreGetResponse* response) {
  const std::vector<std::string> keys(request->keys().begin(),
                                      request->keys().end());
  absl::StatusOr<std::vector<std::string>> values =
      control_plane_->StoreGet(request->session_id(), keys);
  if (values.ok()) {
    for (std::string& value : *values) response->add_values(std::move(value));
  }
  return Reply(context, values.status());
}

grpc::ServerUnaryReactor* SchedulerService::GetStatus(
    grpc::CallbackServerContext* context, const v1::StatusRequest* /*request*/,
    v1::StatusResponse* response) {
  *response = control_plane_->Status();
  return Reply(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* SchedulerService::Drain(
    grpc::CallbackServerContext* context, const v1::DrainRequest* request,
    v1::DrainResponse* response) {
  response->set_last_step(control_plane_->Drain(request->stop()));
  return Reply(context, absl::OkStatus());
}

}  // namespace dcp
