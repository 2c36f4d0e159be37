#include "scheduler/server/simulated_agent.h"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/alarm.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/async_stream.h"
#include "grpcpp/support/async_unary_call.h"

namespace dcp::plan_delivery {

SchedulerStubs OpenSchedulerStubs(const std::string& address, int channels) {
  SchedulerStubs stubs;
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments args;
    // Distinct arguments and a local pool: one TCP connection per channel.
    args.SetInt("dcp.simulated_agent_channel", c);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxReceiveMessageSize(-1);
    stubs.push_back(v1::Scheduler::NewStub(grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args)));
  }
  return stubs;
}

absl::StatusOr<std::string> RegisterSimulatedAgents(
    int n, const SchedulerStubs& stubs, const std::string& host) {
  std::string session_id;
  for (int rank = 0; rank < n; ++rank) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    v1::RegisterRequest request;
    request.set_rank(rank);
    request.set_host(host);
    request.set_world_size(n);
    v1::RegisterResponse response;
    const grpc::Status status =
        stubs[rank % stubs.size()]->Register(&context, request, &response);
    if (!status.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "Register of rank ", rank, " failed: ", status.error_message()));
    }
    session_id = response.session_id();
  }
  return session_id;
}

/// A completion-queue tag.
class Handler {
 public:
  virtual ~Handler() = default;
  virtual void Proceed(bool ok) = 0;
};

/// One simulated agent: a plan stream and its timing reports, all on one
/// completion queue, so only that queue's thread touches it once started.
class Agent {
 public:
  Agent(int rank, v1::Scheduler::Stub* stub, grpc::CompletionQueue* cq,
        AgentRun* run)
      : rank_(rank),
        stub_(stub),
        cq_(cq),
        run_(run),
        received_(run->max_steps, absl::InfinitePast()),
        started_tag_(this, &Agent::OnStarted),
        read_tag_(this, &Agent::OnRead),
        finished_tag_(this, &Agent::OnFinished),
        alarm_tag_(this, &Agent::OnAlarm),
        reports_started_tag_(this, &Agent::OnReportsStarted),
        report_written_tag_(this, &Agent::OnReportWritten),
        result_read_tag_(this, &Agent::OnResultRead),
        writes_done_tag_(this, &Agent::OnWritesDone),
        reports_finished_tag_(this, &Agent::OnReportsFinished) {}

  /// Opens the plan stream; after this only the queue's thread touches the
  /// agent (until `AgentRun::all_done`).
  void Start(const std::string& session_id) {
    v1::StreamPlansRequest request;
    request.set_rank(rank_);
    request.set_session_id(session_id);
    request.set_from_step(0);
    reader_ = stub_->PrepareAsyncStreamPlans(&stream_context_, request, cq_);
    reader_->StartCall(&started_tag_);
    if (run_->report_stream) {
      reports_ = stub_->PrepareAsyncStreamReports(&reports_context_, cq_);
      reports_->StartCall(&reports_started_tag_);
    } else {
      reports_done_ = true;
    }
  }

  /// Thread-safe.
  void Cancel() {
    stream_context_.TryCancel();
    if (run_->report_stream) reports_context_.TryCancel();
  }

  /// When each step arrived (InfinitePast: never). Read after all_done.
  const std::vector<absl::Time>& received() const { return received_; }

  void OnReportDone(const grpc::Status& status, int64_t step) {
    --reports_in_flight_;
    if (!status.ok()) {
      run_->Error(absl::StrCat("rank ", rank_, " step ", step,
                               " ReportTimings: ", status.error_message()));
    } else {
      run_->reports_ok.fetch_add(1, std::memory_order_relaxed);
    }
    MaybeDone();
  }

 private:
  struct Tag final : Handler {
    Tag(Agent* agent, void (Agent::*fn)(bool)) : agent(agent), fn(fn) {}
    void Proceed(bool ok) override { (agent->*fn)(ok); }
    Agent* agent;
    void (Agent::*fn)(bool);
  };

  void OnStarted(bool ok) {
    if (!ok) {
      reader_->Finish(&finish_status_, &finished_tag_);
      return;
    }
    reader_->Read(&update_, &read_tag_);
  }

  void OnRead(bool ok) {
    const absl::Time now = absl::Now();
    if (!ok) {
      reader_->Finish(&finish_status_, &finished_tag_);
      return;
    }
    run_->messages.fetch_add(1, std::memory_order_relaxed);
    run_->bytes.fetch_add(static_cast<int64_t>(update_.ByteSizeLong()),
                          std::memory_order_relaxed);
    if (update_.has_step()) {
      run_->steps_received.fetch_add(1, std::memory_order_relaxed);
      const int64_t step = update_.step().step();
      if (step >= 0 && step < static_cast<int64_t>(received_.size())) {
        received_[step] = now;
      }
      if (run_->step_time <= absl::ZeroDuration()) {
        Report(update_.step());
      } else {
        pending_.push_back(std::move(*update_.mutable_step()));
        if (!computing_) StartComputing(std::max(now, step_end_));
      }
    }
    reader_->Read(&update_, &read_tag_);
  }

