#include "scheduler/server/scheduler_service.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_status.h"
#include "scheduler/server/report_streams.h"

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

/// A stream reactor that ends its call with `status` as soon as it is
/// bound, and deletes itself when gRPC is done with it: a refused stream.
template <typename Reactor>
class Refusal final : public Reactor {
 public:
  explicit Refusal(const absl::Status& status) {
    this->Finish(ToGrpcStatus(status));
  }
  void OnDone() override { delete this; }
};

}  // namespace

/// The part of a plan-stream reactor that a wake reaches: `PumpLocked`
/// under the link's lock (`StreamLink::mu`).
class PlanPump {
 public:
  virtual void PumpLocked() = 0;

 protected:
  ~PlanPump() = default;
};

/// What a plan stream shares with the wake callback it gave the control
/// plane. The callback may run on any thread at any time, also after the
/// RPC is over, so it holds this (by shared_ptr) instead of the reactor, and
/// reaches the reactor only under `mu` while `reactor` is not null.
/// `OnDone` nulls it under `mu` before deleting the reactor: a wake either
/// finishes its use of the reactor before that, or sees null.
struct StreamLink {
  explicit StreamLink(int shard) : shard(shard) {}

  absl::Mutex mu;
  PlanPump* reactor ABSL_GUARDED_BY(mu) = nullptr;
  /// The fan-out shard that pumps this stream (-1 without a pool).
  const int shard;
  /// True from a wake's enqueue until the shard thread takes the link (and
  /// before it pumps), so wakes meanwhile are covered by that pump. Swapped
  /// with acq_rel so the pump sees what the wake's caller published.
  std::atomic<bool> queued{false};
};

namespace {

/// Pumps the stream behind `link`, if it is not done. Any thread.
void WakeLink(StreamLink& link) {
  absl::MutexLock lock(&link.mu);
  if (link.reactor != nullptr) link.reactor->PumpLocked();
}

/// OK, or why a StreamNodePlans request cannot be served at all.
absl::Status CheckNodePlansRequest(const v1::NodePlansRequest& request) {
  if (request.ranks().empty()) {
    return absl::InvalidArgumentError("StreamNodePlans names no ranks");
  }
  if (request.ranks_size() > kMaxRanksPerCall) {
    return absl::InvalidArgumentError(
        absl::StrCat("StreamNodePlans names ", request.ranks_size(),
                     " ranks; at most ", kMaxRanksPerCall, " per call"));
  }
  absl::flat_hash_set<int32_t> seen;
  for (const v1::StreamPlansRequest& rank : request.ranks()) {
    if (!seen.insert(rank.rank()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("StreamNodePlans names rank ", rank.rank(), " twice"));
    }
  }
  return absl::OkStatus();
}

/// One rank's subscription on a plan stream.
struct Subscription {
  v1::StreamPlansRequest request;
  /// The control plane's stream; 0 until (and unless) it opened.
  int64_t stream_id = 0;
  bool ended = false;
};

/// One StreamPlans call (`Message` = v1::PlanUpdate: one rank, whose
/// messages go out as the control plane keeps them) or StreamNodePlans call
/// (v1::NodePlanUpdate: several ranks, and each write carries everything
/// that is new for any of them since the last, so a step costs one write).
///
/// All its state is guarded by `link_->mu`, taken by every reaction and by
/// wakes; gRPC runs no reaction inline from `StartWrite` or `Finish` (write
/// and done callbacks are not inlineable on the server), so calling them
/// under the lock cannot deadlock. Lock order: `link_->mu`, then the control
/// plane's lock (`NextForStream`), which never calls a wake while held.
template <typename Message>
class PlanStreamReactor final : public grpc::ServerWriteReactor<Message>,
                                public PlanPump {
 public:
  /// `fanout` null: wakes pump on the waking thread. A `refusal` other than
  /// OK ends the call with it and opens nothing.
  PlanStreamReactor(ControlPlane* control_plane,
                    const std::shared_ptr<StreamFanOut>& fanout,
                    const OnStreamRpc* on_end,
                    std::vector<v1::StreamPlansRequest> requests,
                    const absl::Status& refusal)
      : control_plane_(control_plane),
        on_end_(on_end),
        link_(std::make_shared<StreamLink>(
            fanout != nullptr ? fanout->PickShard() : -1)) {
    {
      absl::MutexLock lock(&link_->mu);
      link_->reactor = this;
      if (!refusal.ok()) {
        FinishLocked(ToGrpcStatus(refusal));
        return;
      }
    }
    // Not under link_->mu: OpenStream may wake the rank's older stream. A
    // wake of this stream before the ids are known finds it not open yet
    // and does nothing; the pump below catches up. With a fan-out pool the
    // wake (on the planner thread, mostly) only queues the link and a pool
    // thread pumps; without one it pumps right there.
    std::function<void()> wake;
    if (fanout != nullptr) {
      wake = [fanout, link = link_] { fanout->Enqueue(link); };
    } else {
      wake = [link = link_] { WakeLink(*link); };
    }
    std::vector<absl::StatusOr<int64_t>> ids;
    for (const v1::StreamPlansRequest& request : requests) {
      ids.push_back(control_plane_->OpenStream(
          request.rank(), request.session_id(), request.from_step(), wake));
    }
    absl::MutexLock lock(&link_->mu);
    for (size_t i = 0; i < requests.size(); ++i) {
      subs_.push_back(Subscription{std::move(requests[i])});
      if (ids[i].ok()) {
        subs_[i].stream_id = *ids[i];
      } else {
        EndLocked(i, ids[i].status());
      }
    }
    opened_ = true;
    PumpLocked();
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&link_->mu);
    write_in_flight_ = false;
    if (finish_status_.has_value()) {
      // Finish was wanted while the write was in flight.
      this->Finish(*finish_status_);
      return;
    }
    if (!ok) {
      FinishLocked(ToGrpcStatus(
          absl::CancelledError("the plan stream broke (client gone)")));
      return;
    }
    current_.reset();
    ClearBatchLocked();
    PumpLocked();
  }

