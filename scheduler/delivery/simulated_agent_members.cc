// The members of an AgentFleet, the simulated agents themselves: what each
// does with its plan stream (StreamAgent: steps recorded on arrival, computed
// for AgentRun::step_time and reported as a worker agent would) and its two
// kinds, the agent of one rank (Agent, with ReportCall for ReportTimings) and
// the agent of a node's ranks on shared streams (NodeAgent).

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "grpcpp/alarm.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/async_stream.h"
#include "grpcpp/support/async_unary_call.h"
#include "proto/timing_report.h"
#include "scheduler/delivery/simulated_agent.h"
#include "scheduler/delivery/simulated_agent_calls.h"

namespace dcp::plan_delivery {

/// The report a worker agent would send for `step` of `rank`: every task
/// timed as the run's cost model predicts it. Counts it as sent and moves
/// the step's last-report time.
void FillReport(AgentRun& run, int rank, const v1::RankStep& step,
                v1::TimingReport& report) {
  std::vector<double> seconds;
  seconds.reserve(step.tasks_size());
  for (const v1::Task& task : step.tasks()) {
    const int p = task.ranks_size();
    const bool intra = p == 0 || task.ranks(0) / run.gpus_per_node ==
                                     task.ranks(p - 1) / run.gpus_per_node;
    seconds.push_back(run.model.TaskSeconds(
        std::max(p, 1), intra,
        absl::MakeConstSpan(task.lengths().data(), task.lengths_size()),
        task.recompute(), task.ulysses()));
  }
  report = TimingReportOf(step, seconds, run.model.SyncSeconds());
  report.set_rank(rank);
  run.reports_sent.fetch_add(1, std::memory_order_relaxed);
  if (step.step() >= 0 && step.step() < run.max_steps) {
    const int64_t now = absl::ToUnixNanos(absl::Now());
    std::atomic<int64_t>& last = run.last_report_ns[step.step()];
    int64_t seen = last.load(std::memory_order_relaxed);
    while (seen < now && !last.compare_exchange_weak(seen, now)) {
    }
  }
}

/// Counts one plan message of `bytes` bytes.
void CountMessage(AgentRun& run, size_t bytes) {
  run.messages.fetch_add(1, std::memory_order_relaxed);
  run.bytes.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
}

/// Records when `step` arrived in `received` (steps past it are not kept),
/// and its planning time in the run if none is yet.
void MarkReceived(AgentRun& run, const v1::RankStep& step, absl::Time now,
                  std::vector<absl::Time>& received) {
  run.steps_received.fetch_add(1, std::memory_order_relaxed);
  const int64_t s = step.step();
  if (s >= 0 && s < static_cast<int64_t>(received.size())) {
    received[s] = now;
  }
  if (s >= 0 && s < run.max_steps) {
    int64_t none = 0;
    run.planned_at_us[s].compare_exchange_strong(
        none, step.planned_at_unix_micros(), std::memory_order_relaxed);
  }
}

/// What every simulated agent does with its plan stream of `Plan`
/// messages: records when each step arrived, reports each step (on receipt,
/// or after `AgentRun::step_time` of computing it, the steps of one number
/// together), and says it is done once its plan stream ended and every
/// report has its answer. A subclass opens the calls and turns messages
/// into steps and steps into reports. All on one completion queue, so only
/// that queue's thread touches it once started.
template <typename Plan>
class StreamAgent : public SimulatedAgent {
 public:
  StreamAgent(std::vector<int> ranks, v1::Scheduler::Stub* stub,
              grpc::CompletionQueue* cq, AgentRun* run)
      : stub_(stub),
        cq_(cq),
        run_(run),
        ranks_(std::move(ranks)),
        started_tag_(this, &StreamAgent::OnStarted),
        read_tag_(this, &StreamAgent::OnRead),
        finished_tag_(this, &StreamAgent::OnFinished),
        alarm_tag_(this, &StreamAgent::OnAlarm) {
    for (size_t i = 0; i < ranks_.size(); ++i) {
      index_of_[ranks_[i]] = i;
      received_.emplace_back(run->max_steps, absl::InfinitePast());
    }
  }

  void Cancel() override {
    plan_context_.TryCancel();
    CancelReports();
  }

  const std::vector<absl::Time>& received(int rank) const override {
    return received_[index_of_.at(rank)];
  }

 protected:
  /// Starts the plan stream `reader`, prepared on `plan_context()`.
  void StartPlans(std::unique_ptr<grpc::ClientAsyncReader<Plan>> reader) {
    reader_ = std::move(reader);
    reader_->StartCall(&started_tag_);
  }
  grpc::ClientContext* plan_context() { return &plan_context_; }

  /// The steps in `plan` (moved out), after noting what else it says.
  virtual std::vector<v1::RankStep> TakeSteps(Plan& plan) = 0;
  /// Sends the reports of `steps` (each a step of one of the ranks).
  virtual void Report(const std::vector<v1::RankStep>& steps) = 0;
  virtual void CancelReports() = 0;
  /// Whether the report calls are over; if not, asks them to end once
  /// every report is written.
  virtual bool ReportsDone() = 0;

