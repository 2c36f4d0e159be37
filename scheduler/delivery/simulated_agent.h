#ifndef DCP_SCHEDULER_DELIVERY_SIMULATED_AGENT_H_
#define DCP_SCHEDULER_DELIVERY_SIMULATED_AGENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "grpcpp/completion_queue.h"
#include "proto/scheduler_service.grpc.pb.h"
#include "scheduler/planner/cost_model.h"

// The plan-delivery benchmark's fleet of simulated agents: each opens the
// scheduler's StreamPlans stream over real gRPC (the async API, so that N
// agents need no N threads), records when each step arrived and reports its
// timings the way a worker agent does.
namespace dcp::plan_delivery {

/// A stub per channel; the stubs keep their channels.
using SchedulerStubs = std::vector<std::unique_ptr<v1::Scheduler::Stub>>;

/// `channels` stubs to the scheduler at `address`, each channel its own TCP
/// connection (plaintext: the fleet runs on loopback).
SchedulerStubs OpenSchedulerStubs(const std::string& address, int channels);

/// Registers ranks 0..n-1 of a world of n from `host`, rank r over stub
/// r % stubs.size(); the session they joined.
absl::StatusOr<std::string> RegisterSimulatedAgents(
    int n, const SchedulerStubs& stubs, const std::string& host);

/// What every agent of a row shares. Thread-safe.
struct AgentRun {
  AgentRun(int agents, int64_t max_steps, const CostModel& model,
           int gpus_per_node, absl::Duration step_time, bool report_stream)
      : remaining(agents),
        max_steps(max_steps),
        model(model),
        gpus_per_node(gpus_per_node),
        step_time(step_time),
        report_stream(report_stream),
        last_report_ns(std::make_unique<std::atomic<int64_t>[]>(
            static_cast<size_t>(max_steps))),
        planned_at_us(std::make_unique<std::atomic<int64_t>[]>(
            static_cast<size_t>(max_steps))) {}

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
  /// Plan messages that carried a step, timing reports handed to gRPC, and
  /// reports the scheduler answered OK (the agents' end of the load test's
  /// no-plan-lost and no-report-lost counts).
  std::atomic<int64_t> steps_received{0};
  std::atomic<int64_t> reports_sent{0};
  std::atomic<int64_t> reports_ok{0};
  /// Per step below `max_steps`: when its last report was handed to gRPC
  /// (the latest over the agents), in ns since the Unix epoch; 0: none yet.
  /// The moment the step became complete from the agents' side.
  std::unique_ptr<std::atomic<int64_t>[]> last_report_ns;
  /// Per step below `max_steps`: its RankStep's planned_at_unix_micros (the
  /// scheduler's wall clock when planning ended), as the first agent to get
  /// it read it; 0: none yet. A t0 when the scheduler is another process.
  std::unique_ptr<std::atomic<int64_t>[]> planned_at_us;
  absl::Mutex mu;
  std::string first_error ABSL_GUARDED_BY(mu);
};

/// Drives completion queues on a fixed set of threads, recording how long
/// each spent inside handlers (the simulated agents' own CPU). Every tag on
/// the queues must be a handler of this library's agents.
class QueueThreads {
 public:
  explicit QueueThreads(int threads);
  ~QueueThreads();
  QueueThreads(const QueueThreads&) = delete;
  QueueThreads& operator=(const QueueThreads&) = delete;

  grpc::CompletionQueue* queue(int i) { return queues_[i].get(); }
  int size() const { return static_cast<int>(queues_.size()); }

  /// Shuts the queues down and joins; every call on them must be over.
  void Stop();

  /// CPU seconds the queue threads used so far (gRPC's client work done
  /// while polling, and the handlers), summed; before Stop.
  double CpuSeconds() const;

  /// Seconds spent in handlers, summed over threads; call after Stop.
  double BusySeconds() const;

 private:
  void Run(int i);

  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues_;
  std::vector<absl::Duration> busy_;
  std::vector<std::thread> threads_;
  bool stopped_ = false;
};

/// One member of an `AgentFleet`: the agent of one rank, or of the ranks
/// of one node sharing a stream.
class SimulatedAgent {
 public:
  virtual ~SimulatedAgent() = default;
  /// Opens the plan stream (and report stream); after this only the
  /// queue's thread touches the agent (until `AgentRun::all_done`).
  virtual void Start(const std::string& session_id) = 0;
  /// Cancels its calls. Thread-safe.
  virtual void Cancel() = 0;
  /// When each step of `rank` (one of its ranks) arrived (InfinitePast:
  /// never). Read after all_done.
  virtual const std::vector<absl::Time>& received(int rank) const = 0;
};

/// The agents of ranks 0..N-1. With `ranks_per_stream` 1, one per rank on
/// StreamPlans and StreamReports (or ReportTimings); with more, the ranks in
/// groups of that many (a node's), each group on one StreamNodePlans and
/// one StreamNodeReports stream (`AgentRun::report_stream` must be set).
/// Member m calls through `stubs[m % stubs.size()]` and runs on queue
/// m % queues->size(). Not thread-safe; after `Start` the queues' threads
/// own the agents until `AgentRun::all_done`.
class AgentFleet {
 public:
  AgentFleet(int agents,
             absl::Span<const std::unique_ptr<v1::Scheduler::Stub>> stubs,
             QueueThreads* queues, AgentRun* run, int ranks_per_stream = 1);
  ~AgentFleet();
  AgentFleet(const AgentFleet&) = delete;
  AgentFleet& operator=(const AgentFleet&) = delete;

  /// Opens every agent's plan stream (and report stream) in `session_id`.
  void Start(const std::string& session_id);
  /// Cancels every agent's calls. Thread-safe.
  void Cancel();
  /// The ranks.
  int size() const { return static_cast<int>(member_of_.size()); }
  /// When agent `rank` received `step` (InfinitePast: never, or a step past
  /// `AgentRun::max_steps`). Read after `AgentRun::all_done`.
  absl::Time received(int rank, int64_t step) const;

 private:
  std::vector<std::unique_ptr<SimulatedAgent>> agents_;
  /// Per rank, its member's index in `agents_`.
  std::vector<int> member_of_;
};

}  // namespace dcp::plan_delivery

#endif  // DCP_SCHEDULER_DELIVERY_SIMULATED_AGENT_H_
