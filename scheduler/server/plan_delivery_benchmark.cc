// Plan-delivery benchmark of the control plane: how long after a step is
// planned every agent holds its RankStep, and how many steps a second the
// scheduler sustains, with N simulated agents on loopback. The goal:
// step-delivery p99 under 5 ms at 1,024 agents, at least 10 steps/s.
//
//   bazel run -c opt //scheduler:plan_delivery_benchmark --
//     --agents=256,1024 --steps=100 [--step_ms=100] [--channels=8]
//     [--fanout_threads=-1]
//
// Per row it starts an in-process SchedulerServer on 127.0.0.1:0 (bundled
// Wikipedia trace, llama3-8b, world = N, N * --tokens_per_rank tokens a
// step), registers N agents and opens their N StreamPlans streams,
// multiplexed over --channels HTTP/2 connections and driven by
// --client_threads completion-queue threads (the async API: real agents are
// separate processes, and a thread per agent would measure the OS scheduler).
// Each agent reports the timings of every step it receives (one TaskTiming
// per task, seconds as the initial cost model predicts them, so refits keep
// the model and the plans where they are): at once by default, so the
// look-ahead advances as fast as the loop allows (the scheduler's ceiling),
// or with --step_ms, on the cadence of a job whose steps take that long (the
// latency at a given rate, without the planner running flat out).
//
// What is measured, per step s (steps planned before the agents connected
// and --warmup_steps more are left out):
//   t0(s)      the end of planning s: the control plane's second clock
//              reading on the planning thread (its `start`, then its end
//              after the per-rank views are cut), taken through an injected
//              Clock and checked against PlannedStepEvent::planning_time;
//   t(a, s)    when agent a's completion-queue thread saw the message;
//   step       max over agents of t(a, s) - t0(s) (a step is delivered when
//              its last rank has it); agent: every t(a, s) - t0(s);
//   spread     last minus first arrival of the step;
//   plan       PlannedStepEvent::planning_time (wall), and the planning
//              thread's CPU time over the same span;
//   fan-out    on_step_planned time - t0(s): the control plane calls it
//              after waking every plan stream on the planning thread, so
//              this is how long (wall, CPU) that thread spent publishing the
//              step; the last stream cannot be written before it ends
//              (with a fan-out pool, --fanout_threads, the wakes only queue
//              the streams and the pool's threads do the writes);
//   steps/s    1 / the least-squares slope of delivery time over step.
// Server and agents share this machine's cores: read the load table (this
// process's cores, other processes' cores) before blaming the scheduler.

#include <pthread.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/clock.h"
#include "common/model_spec.h"
#include "common/status_macros.h"
#include "grpcpp/alarm.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/async_stream.h"
#include "grpcpp/support/async_unary_call.h"
#include "grpcpp/support/channel_arguments.h"
#include "proto/scheduler_service.grpc.pb.h"
#include "scheduler/cli/job_config.h"
#include "scheduler/control/control_plane.h"
#include "scheduler/planner/cost_model.h"
#include "scheduler/server/scheduler_server.h"

ABSL_FLAG(std::vector<std::string>, agents,
          std::vector<std::string>({"256", "1024"}),
          "Comma-separated agent counts (world sizes), one row each.");
ABSL_FLAG(int64_t, steps, 100, "Steps measured per row (after warm-up).");
ABSL_FLAG(int, warmup_steps, 4,
          "Steps left out after the ones planned before the agents "
          "connected (the look-ahead).");
ABSL_FLAG(double, max_seconds, 30,
          "Drain a row after this long even if --steps were not reached.");
ABSL_FLAG(int, lookahead_steps, 4, "ControlPlaneOptions::lookahead_steps.");
ABSL_FLAG(int, channels, 8,
          "gRPC channels (TCP connections) the agents' calls share.");
ABSL_FLAG(int, fanout_threads, -1,
          "SchedulerServerOptions::fanout_threads (-1: auto, 0: pump on the "
          "planner thread, N: a pool of N threads).");
ABSL_FLAG(int, client_threads, 2,
          "Threads polling the agents' completion queues.");
ABSL_FLAG(int64_t, tokens_per_rank, 65536,
          "Tokens per rank per step: tokens_per_step = agents * this.");
ABSL_FLAG(bool, report_stream, true,
          "Agents send their timing reports on one StreamReports stream each "
          "(false: a ReportTimings call per step).");
ABSL_FLAG(double, step_ms, 0,
          "Simulated compute per step: an agent reports a step this long "
          "after starting it, one step at a time (0 = report on receipt).");