  /// Called per answered report.
  void Answered(int rank, int64_t step, int code, absl::string_view what,
                absl::string_view message) {
    --reports_in_flight_;
    if (code != 0) {
      run_->Error(absl::StrCat("rank ", rank, " step ", step, " ", what, ": ",
                               message));
    } else {
      run_->reports_ok.fetch_add(1, std::memory_order_relaxed);
    }
    MaybeDone();
  }

  /// Called when the report calls ended with `status`: reports without an
  /// answer are lost with them.
  void ReportsEnded(const grpc::Status& status) {
    reports_in_flight_ = 0;
    if (!status.ok()) {
      run_->Error(absl::StrCat("rank ", ranks_.front(),
                               " report stream ended with ",
                               status.error_code(), ": ",
                               status.error_message()));
    }
    MaybeDone();
  }

  void AddInFlight(int n) { reports_in_flight_ += n; }

  v1::Scheduler::Stub* const stub_;
  grpc::CompletionQueue* const cq_;
  AgentRun* const run_;
  const std::vector<int> ranks_;

 private:
  void OnStarted(bool ok) {
    if (!ok) {
      reader_->Finish(&finish_status_, &finished_tag_);
      return;
    }
    reader_->Read(&plan_, &read_tag_);
  }

  void OnRead(bool ok) {
    const absl::Time now = absl::Now();
    if (!ok) {
      reader_->Finish(&finish_status_, &finished_tag_);
      return;
    }
    CountMessage(*run_, plan_.ByteSizeLong());
    std::vector<v1::RankStep> steps = TakeSteps(plan_);
    std::vector<v1::RankStep> now_due;
    for (v1::RankStep& step : steps) {
      const auto it = index_of_.find(step.rank());
      if (it == index_of_.end()) {
        run_->Error(absl::StrCat("a plan for rank ", step.rank(),
                                 " on a stream that did not ask for it"));
        continue;
      }
      MarkReceived(*run_, step, now, received_[it->second]);
      if (run_->step_time <= absl::ZeroDuration()) {
        now_due.push_back(std::move(step));
      } else {
        pending_[step.step()].push_back(std::move(step));
      }
    }
    if (!now_due.empty()) Report(now_due);
    if (!computing_ && !pending_.empty()) {
      StartComputing(std::max(now, step_end_));
    }
    reader_->Read(&plan_, &read_tag_);
  }

  void OnFinished(bool /*ok*/) {
    stream_done_ = true;
    // OK after the drain marker; anything else is worth a line.
    if (!finish_status_.ok()) {
      run_->Error(absl::StrCat("rank ", ranks_.front(),
                               " plan stream ended with ",
                               finish_status_.error_code(), ": ",
                               finish_status_.error_message()));
    }
    MaybeDone();
  }

  /// Runs the earliest pending step for `step_time` from `start`: the
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
    const std::vector<v1::RankStep> steps = std::move(pending_.begin()->second);
    pending_.erase(pending_.begin());
    Report(steps);
    if (!pending_.empty()) StartComputing(step_end_);
    MaybeDone();
  }

  void MaybeDone() {
    if (done_ || !stream_done_ || reports_in_flight_ > 0 || computing_ ||
        !pending_.empty() || !ReportsDone()) {
      return;
    }
    done_ = true;
    // The run counts agents, one per rank.
    for (size_t i = 0; i < ranks_.size(); ++i) run_->AgentDone();
  }

  absl::flat_hash_map<int, size_t> index_of_;
  std::vector<std::vector<absl::Time>> received_;

  grpc::ClientContext plan_context_;
  std::unique_ptr<grpc::ClientAsyncReader<Plan>> reader_;
  Plan plan_;
  grpc::Status finish_status_;
  MemberTag<StreamAgent> started_tag_, read_tag_, finished_tag_, alarm_tag_;

  grpc::Alarm alarm_;
  bool computing_ = false;
  absl::Time step_end_ = absl::InfinitePast();
  /// Steps received and not yet computed, by step number.
  std::map<int64_t, std::vector<v1::RankStep>> pending_;

  int reports_in_flight_ = 0;
  bool stream_done_ = false;
  bool done_ = false;
};

class ReportCall;

/// One simulated dcp-agent: a rank's StreamPlans stream, and its reports on
/// a StreamReports stream or (without `AgentRun::report_stream`) a
/// ReportTimings call each.
class Agent final : public StreamAgent<v1::PlanUpdate> {
 public:
  Agent(int rank, v1::Scheduler::Stub* stub, grpc::CompletionQueue* cq,
        AgentRun* run)
      : StreamAgent({rank}, stub, cq, run),
        reports_(
            [this](const v1::ReportResult& r) {
              Answered(ranks_.front(), r.step(), r.code(), "StreamReports",
                       r.message());
            },
            [this](const grpc::Status& s) { ReportsEnded(s); }) {}