  void OnFinished(bool /*ok*/) {
    stream_done_ = true;
    // OK after the drain marker; anything else is worth a line.
    if (!finish_status_.ok()) {
      run_->Error(absl::StrCat("rank ", rank_, " plan stream ended with ",
                               finish_status_.error_code(), ": ",
                               finish_status_.error_message()));
    }
    MaybeDone();
  }

  /// Runs the front pending step for `step_time` from `start`: the
  /// previous step's scheduled end when the step was already there (a fixed
  /// cadence, so timer slack does not slow the simulated job down), or its
  /// arrival when the agent was idle waiting for it.
  void StartComputing(absl::Time start) {
    computing_ = true;
    step_end_ = start + run_->step_time;
    alarm_.Set(cq_, absl::ToChronoTime(step_end_), &alarm_tag_);
  }

  void OnAlarm(bool /*ok*/) {
    computing_ = false;
    Report(pending_.front());
    pending_.pop_front();
    if (!pending_.empty()) StartComputing(step_end_);
    MaybeDone();
  }

  void Report(const v1::RankStep& step);

  // The report stream: one write in flight (the front of `to_write_`), one
  // read of results always posted; half-closed once the plan stream ended
  // and every result is in.
  void OnReportsStarted(bool ok) {
    if (!ok) {
      reports_->Finish(&reports_status_, &reports_finished_tag_);
      return;
    }
    reports_started_ = true;
    reports_->Read(&result_, &result_read_tag_);
    WriteNextReport();
  }

  void WriteNextReport() {
    if (!reports_started_ || writing_ || to_write_.empty()) return;
    writing_ = true;
    reports_->Write(to_write_.front(), &report_written_tag_);
  }

  void OnReportWritten(bool ok) {
    writing_ = false;
    if (!ok) return;  // The read fails too and finishes the call.
    to_write_.pop_front();
    WriteNextReport();
    MaybeDone();
  }

  void OnResultRead(bool ok) {
    if (!ok) {
      reports_->Finish(&reports_status_, &reports_finished_tag_);
      return;
    }
    --reports_in_flight_;
    if (result_.code() != 0) {
      run_->Error(absl::StrCat("rank ", rank_, " step ", result_.step(),
                               " StreamReports: ", result_.message()));
    } else {
      run_->reports_ok.fetch_add(1, std::memory_order_relaxed);
    }
    reports_->Read(&result_, &result_read_tag_);
    MaybeDone();
  }

  void OnWritesDone(bool /*ok*/) {}

  void OnReportsFinished(bool /*ok*/) {
    reports_done_ = true;
    // Reports without a result are lost with the call (an error below, or
    // an OK end the server only gives after every result).
    reports_in_flight_ = 0;
    to_write_.clear();
    if (!reports_status_.ok()) {
      run_->Error(absl::StrCat("rank ", rank_, " report stream ended with ",
                               reports_status_.error_code(), ": ",
                               reports_status_.error_message()));
    }
    MaybeDone();
  }

  void MaybeDone() {
    if (done_ || !stream_done_ || reports_in_flight_ > 0 || computing_ ||
        !pending_.empty()) {
      return;
    }
    if (!reports_done_) {
      // Every result is in: half-close; the server then ends the call.
      if (reports_started_ && !writing_ && to_write_.empty() && !writes_done_) {
        writes_done_ = true;
        reports_->WritesDone(&writes_done_tag_);
      }
      return;
    }
    done_ = true;
    run_->AgentDone();
  }

  const int rank_;
  v1::Scheduler::Stub* const stub_;
  grpc::CompletionQueue* const cq_;
  AgentRun* const run_;
  std::vector<absl::Time> received_;

  grpc::ClientContext stream_context_;
  std::unique_ptr<grpc::ClientAsyncReader<v1::PlanUpdate>> reader_;
  v1::PlanUpdate update_;
  grpc::Status finish_status_;
  Tag started_tag_;
  Tag read_tag_;
  Tag finished_tag_;

  grpc::Alarm alarm_;
  Tag alarm_tag_;
  bool computing_ = false;
  absl::Time step_end_ = absl::InfinitePast();
  std::deque<v1::RankStep> pending_;

  grpc::ClientContext reports_context_;
  std::unique_ptr<
      grpc::ClientAsyncReaderWriter<v1::TimingReport, v1::ReportResult>>
      reports_;
  std::deque<v1::TimingReport> to_write_;
  v1::ReportResult result_;
  grpc::Status reports_status_;
  Tag reports_started_tag_;
  Tag report_written_tag_;
  Tag result_read_tag_;
  Tag writes_done_tag_;
  Tag reports_finished_tag_;
  bool reports_started_ = false;
  bool writing_ = false;
  bool writes_done_ = false;
  bool reports_done_ = false;

  int reports_in_flight_ = 0;
  bool stream_done_ = false;
  bool done_ = false;
};

/// One ReportTimings call; deletes itself when it completes.
class ReportCall final : public Handler {
 public:
  explicit ReportCall(Agent* agent) : agent_(agent) {}