  void OnCancel() override {
    absl::MutexLock lock(&link_->mu);
    FinishLocked(
        ToGrpcStatus(absl::CancelledError("the plan stream was cancelled")));
  }

  void OnDone() override {
    std::vector<int64_t> open;
    {
      absl::MutexLock lock(&link_->mu);
      link_->reactor = nullptr;  // From here on wakes do nothing.
      ClearBatchLocked();
      for (const Subscription& sub : subs_) {
        if (sub.stream_id != 0) open.push_back(sub.stream_id);
      }
    }
    for (int64_t id : open) control_plane_->CloseStream(id);
    delete this;
  }

  /// Starts the next write, or finishes once every subscription ended,
  /// unless a write is in flight. Under `link_->mu`.
  void PumpLocked() override {
    link_->mu.AssertHeld();
    if (!opened_ || write_in_flight_ || finish_status_.has_value()) return;
    if (CollectLocked()) {
      write_in_flight_ = true;
      this->StartWrite(OutgoingLocked());
      return;
    }
    if (ended_ == subs_.size()) FinishLocked(ToGrpcStatus(end_status_));
  }

 private:
  static constexpr bool kNode = std::is_same_v<Message, v1::NodePlanUpdate>;

  /// Gathers what to write next; false when there is nothing.
  bool CollectLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_->mu) {
    for (size_t i = 0; i < subs_.size(); ++i) {
      // One message per write for a single rank; all there is for a node.
      while (!subs_[i].ended && (kNode || current_ == nullptr)) {
        StreamNext next = control_plane_->NextForStream(subs_[i].stream_id);
        if (next.kind == StreamNext::Kind::kWait) break;
        if (next.kind == StreamNext::Kind::kEnd) {
          EndLocked(i, next.end_status);
          break;
        }
        if constexpr (kNode) {
          // Borrowed, not copied (a step's view is most of what a step
          // costs to copy and free): the part points at the control plane's
          // message, kept alive in `borrowed_` and handed back before the
          // batch is cleared. Writing only reads it, as a single-rank
          // stream's write of the same shared message does.
          v1::RankPlanUpdate* part = batch_.add_updates();
          part->set_rank(subs_[i].request.rank());
          part->unsafe_arena_set_allocated_update(
              const_cast<v1::PlanUpdate*>(next.update.get()));
          borrowed_.push_back(std::move(next.update));
        } else {
          // Shared, not copied; it must live until OnWriteDone.
          current_ = std::move(next.update);
        }
      }
    }
    return current_ != nullptr || batch_.updates_size() > 0;
  }

  /// Empties the batch, handing the borrowed messages back first.
  void ClearBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_->mu) {
    for (v1::RankPlanUpdate& part : *batch_.mutable_updates()) {
      if (part.has_update()) part.unsafe_arena_release_update();
    }
    batch_.Clear();
    borrowed_.clear();
  }

  const Message* OutgoingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_->mu) {
    if constexpr (kNode) {
      return &batch_;
    } else {
      return current_.get();
    }
  }

  /// Subscription `i` is over with `status`: a node stream tells its rank
  /// so in the next write; the call ends once every one is over, with the
  /// first status that is not OK.
  void EndLocked(size_t i, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_->mu) {
    subs_[i].ended = true;
    ++ended_;
    if (end_status_.ok()) end_status_ = status;
    if constexpr (kNode) {
      v1::RankPlanUpdate* part = batch_.add_updates();
      part->set_rank(subs_[i].request.rank());
      part->mutable_end()->set_code(static_cast<int32_t>(status.code()));
      part->mutable_end()->set_message(std::string(status.message()));
    }
  }

  /// Finishes once; after the write in flight, if any, completes.
  void FinishLocked(grpc::Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_->mu) {
    if (finish_status_.has_value()) return;
    finish_status_ = std::move(status);
    if (*on_end_) {
      (*on_end_)(kNode ? "StreamNodePlans" : "StreamPlans",
                 static_cast<absl::StatusCode>(finish_status_->error_code()));
    }
    if (!write_in_flight_) this->Finish(*finish_status_);
  }

  ControlPlane* const control_plane_;
  /// The service's `on_stream_rpc` (outlives every call).
  const OnStreamRpc* const on_end_;
  const std::shared_ptr<StreamLink> link_;
  /// In request order; filled (and `opened_` set) once every open returned.
  std::vector<Subscription> subs_ ABSL_GUARDED_BY(link_->mu);
  bool opened_ ABSL_GUARDED_BY(link_->mu) = false;
  size_t ended_ ABSL_GUARDED_BY(link_->mu) = 0;
  absl::Status end_status_ ABSL_GUARDED_BY(link_->mu);
  bool write_in_flight_ ABSL_GUARDED_BY(link_->mu) = false;
  /// Set once Finish is wanted; Finish runs when no write is in flight.
  std::optional<grpc::Status> finish_status_ ABSL_GUARDED_BY(link_->mu);
  /// The message being written (single rank) or gathered and written
  /// (node), until OnWriteDone.
  std::shared_ptr<const v1::PlanUpdate> current_ ABSL_GUARDED_BY(link_->mu);
  v1::NodePlanUpdate batch_ ABSL_GUARDED_BY(link_->mu);
  /// The control plane's messages `batch_` points at.
  std::vector<std::shared_ptr<const v1::PlanUpdate>> borrowed_
      ABSL_GUARDED_BY(link_->mu);
};