ABSL_FLAG(int, refit_every, 64,
          "ControlPlaneOptions::refit_every (the daemon's default is 64 task "
          "observations; at 1,024 agents a step has thousands of tasks).");
ABSL_FLAG(std::string, lengths, "data/lengths/wikipedia.txt",
          "Length trace (text, one length a line).");
ABSL_FLAG(std::string, model, "llama3-8b", "Built-in model name.");
ABSL_FLAG(int64_t, window, 131072, "Context window.");
ABSL_FLAG(double, goal_p99_ms, 5, "Goal: step-delivery p99 below this.");
ABSL_FLAG(double, goal_steps_per_s, 10, "Goal: sustained steps per second.");
ABSL_FLAG(int, goal_agents, 1024, "The agent count the goal is stated at.");

namespace dcp {
namespace {

// ------------------------------------------------------------ measurement

/// CPU time of the calling thread.
absl::Duration ThreadCpuTime() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return absl::DurationFromTimespec(ts);
}

/// The real clock, remembering on each thread its first two readings (and
/// the thread's CPU time then) since `TakePlanningReadings` was last called
/// there. On the planning thread these are the control plane's start and
/// end of planning a step, because `PlanOneStep` reads the clock exactly
/// there before anything else on that thread does (the readings are checked
/// against the reported planning time, so a change of that order shows up
/// as a fallback count, not as wrong numbers). Thread-safe: all state is
/// thread-local.
class PlanningClock final : public Clock {
 public:
  struct Readings {
    absl::Time wall[2];
    absl::Duration cpu[2];
    int64_t count = 0;
  };

  absl::Time Now() override {
    const absl::Time now = absl::Now();
    Readings& r = readings_;
    if (r.count < 2) {
      r.wall[r.count] = now;
      r.cpu[r.count] = ThreadCpuTime();
    }
    ++r.count;
    return now;
  }

  /// The calling thread's readings since the previous call, if there were
  /// at least two; resets them.
  static std::optional<Readings> TakePlanningReadings() {
    std::optional<Readings> out;
    if (readings_.count >= 2) out = readings_;
    readings_.count = 0;
    return out;
  }

 private:
  static thread_local Readings readings_;
};

thread_local PlanningClock::Readings PlanningClock::readings_;

/// One planned step as the control plane reported it.
struct PlannedStep {
  int64_t step = 0;
  /// End of planning (t0); the callback time when `exact` is false.
  absl::Time planned;
  /// When on_step_planned ran: after every stream was woken.
  absl::Time callback;
  absl::Duration planning_time;
  /// CPU time of the planning thread planning the step, and publishing it
  /// (t0 to the callback); zero when not `exact`.
  absl::Duration planning_cpu;
  absl::Duration fanout_cpu;
  int tasks = 0;
  int groups = 0;
  bool exact = false;
};

/// Collects on_step_planned events. Thread-safe.
class StepLog {
 public:
  void Add(const PlannedStepEvent& event) {
    PlannedStep p;
    p.callback = absl::Now();
    p.step = event.step;
    p.planning_time = event.planning_time;
    p.tasks = event.tasks;
    p.groups = event.groups;
    const absl::Duration cpu = ThreadCpuTime();
    const auto readings = PlanningClock::TakePlanningReadings();
    p.exact = readings.has_value() &&
              readings->wall[1] - readings->wall[0] == event.planning_time;
    p.planned = p.exact ? readings->wall[1] : p.callback;
    if (p.exact) {
      p.planning_cpu = readings->cpu[1] - readings->cpu[0];
      p.fanout_cpu = cpu - readings->cpu[1];
    }
    absl::MutexLock lock(&mu_);
    steps_.push_back(p);
  }

  std::vector<PlannedStep> Snapshot() const {
    absl::MutexLock lock(&mu_);
    return steps_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<PlannedStep> steps_ ABSL_GUARDED_BY(mu_);
};

/// CPU time of this process, and busy/total jiffies of the whole machine.
struct CpuSample {
  absl::Time wall;
  double process_seconds = 0;
  int64_t machine_busy = 0;
  int64_t machine_steal = 0;
  int64_t machine_total = 0;