  void Start(const std::string& session_id) override {
    v1::StreamPlansRequest request;
    request.set_rank(ranks_.front());
    request.set_session_id(session_id);
    request.set_from_step(0);
    StartPlans(stub_->PrepareAsyncStreamPlans(plan_context(), request, cq_));
    if (run_->report_stream) {
      reports_.Start(stub_->PrepareAsyncStreamReports(reports_.context(), cq_));
    }
  }

  /// A ReportTimings call's answer.
  void OnReportDone(const grpc::Status& status, int64_t step) {
    Answered(ranks_.front(), step, status.error_code(), "ReportTimings",
             status.error_message());
  }

 private:
  std::vector<v1::RankStep> TakeSteps(v1::PlanUpdate& plan) override {
    std::vector<v1::RankStep> steps;
    if (plan.has_step()) steps.push_back(std::move(*plan.mutable_step()));
    return steps;
  }

  void Report(const std::vector<v1::RankStep>& steps) override;

  void CancelReports() override {
    if (run_->report_stream) reports_.context()->TryCancel();
  }

  bool ReportsDone() override {
    if (!run_->report_stream || reports_.done()) return true;
    reports_.Close();
    return false;
  }

  ReportChannel<v1::TimingReport, v1::ReportResult> reports_;
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

void Agent::Report(const std::vector<v1::RankStep>& steps) {
  for (const v1::RankStep& step : steps) {
    AddInFlight(1);
    if (run_->report_stream) {
      v1::TimingReport report;
      FillReport(*run_, ranks_.front(), step, report);
      reports_.Send(std::move(report));
    } else {
      auto* call = new ReportCall(this);
      FillReport(*run_, ranks_.front(), step, call->request());
      call->Start(stub_, cq_);
    }
  }
}

/// The simulated agents of one node sharing one StreamNodePlans stream and
/// one StreamNodeReports stream (a node-level agent): the reports due at
/// once travel in one batch.
class NodeAgent final : public StreamAgent<v1::NodePlanUpdate> {
 public:
  NodeAgent(std::vector<int> ranks, v1::Scheduler::Stub* stub,
            grpc::CompletionQueue* cq, AgentRun* run)
      : StreamAgent(std::move(ranks), stub, cq, run),
        reports_(
            [this](const v1::ReportResultBatch& batch) {
              for (const v1::ReportResult& r : batch.results()) {
                Answered(r.rank(), r.step(), r.code(), "StreamNodeReports",
                         r.message());
              }
            },
            [this](const grpc::Status& s) { ReportsEnded(s); }) {}

  void Start(const std::string& session_id) override {
    v1::NodePlansRequest request;
    for (int rank : ranks_) {
      v1::StreamPlansRequest* one = request.add_ranks();
      one->set_rank(rank);
      one->set_session_id(session_id);
      one->set_from_step(0);
    }
    StartPlans(
        stub_->PrepareAsyncStreamNodePlans(plan_context(), request, cq_));
    reports_.Start(
        stub_->PrepareAsyncStreamNodeReports(reports_.context(), cq_));
  }

 private:
  std::vector<v1::RankStep> TakeSteps(v1::NodePlanUpdate& plan) override {
    std::vector<v1::RankStep> steps;
    for (v1::RankPlanUpdate& part : *plan.mutable_updates()) {
      if (part.has_end() && part.end().code() != 0) {
        run_->Error(absl::StrCat("rank ", part.rank(), " plan part ended with ",
                                 part.end().code(), ": ",
                                 part.end().message()));
      }
      if (!part.update().has_step()) continue;
      steps.push_back(std::move(*part.mutable_update()->mutable_step()));
    }
    return steps;
  }

  void Report(const std::vector<v1::RankStep>& steps) override {
    v1::TimingReportBatch batch;
    for (const v1::RankStep& step : steps) {
      FillReport(*run_, step.rank(), step, *batch.add_reports());
    }
    AddInFlight(batch.reports_size());
    reports_.Send(std::move(batch));
  }

  void CancelReports() override { reports_.context()->TryCancel(); }

  bool ReportsDone() override {
    if (reports_.done()) return true;
    reports_.Close();
    return false;
  }

  ReportChannel<v1::TimingReportBatch, v1::ReportResultBatch> reports_;
};

std::unique_ptr<SimulatedAgent> MakeRankAgent(int rank,
                                              v1::Scheduler::Stub* stub,
                                              grpc::CompletionQueue* cq,
                                              AgentRun* run) {
  return std::make_unique<Agent>(rank, stub, cq, run);
}

std::unique_ptr<SimulatedAgent> MakeNodeAgent(std::vector<int> ranks,
                                              v1::Scheduler::Stub* stub,
                                              grpc::CompletionQueue* cq,
                                              AgentRun* run) {
  return std::make_unique<NodeAgent>(std::move(ranks), stub, cq, run);
}

}  // namespace dcp::plan_delivery
