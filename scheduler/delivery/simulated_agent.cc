// The simulated agents' harness: the stubs to the scheduler, the
// registration of the ranks, the threads that drive the completion queues
// and the fleet that lays the agents out on them. The agents themselves are
// in simulated_agent_members.cc.

#include "scheduler/delivery/simulated_agent.h"

#include <pthread.h>
#include <time.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "scheduler/delivery/simulated_agent_calls.h"

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
    QueueThreads* queues, AgentRun* run, int ranks_per_stream) {
  member_of_.resize(agents);
  for (int first = 0; first < agents;) {
    const int k = agents_.size();
    v1::Scheduler::Stub* stub = stubs[k % stubs.size()].get();
    grpc::CompletionQueue* cq = queues->queue(k % queues->size());
    if (ranks_per_stream <= 1) {
      agents_.push_back(MakeRankAgent(first, stub, cq, run));
      member_of_[first++] = k;
      continue;
    }
    std::vector<int> ranks;
    for (; first < agents && ranks.size() < static_cast<size_t>(ranks_per_stream);
         ++first) {
      ranks.push_back(first);
      member_of_[first] = k;
    }
    agents_.push_back(MakeNodeAgent(std::move(ranks), stub, cq, run));
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
  const std::vector<absl::Time>& received =
      agents_[member_of_[rank]]->received(rank);
  if (step < 0 || step >= static_cast<int64_t>(received.size())) {
    return absl::InfinitePast();
  }
  return received[step];
}

}  // namespace dcp::plan_delivery