  static CpuSample Take() {
    CpuSample s;
    s.wall = absl::Now();
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    auto seconds = [](const timeval& tv) {
      return static_cast<double>(tv.tv_sec) + 1e-6 * tv.tv_usec;
    };
    s.process_seconds = seconds(usage.ru_utime) + seconds(usage.ru_stime);
    std::ifstream stat("/proc/stat");
    std::string cpu;
    stat >> cpu;
    int64_t v = 0;
    for (int i = 0; i < 10 && (stat >> v); ++i) {
      s.machine_total += v;
      if (i != 3 && i != 4) s.machine_busy += v;  // idle, iowait
      if (i == 7) s.machine_steal += v;
    }
    return s;
  }
};

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return absl::StrCat(one, " ", five, " ", fifteen);
}

int ProcessThreads() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    int threads = 0;
    if (line.rfind("Threads:", 0) == 0 &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(8)),
                         &threads)) {
      return threads;
    }
  }
  return -1;
}

int OnlineCpus() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

/// The sustained rate: 1 / the least-squares slope of delivery time
/// (seconds) over step number, so one late first or last step does not
/// skew it. 0 with fewer than two steps.
double StepsPerSecond(const std::vector<std::pair<double, double>>& points) {
  if (points.size() < 2) return 0;
  double mx = 0, my = 0;
  for (const auto& [x, y] : points) {
    mx += x;
    my += y;
  }
  mx /= points.size();
  my /= points.size();
  double sxy = 0, sxx = 0;
  for (const auto& [x, y] : points) {
    sxy += (x - mx) * (y - my);
    sxx += (x - mx) * (x - mx);
  }
  if (sxx <= 0 || sxy <= 0) return 0;
  return sxx / sxy;
}

/// Nearest-rank percentile; NaN for no values.
double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(q * static_cast<double>(values.size()));
  const size_t i = static_cast<size_t>(std::max(1.0, rank)) - 1;
  return values[std::min(i, values.size() - 1)];
}

// ------------------------------------------------------------------ agents

/// A completion-queue tag.
class Handler {
 public:
  virtual ~Handler() = default;
  virtual void Proceed(bool ok) = 0;
};

/// What every agent of a row shares. Thread-safe.
struct AgentRun {
  AgentRun(int agents, int64_t max_steps, const CostModel& model,
           int gpus_per_node, absl::Duration step_time, bool report_stream)
      : remaining(agents),
        max_steps(max_steps),
        model(model),
        gpus_per_node(gpus_per_node),
        step_time(step_time),
        report_stream(report_stream) {}

  void AgentDone() {
    if (remaining.fetch_sub(1) == 1) all_done.Notify();
  }
  void Error(const std::string& what) {
    errors.fetch_add(1);
    absl::MutexLock lock(&mu);
    if (first_error.empty()) first_error = what;
  }

  std::atomic<int> remaining;
  absl::Notification all_done;
  const int64_t max_steps;
  const CostModel model;
  const int gpus_per_node;
  const absl::Duration step_time;
  const bool report_stream;
  std::atomic<int64_t> errors{0};
  std::atomic<int64_t> bytes{0};
  std::atomic<int64_t> messages{0};
  absl::Mutex mu;
  std::string first_error ABSL_GUARDED_BY(mu);
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
      if (reports_started_ && !writing_ && to_write_.empty() &&
          !writes_done_) {
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
  if (call != nullptr) {
    call->Start(stub_, cq_);
  } else {
    WriteNextReport();
  }
}

/// Drives completion queues on a fixed set of threads, recording how long
/// each spent inside handlers (the simulated agents' own CPU).
class QueueThreads {
 public:
  explicit QueueThreads(int threads) {
    queues_.reserve(threads);
    busy_.resize(threads);
    for (int i = 0; i < threads; ++i) {
      queues_.push_back(std::make_unique<grpc::CompletionQueue>());
    }
    for (int i = 0; i < threads; ++i) {
      threads_.emplace_back([this, i] { Run(i); });
    }
  }

  ~QueueThreads() { Stop(); }

  grpc::CompletionQueue* queue(int i) { return queues_[i].get(); }
  int size() const { return static_cast<int>(queues_.size()); }

  /// Shuts the queues down and joins; every call on them must be over.
  void Stop() {
    if (stopped_) return;
    stopped_ = true;
    for (auto& q : queues_) q->Shutdown();
    for (std::thread& t : threads_) t.join();
  }