int FanOutThreads(const SchedulerServiceOptions& options) {
  if (options.fanout_threads >= 0) return options.fanout_threads;
  // Auto: a pool only where it has cores to run on. On small hosts the pool
  // competes with the gRPC threads for the same cores and measured worse
  // (scheduler/delivery/plan_delivery_benchmark_main.cc on 2 cores).
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
      WakeLink(*link);
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
      authenticator_(std::move(options.authenticator)),
      on_refused_(std::move(options.on_refused)),
      on_stream_rpc_(std::move(options.on_stream_rpc)),
      report_streams_(std::make_unique<ReportStreams>()),
      fanout_(FanOutThreads(options) > 0
                  ? std::make_shared<StreamFanOut>(FanOutThreads(options))
                  : nullptr) {}

void SchedulerService::Shutdown() {
  absl::MutexLock lock(&report_streams_->mu);
  report_streams_->shut_down = true;
  // Under the set's lock: a reactor leaves it (OnDone) only after this.
  for (EndableStream* reactor : report_streams_->reactors) {
    reactor->End();
  }
}

SchedulerService::~SchedulerService() {
  if (fanout_ != nullptr) fanout_->Stop();
}

absl::Status SchedulerService::Admit(
    absl::string_view method,
    const grpc::CallbackServerContext& context) const {
  if (!authenticator_.has_value()) return absl::OkStatus();
  absl::Status status = authenticator_->Check(context.client_metadata());
  if (!status.ok() && on_refused_) on_refused_(method, status);
  return status;
}

grpc::ServerUnaryReactor* SchedulerService::Register(
    grpc::CallbackServerContext* context, const v1::RegisterRequest* request,
    v1::RegisterResponse* response) {
  if (absl::Status s = Admit("Register", *context); !s.ok()) {
    return Reply(context, s);
  }
  return Reply(context, control_plane_->Register(*request), response);
}

grpc::ServerWriteReactor<v1::PlanUpdate>* SchedulerService::StreamPlans(
    grpc::CallbackServerContext* context,
    const v1::StreamPlansRequest* request) {
  if (absl::Status s = Admit("StreamPlans", *context); !s.ok()) {
    return new Refusal<grpc::ServerWriteReactor<v1::PlanUpdate>>(s);
  }
  return new PlanStreamReactor<v1::PlanUpdate>(
      control_plane_, fanout_, &on_stream_rpc_, {*request}, absl::OkStatus());
}

grpc::ServerWriteReactor<v1::NodePlanUpdate>* SchedulerService::StreamNodePlans(
    grpc::CallbackServerContext* context, const v1::NodePlansRequest* request) {
  if (absl::Status s = Admit("StreamNodePlans", *context); !s.ok()) {
    return new Refusal<grpc::ServerWriteReactor<v1::NodePlanUpdate>>(s);
  }
  return new PlanStreamReactor<v1::NodePlanUpdate>(
      control_plane_, fanout_, &on_stream_rpc_,
      std::vector<v1::StreamPlansRequest>(request->ranks().begin(),
                                          request->ranks().end()),
      CheckNodePlansRequest(*request));
}

grpc::ServerUnaryReactor* SchedulerService::ReportTimings(
    grpc::CallbackServerContext* context, const v1::TimingReport* request,
    v1::ReportAck* response) {
  if (absl::Status s = Admit("ReportTimings", *context); !s.ok()) {
    return Reply(context, s);
  }
  return Reply(context, control_plane_->ReportTimings(*request), response);
}

grpc::ServerBidiReactor<v1::TimingReport, v1::ReportResult>*
SchedulerService::StreamReports(grpc::CallbackServerContext* context) {
  if (absl::Status s = Admit("StreamReports", *context); !s.ok()) {
    return new Refusal<
        grpc::ServerBidiReactor<v1::TimingReport, v1::ReportResult>>(s);
  }
  return NewReportStream(control_plane_, &on_stream_rpc_,
                         report_streams_.get());
}

grpc::ServerBidiReactor<v1::TimingReportBatch, v1::ReportResultBatch>*
SchedulerService::StreamNodeReports(grpc::CallbackServerContext* context) {
  if (absl::Status s = Admit("StreamNodeReports", *context); !s.ok()) {
    return new Refusal<
        grpc::ServerBidiReactor<v1::TimingReportBatch, v1::ReportResultBatch>>(
        s);
  }
  return NewNodeReportStream(control_plane_, &on_stream_rpc_,
                             report_streams_.get());
}

grpc::ServerUnaryReactor* SchedulerService::ReportProfile(
    grpc::CallbackServerContext* context, const v1::ProfileReport* request,
    v1::ReportAck* response) {
  if (absl::Status s = Admit("ReportProfile", *context); !s.ok()) {
    return Reply(context, s);
  }
  return Reply(context, control_plane_->ReportProfile(*request), response);
}

grpc::ServerUnaryReactor* SchedulerService::StoreSet(
    grpc::CallbackServerContext* context, const v1::StoreSetRequest* request,
    v1::StoreSetResponse* /*response*/) {
  if (absl::Status s = Admit("StoreSet", *context); !s.ok()) {
    return Reply(context, s);
  }
  return Reply(context,
               control_plane_->StoreSet(request->session_id(), request->key(),
                                        request->value()));
}

grpc::ServerUnaryReactor* SchedulerService::StoreGet(
    grpc::CallbackServerContext* context, const v1::StoreGetRequest* request,
    v1::StoreGetResponse* response) {
  if (absl::Status s = Admit("StoreGet", *context); !s.ok()) {
    return Reply(context, s);
  }
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
  if (absl::Status s = Admit("GetStatus", *context); !s.ok()) {
    return Reply(context, s);
  }
  *response = control_plane_->Status();
  return Reply(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* SchedulerService::Drain(
    grpc::CallbackServerContext* context, const v1::DrainRequest* request,
    v1::DrainResponse* response) {
  if (absl::Status s = Admit("Drain", *context); !s.ok()) {
    return Reply(context, s);
  }
  response->set_last_step(control_plane_->Drain(request->stop()));
  return Reply(context, absl::OkStatus());
}

}  // namespace dcp