  void Start(v1::Scheduler::Stub* stub, grpc::CompletionQueue* cq) {
    rpc_ = stub->PrepareAsyncReportTimings(&context_, request_, cq);
    rpc_->StartCall();
    rpc_->Finish(&ack_, &status_, this);
  }

  void Proceed(bool /*ok*/) override {
    agent_->OnReportDone(status_, request_.step());
    delete this;
  }

  v1::TimingReport& request() { return request_; }

 private:
  Agent* const agent_;
  grpc::ClientContext context_;
  v1::TimingReport request_;
  v1::ReportAck ack_;
  grpc::Status status_;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::ReportAck>> rpc_;
};

void Agent::Report(const v1::RankStep& step) {
  ReportCall* call = nullptr;
  v1::TimingReport* out = nullptr;
  if (run_->report_stream) {
    out = &to_write_.emplace_back();
  } else {
    call = new ReportCall(this);
    out = &call->request();
  }
  v1::TimingReport& report = *out;
  report.set_epoch(step.epoch());
  report.set_step(step.step());
  report.set_rank(rank_);
  report.set_sync_seconds(run_->model.SyncSeconds());
  for (int i = 0; i < step.tasks_size(); ++i) {
    const v1::Task& task = step.tasks(i);
    const int p = task.ranks_size();
    const bool intra = p == 0 || task.ranks(0) / run_->gpus_per_node ==
                                     task.ranks(p - 1) / run_->gpus_per_node;
    v1::TaskTiming* timing = report.add_tasks();
    timing->set_task_index(task.task_index());
    timing->set_micro_step(i);
    timing->set_group_size(p);
    timing->set_seconds(std::max(
        1e-6, run_->model.TaskSeconds(std::max(p, 1), intra,
                                      absl::MakeConstSpan(task.lengths().data(),
                                                          task.lengths_size()),
                                      task.recompute())));
  }
  ++reports_in_flight_;
  run_->reports_sent.fetch_add(1, std::memory_order_relaxed);
  if (step.step() >= 0 && step.step() < run_->max_steps) {
    const int64_t now = absl::ToUnixNanos(absl::Now());
    std::atomic<int64_t>& last = run_->last_report_ns[step.step()];
    int64_t seen = last.load(std::memory_order_relaxed);
    while (seen < now && !last.compare_exchange_weak(seen, now)) {
    }
  }
  if (call != nullptr) {
    call->Start(stub_, cq_);
  } else {
    WriteNextReport();
  }
}

QueueThreads::QueueThreads(int threads) {
  queues_.reserve(threads);
  busy_.resize(threads);
  for (int i = 0; i < threads; ++i) {
    queues_.push_back(std::make_unique<grpc::CompletionQueue>());
  }
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this, i] { Run(i); });
  }
}

QueueThreads::~QueueThreads() { Stop(); }

void QueueThreads::Stop() {
  if (stopped_) return;
  stopped_ = true;
  for (auto& q : queues_) q->Shutdown();
  for (std::thread& t : threads_) t.join();
}

double QueueThreads::CpuSeconds() const {
  double sum = 0;
  for (const std::thread& t : threads_) {
    clockid_t clock = 0;
    timespec ts{};
    if (pthread_getcpuclockid(const_cast<std::thread&>(t).native_handle(),
                              &clock) == 0 &&
        clock_gettime(clock, &ts) == 0) {
      sum += absl::ToDoubleSeconds(absl::DurationFromTimespec(ts));
    }
  }
  return sum;
}

double QueueThreads::BusySeconds() const {
  double sum = 0;
  for (absl::Duration d : busy_) sum += absl::ToDoubleSeconds(d);
  return sum;
}

void QueueThreads::Run(int i) {
  void* tag = nullptr;
  bool ok = false;
  absl::Duration busy;
  while (queues_[i]->Next(&tag, &ok)) {
    const absl::Time start = absl::Now();
    static_cast<Handler*>(tag)->Proceed(ok);
    busy += absl::Now() - start;
  }
  busy_[i] = busy;
}

AgentFleet::AgentFleet(
    int agents, absl::Span<const std::unique_ptr<v1::Scheduler::Stub>> stubs,
    QueueThreads* queues, AgentRun* run) {
  agents_.reserve(agents);
  for (int rank = 0; rank < agents; ++rank) {
    agents_.push_back(
        std::make_unique<Agent>(rank, stubs[rank % stubs.size()].get(),
                                queues->queue(rank % queues->size()), run));
  }
}

AgentFleet::~AgentFleet() = default;

void AgentFleet::Start(const std::string& session_id) {
  for (auto& agent : agents_) agent->Start(session_id);
}

void AgentFleet::Cancel() {
  for (auto& agent : agents_) agent->Cancel();
}

absl::Time AgentFleet::received(int rank, int64_t step) const {
  const std::vector<absl::Time>& received = agents_[rank]->received();
  if (step < 0 || step >= static_cast<int64_t>(received.size())) {
    return absl::InfinitePast();
  }
  return received[step];
}

}  // namespace dcp::plan_delivery