  /// CPU seconds the queue threads used so far (gRPC's client work done
  /// while polling, and the handlers), summed; before Stop.
  double CpuSeconds() const {
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

  /// Seconds spent in handlers, summed over threads; call after Stop.
  double BusySeconds() const {
    double sum = 0;
    for (absl::Duration d : busy_) sum += absl::ToDoubleSeconds(d);
    return sum;
  }

 private:
  void Run(int i) {
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

  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues_;
  std::vector<absl::Duration> busy_;
  std::vector<std::thread> threads_;
  bool stopped_ = false;
};

// --------------------------------------------------------------------- rows

struct RowConfig {
  int agents = 0;
  int64_t steps = 0;
  int warmup_steps = 0;
  absl::Duration max_time;
  int lookahead_steps = 0;
  int refit_every = 0;
  int channels = 0;
  int client_threads = 0;
  int64_t tokens_per_rank = 0;
  absl::Duration step_time;
  bool report_stream = true;
  int64_t window = 0;
  ModelSpec model;
  const std::vector<int32_t>* lengths = nullptr;
};

struct RowResult {
  int agents = 0;
  /// False when the row could not start (then only `first_error` is set).
  bool ran = false;
  int64_t measured_steps = 0;
  int64_t incomplete_steps = 0;
  int64_t inexact_t0 = 0;
  double step_p50_ms = 0, step_p99_ms = 0, step_max_ms = 0;
  double agent_p50_ms = 0, agent_p99_ms = 0;
  double spread_p50_ms = 0;
  double steps_per_s = 0;
  double plan_p50_ms = 0, plan_p99_ms = 0;
  double fanout_p50_ms = 0, fanout_p99_ms = 0;
  double plan_cpu_p50_ms = 0, fanout_cpu_p50_ms = 0;
  double tasks_per_step = 0;
  double bytes_per_message = 0;
  double client_ms_per_step = 0;
  /// CPU ms per step of the agents' queue threads, and of the rest of the
  /// process: the scheduler, plus gRPC threads both ends share.
  double agents_cpu_ms_per_step = 0;
  double server_cpu_ms_per_step = 0;
  double process_cores = 0;
  double machine_busy = 0;
  double machine_steal = 0;
  /// Cores busy outside this process (other users of the machine).
  double other_cores = 0;
  int threads = 0;
  double register_s = 0;
  int64_t errors = 0;
  std::string first_error;
  std::string load_before, load_after;
};

/// Each channel is a loopback TCP connection, so two sockets in this
/// process (client and server end). Raises the soft limit on open files to
/// the hard one when that is needed, and says what to do when even that is
/// too low (with 1,024 channels the common default of 1,024 is).
absl::Status EnsureFileDescriptors(int channels) {
  const rlim_t needed = 2 * static_cast<rlim_t>(channels) + 64;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return absl::OkStatus();
  if (limit.rlim_cur >= needed) return absl::OkStatus();
  if (limit.rlim_max >= needed) {
    limit.rlim_cur = needed;
    if (setrlimit(RLIMIT_NOFILE, &limit) == 0) return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "--channels=", channels, " needs about ", needed,
      " open files but the limit is ", limit.rlim_cur, " (hard ",
      limit.rlim_max, "); raise it (ulimit -n) or use fewer --channels"));
}

absl::StatusOr<RowResult> RunRow(const RowConfig& config) {
  RETURN_IF_ERROR(EnsureFileDescriptors(config.channels));
  const int n = config.agents;
  const int64_t first_measured = config.lookahead_steps + config.warmup_steps;
  const int64_t max_steps = first_measured + config.steps;

  PlanningClock clock;
  StepLog log;
  SchedulerServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.shutdown_grace = absl::Seconds(1);
  options.stop_grace = absl::Seconds(1);
  options.fanout_threads = absl::GetFlag(FLAGS_fanout_threads);
  ControlPlaneOptions& cp = options.control_plane;
  cp.lengths = *config.lengths;
  cp.window = config.window;
  cp.model = config.model;
  cp.world_size = n;
  cp.tokens_per_step = int64_t{n} * config.tokens_per_rank;
  cp.lookahead_steps = config.lookahead_steps;
  cp.refit_every = config.refit_every;
  cp.max_steps = max_steps;
  cp.clock = &clock;
  cp.on_step_planned = [&log](const PlannedStepEvent& e) { log.Add(e); };
  const CostModel model = CostModel::FromSpecs(cp.cluster, cp.model, n);
  const int gpus_per_node = cp.cluster.gpus_per_node;
  ASSIGN_OR_RETURN(std::unique_ptr<SchedulerServer> server,
                   SchedulerServer::Start(std::move(options)));
  const std::string address = server->address();

  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::Scheduler::Stub>> stubs;
  for (int c = 0; c < config.channels; ++c) {
    grpc::ChannelArguments args;
    // Distinct arguments and a local pool: one TCP connection per channel.
    args.SetInt("dcp.benchmark_channel", c);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxReceiveMessageSize(-1);
    channels.push_back(grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args));
    stubs.push_back(v1::Scheduler::NewStub(channels.back()));
  }

  RowResult result;
  result.agents = n;
  result.ran = true;
  const absl::Time register_start = absl::Now();
  std::string session_id;
  for (int rank = 0; rank < n; ++rank) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    v1::RegisterRequest request;
    request.set_rank(rank);
    request.set_host("bench");
    request.set_world_size(n);
    v1::RegisterResponse response;
    const grpc::Status status =
        stubs[rank % config.channels]->Register(&context, request, &response);
    if (!status.ok()) {
      return absl::UnavailableError(absl::StrCat(
          "Register of rank ", rank, " failed: ", status.error_message()));
    }
    session_id = response.session_id();
  }
  result.register_s = absl::ToDoubleSeconds(absl::Now() - register_start);

  AgentRun run(n, max_steps, model, gpus_per_node, config.step_time,
               config.report_stream);
  QueueThreads queues(config.client_threads);
  std::vector<std::unique_ptr<Agent>> agents;
  agents.reserve(n);
  result.load_before = LoadAverage();
  const CpuSample cpu_start = CpuSample::Take();
  const double agents_cpu_start = queues.CpuSeconds();
  for (int rank = 0; rank < n; ++rank) {
    agents.push_back(
        std::make_unique<Agent>(rank, stubs[rank % config.channels].get(),
                                queues.queue(rank % queues.size()), &run));
    agents.back()->Start(session_id);
  }

  // Drain when the time is up; cut everything off well after that.
  if (!run.all_done.WaitForNotificationWithTimeout(config.max_time)) {
    const int64_t last = server->control_plane().Drain(/*stop=*/false);
    std::fprintf(stderr,
                 "  %d agents: --max_seconds reached, drained after step "
                 "%lld\n",
                 n, static_cast<long long>(last));
    if (!run.all_done.WaitForNotificationWithTimeout(absl::Seconds(30))) {
      std::fprintf(stderr,
                   "  %d agents: not done 30 s after the drain; "
                   "cancelling\n",
                   n);
      server->Shutdown();
      for (auto& agent : agents) agent->Cancel();
      run.all_done.WaitForNotification();
    }
  }
  const CpuSample cpu_end = CpuSample::Take();
  const double agents_cpu = queues.CpuSeconds() - agents_cpu_start;
  result.threads = ProcessThreads();
  result.load_after = LoadAverage();
  server->Shutdown();
  queues.Stop();

  const double wall = absl::ToDoubleSeconds(cpu_end.wall - cpu_start.wall);
  result.process_cores =
      (cpu_end.process_seconds - cpu_start.process_seconds) / wall;
  const int64_t total = cpu_end.machine_total - cpu_start.machine_total;
  result.machine_busy =
      total > 0
          ? static_cast<double>(cpu_end.machine_busy - cpu_start.machine_busy) /
                static_cast<double>(total)
          : 0;
  result.machine_steal = total > 0
                             ? static_cast<double>(cpu_end.machine_steal -
                                                   cpu_start.machine_steal) /
                                   static_cast<double>(total)
                             : 0;
  result.other_cores =
      std::max(0.0, result.machine_busy * OnlineCpus() - result.process_cores);
  result.errors = run.errors.load();
  {
    absl::MutexLock lock(&run.mu);
    result.first_error = run.first_error;
  }
  const int64_t messages = run.messages.load();
  result.bytes_per_message =
      messages > 0 ? static_cast<double>(run.bytes.load()) / messages : 0;

  // Per step: t0, and the first and last arrival over the agents.
  std::vector<PlannedStep> planned = log.Snapshot();
  std::vector<double> step_ms, agent_ms, spread_ms, plan_ms, fanout_ms;
  std::vector<double> plan_cpu_ms, fanout_cpu_ms;
  double tasks = 0;
  // (step, delivery time) of every fully delivered step, for the rate.
  std::vector<std::pair<double, double>> delivered;
  for (const PlannedStep& p : planned) {
    if (p.step < first_measured || p.step >= max_steps) continue;
    if (!p.exact) ++result.inexact_t0;
    absl::Time earliest = absl::InfiniteFuture();
    absl::Time latest = absl::InfinitePast();
    bool complete = true;
    for (const auto& agent : agents) {
      const absl::Time t = agent->received()[p.step];
      if (t == absl::InfinitePast()) {
        complete = false;
        continue;
      }
      agent_ms.push_back(absl::ToDoubleMilliseconds(t - p.planned));
      earliest = std::min(earliest, t);
      latest = std::max(latest, t);
    }
    if (!complete) {
      ++result.incomplete_steps;
      continue;
    }
    ++result.measured_steps;
    step_ms.push_back(absl::ToDoubleMilliseconds(latest - p.planned));
    spread_ms.push_back(absl::ToDoubleMilliseconds(latest - earliest));
    plan_ms.push_back(absl::ToDoubleMilliseconds(p.planning_time));
    fanout_ms.push_back(absl::ToDoubleMilliseconds(p.callback - p.planned));
    if (p.exact) {
      plan_cpu_ms.push_back(absl::ToDoubleMilliseconds(p.planning_cpu));
      fanout_cpu_ms.push_back(absl::ToDoubleMilliseconds(p.fanout_cpu));
    }
    tasks += p.tasks;
    delivered.emplace_back(static_cast<double>(p.step),
                           absl::ToDoubleSeconds(latest - cpu_start.wall));
  }
  result.step_p50_ms = Percentile(step_ms, 0.5);
  result.step_p99_ms = Percentile(step_ms, 0.99);
  result.step_max_ms = Percentile(step_ms, 1.0);
  result.agent_p50_ms = Percentile(agent_ms, 0.5);
  result.agent_p99_ms = Percentile(agent_ms, 0.99);
  result.spread_p50_ms = Percentile(spread_ms, 0.5);
  result.plan_p50_ms = Percentile(plan_ms, 0.5);
  result.plan_p99_ms = Percentile(plan_ms, 0.99);
  result.fanout_p50_ms = Percentile(fanout_ms, 0.5);
  result.fanout_p99_ms = Percentile(fanout_ms, 0.99);
  result.plan_cpu_p50_ms = Percentile(plan_cpu_ms, 0.5);
  result.fanout_cpu_p50_ms = Percentile(fanout_cpu_ms, 0.5);
  if (result.measured_steps > 0) {
    result.tasks_per_step = tasks / result.measured_steps;
  }
  result.steps_per_s = StepsPerSecond(delivered);
  if (!planned.empty()) {
    const double steps = static_cast<double>(planned.size());
    result.client_ms_per_step = 1e3 * queues.BusySeconds() / steps;
    result.agents_cpu_ms_per_step = 1e3 * agents_cpu / steps;
    result.server_cpu_ms_per_step =
        1e3 *
        (cpu_end.process_seconds - cpu_start.process_seconds - agents_cpu) /
        steps;
  }
  return result;
}

/// One line per row against the goal, from the measured numbers. With
/// paced agents (`step_time` > 0) the agents cap the rate at 1 / step_time,
/// so the rate part asks whether the scheduler kept that pace (within 1%,
/// the fit's noise) and is only judged when the pace reaches the goal.
std::string Verdict(const RowResult& r, double goal_p99_ms,
                    double goal_steps_per_s, int goal_agents,
                    absl::Duration step_time) {
  if (!r.ran) return absl::StrFormat("%5d agents: did not run", r.agents);
  if (r.measured_steps == 0) {
    return absl::StrFormat(
        "%5d agents: NO DATA (no step was delivered to "
        "every agent)",
        r.agents);
  }
  const bool latency_ok = r.step_p99_ms < goal_p99_ms;
  std::string rate;
  bool rate_ok = false;
  if (step_time <= absl::ZeroDuration()) {
    rate_ok = r.steps_per_s >= goal_steps_per_s;
    rate = absl::StrFormat("%.1f steps/s %s %.0f -> %s", r.steps_per_s,
                           rate_ok ? ">=" : "<", goal_steps_per_s,
                           rate_ok ? "MET" : "MISSED");
  } else {
    const double pace = 1 / absl::ToDoubleSeconds(step_time);
    if (pace < goal_steps_per_s) {
      rate = absl::StrFormat(
          "%.1f steps/s, not judged (agents paced at %.1f < %.0f steps/s)",
          r.steps_per_s, pace, goal_steps_per_s);
    } else {
      rate_ok = r.steps_per_s >= 0.99 * pace;
      rate = absl::StrFormat("%.2f steps/s %s the agents' pace of %.1f -> %s",
                             r.steps_per_s, rate_ok ? "kept" : "fell behind",
                             pace, rate_ok ? "MET" : "MISSED");
    }
  }
  return absl::StrFormat(
      "%5d agents: step-delivery p99 %.2f ms %s %.0f ms -> %s; %s; overall "
      "%s%s",
      r.agents, r.step_p99_ms, latency_ok ? "<" : ">=", goal_p99_ms,
      latency_ok ? "MET" : "MISSED", rate,
      latency_ok && rate_ok ? "GOAL MET" : "GOAL MISSED",
      r.agents == goal_agents
          ? ""
          : absl::StrFormat(" (the goal is stated at %d agents)", goal_agents));
}

absl::Status Run() {
  std::vector<int> agent_counts;
  for (const std::string& s : absl::GetFlag(FLAGS_agents)) {
    int n = 0;
    if (!absl::SimpleAtoi(s, &n) || n <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--agents: '", s, "' is not a positive count"));
    }
    agent_counts.push_back(n);
  }
  RowConfig config;
  config.steps = absl::GetFlag(FLAGS_steps);
  config.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  config.max_time = absl::Seconds(absl::GetFlag(FLAGS_max_seconds));
  config.lookahead_steps = absl::GetFlag(FLAGS_lookahead_steps);
  config.refit_every = absl::GetFlag(FLAGS_refit_every);
  config.channels = absl::GetFlag(FLAGS_channels);
  config.client_threads = absl::GetFlag(FLAGS_client_threads);
  config.tokens_per_rank = absl::GetFlag(FLAGS_tokens_per_rank);
  config.step_time = absl::Milliseconds(absl::GetFlag(FLAGS_step_ms));
  config.report_stream = absl::GetFlag(FLAGS_report_stream);
  config.window = absl::GetFlag(FLAGS_window);
  if (config.steps < 2 || config.warmup_steps < 0 ||
      config.lookahead_steps < 1 || config.refit_every < 1 ||
      config.channels < 1 || config.client_threads < 1 ||
      config.tokens_per_rank < 1 || config.max_time <= absl::ZeroDuration() ||
      config.step_time < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "need --steps >= 2, --warmup_steps >= 0, --lookahead_steps, "
        "--refit_every, --channels, --client_threads, --tokens_per_rank and "
        "--max_seconds >= 1, --step_ms >= 0");
  }
  ASSIGN_OR_RETURN(config.model, BuiltinModel(absl::GetFlag(FLAGS_model)));
  const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");
  // Under `bazel run` the runfiles hold data/lengths; otherwise resolve
  // against the user's directory.
  std::string path = absl::GetFlag(FLAGS_lengths);
  if (!std::ifstream(path).good()) {
    path = ResolvePath(path, wd == nullptr ? "" : wd);
  }
  ASSIGN_OR_RETURN(const std::vector<int32_t> lengths,
                   LoadLengths(path, "auto", ""));
  config.lengths = &lengths;

  std::printf(
      "plan delivery: %s, %s (%zu samples), %lld tokens/rank/step, window "
      "%lld, lookahead %d, refit every %d, %d channels, %d client threads, "
      "fan-out threads %d (-1 auto), reports on %s, %s, %d CPUs\n",
      config.model.name.c_str(), absl::GetFlag(FLAGS_lengths).c_str(),
      lengths.size(), static_cast<long long>(config.tokens_per_rank),
      static_cast<long long>(config.window), config.lookahead_steps,
      config.refit_every, config.channels, config.client_threads,
      absl::GetFlag(FLAGS_fanout_threads),
      config.report_stream ? "a stream" : "unary calls", config.step_time > absl::ZeroDuration()
          ? absl::StrFormat("agents compute %.0f ms a step",
                            absl::ToDoubleMilliseconds(config.step_time))
                .c_str()
          : "agents report on receipt",
      OnlineCpus());
  std::fflush(stdout);

  std::vector<RowResult> rows;
  for (int n : agent_counts) {
    config.agents = n;
    std::fprintf(stderr, "running %d agents...\n", n);
    absl::StatusOr<RowResult> row = RunRow(config);
    if (!row.ok()) {
      std::fprintf(stderr, "  %d agents failed: %s\n", n,
                   row.status().ToString().c_str());
      RowResult failed;
      failed.agents = n;
      failed.first_error = row.status().ToString();
      rows.push_back(failed);
      continue;
    }
    rows.push_back(*std::move(row));
  }

  std::printf(
      "\ndelivery latency, ms from end of planning (t0) to receipt\n"
      "agents  steps  step p50  step p99  step max  agent p50  agent p99  "
      "spread p50\n");
  for (const RowResult& r : rows) {
    if (!r.ran) continue;
    std::printf("%6d  %5lld  %8.2f  %8.2f  %8.2f  %9.2f  %9.2f  %10.2f\n",
                r.agents, static_cast<long long>(r.measured_steps),
                r.step_p50_ms, r.step_p99_ms, r.step_max_ms, r.agent_p50_ms,
                r.agent_p99_ms, r.spread_p50_ms);
  }
  std::printf(
      "\nthroughput, and where the planning thread's time goes (ms per "
      "step; wall, and CPU of that thread)\n"
      "agents  steps/s  plan p50  plan p99  plan cpu  fan-out p50  "
      "fan-out p99  fan-out cpu  tasks/step\n");
  for (const RowResult& r : rows) {
    if (!r.ran) continue;
    std::printf(
        "%6d  %7.2f  %8.2f  %8.2f  %8.2f  %11.2f  %11.2f  %11.2f  "
        "%10.0f\n",
        r.agents, r.steps_per_s, r.plan_p50_ms, r.plan_p99_ms,
        r.plan_cpu_p50_ms, r.fanout_p50_ms, r.fanout_p99_ms,
        r.fanout_cpu_p50_ms, r.tasks_per_step);
  }
  std::printf(
      "\nload (ms per step: client = wall in the simulated agents' handlers, "
      "agents cpu = CPU of their queue threads, server cpu = the rest of this "
      "process: the scheduler and the gRPC threads both ends share; cores: "
      "CPU / wall)\n"
      "agents  B/msg  client  agents cpu  server cpu  proc cores  other cores  "
      "machine busy  steal  threads  register s\n");
  for (const RowResult& r : rows) {
    if (!r.ran) continue;
    std::printf(
        "%6d  %5.0f  %6.2f  %10.2f  %10.2f  %10.2f  %11.2f  %11.0f%%  %4.0f%%  "
        "%7d  %10.2f\n",
        r.agents, r.bytes_per_message, r.client_ms_per_step,
        r.agents_cpu_ms_per_step, r.server_cpu_ms_per_step, r.process_cores,
        r.other_cores, 100 * r.machine_busy, 100 * r.machine_steal, r.threads,
        r.register_s);
  }
  std::printf("\n");
  for (const RowResult& r : rows) {
    if (!r.ran) {
      std::printf("%5d agents: did not run: %s\n", r.agents,
                  r.first_error.c_str());
      continue;
    }
    std::printf("load average %s -> %s", r.load_before.c_str(),
                r.load_after.c_str());
    std::printf(
        " | %5d agents: %lld errors%s%s", r.agents,
        static_cast<long long>(r.errors),
        r.first_error.empty() ? "" : ", first: ", r.first_error.c_str());
    if (r.incomplete_steps > 0 || r.inexact_t0 > 0) {
      std::printf(
          " | %lld steps not delivered to every agent, %lld with t0 "
          "from the callback",
          static_cast<long long>(r.incomplete_steps),
          static_cast<long long>(r.inexact_t0));
    }
    std::printf("\n");
  }
  std::printf(
      "\nverdict (goal: step-delivery p99 < %.0f ms, >= %.0f "
      "steps/s at %d agents)\n",
      absl::GetFlag(FLAGS_goal_p99_ms), absl::GetFlag(FLAGS_goal_steps_per_s),
      absl::GetFlag(FLAGS_goal_agents));
  for (const RowResult& r : rows) {
    std::printf("%s\n",
                Verdict(r, absl::GetFlag(FLAGS_goal_p99_ms),
                        absl::GetFlag(FLAGS_goal_steps_per_s),
                        absl::GetFlag(FLAGS_goal_agents), config.step_time)
                    .c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace dcp

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Plan delivery latency and throughput of dcp-scheduler's control "
      "plane with N simulated agents on loopback.\n"
      "  plan_delivery_benchmark --agents=256,1024 [--steps=100] "
      "[--channels=8] [--client_threads=2] [--lookahead_steps=4]");
  absl::ParseCommandLine(argc, argv);
  // As in the daemons: Debian's Abseil is built with the mutex deadlock
  // detector on, which records every lock order in a global graph (a few %
  // of the CPU here); tests keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const absl::Status s = dcp::Run();
  if (!s.ok()) {
    std::fprintf(stderr, "plan_delivery_benchmark: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
