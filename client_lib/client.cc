#include "client_lib/client.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/status_macros.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/agent_service.grpc.pb.h"
#include "proto/timing_report.h"

namespace dcp {
namespace {

std::chrono::system_clock::time_point Deadline(absl::Duration timeout) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout);
}

}  // namespace

struct Client::Sidecar {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Agent::Stub> stub;
};

Client::Client(ClientOptions options) : options_(std::move(options)) {}

Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  if (options.step_timeout <= absl::ZeroDuration() ||
      options.rpc_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "client options: step_timeout and rpc_timeout must be positive");
  }
  std::unique_ptr<Client> client(new Client(std::move(options)));
  const ClientOptions& o = client->options_;
  if (o.mode == ClientOptions::Mode::kInProcess) {
    AgentOptions agent = o.agent;
    agent.warm_groups = agent.warm_groups && o.form_groups;
    ASSIGN_OR_RETURN(client->agent_, Agent::Start(std::move(agent)));
    return client;
  }
  const std::string path(absl::StripPrefix(o.agent_socket, "unix:"));
  if (path.empty()) {
    return absl::InvalidArgumentError(
        "client options: sidecar mode needs agent_socket");
  }
  if (o.rank < 0) {
    return absl::InvalidArgumentError(
        "client options: sidecar mode needs the agent's rank");
  }
  auto sidecar = std::make_unique<Sidecar>();
  sidecar->channel = grpc::CreateChannel(absl::StrCat("unix:", path),
                                         grpc::InsecureChannelCredentials());
  if (!sidecar->channel->WaitForConnected(Deadline(o.rpc_timeout))) {
    return absl::UnavailableError(absl::StrCat("no dcp-agent answers on '",
                                               path,
                                               "' (is `dcp-agent --mode=serve "
                                               "--socket=",
                                               path, "` running?)"));
  }
  sidecar->stub = v1::Agent::NewStub(sidecar->channel);
  client->sidecar_ = std::move(sidecar);
  return client;
}

int Client::rank() const {
  return agent_ != nullptr ? agent_->rank() : options_.rank;
}

RendezvousStoreInterface* Client::rendezvous_store() const {
  return agent_ != nullptr ? agent_->rendezvous_store() : nullptr;
}

std::string Client::session_id() const {
  return agent_ != nullptr ? agent_->registration().session_id() : "";
}

absl::StatusOr<NextStepResult> Client::Fetch(absl::Duration timeout) {
  NextStepResult result;
  if (agent_ != nullptr) {
    ASSIGN_OR_RETURN(result, agent_->NextStep(last_step_, timeout));
  } else {
    v1::NextStepRequest request;
    request.set_after_step(last_step_);
    v1::NextStepResponse response;
    grpc::ClientContext context;
    context.set_deadline(Deadline(timeout));
    RETURN_IF_ERROR(FromGrpcStatus(
        sidecar_->stub->NextStep(&context, request, &response)));
    result.drained = response.drained();
    result.step = std::move(*response.mutable_step());
  }
  if (!result.drained) {
    fetched_epoch_ = std::max(fetched_epoch_, result.step.epoch());
  }
  return result;
}

absl::StatusOr<Step> Client::NextStep() {
  ASSIGN_OR_RETURN(NextStepResult next, Fetch(options_.step_timeout));
  return Resolve(std::move(next));
}

absl::StatusOr<Step> Client::NextEpoch() {
  const int64_t failed_epoch = fetched_epoch_;
  const absl::Time deadline = absl::Now() + options_.step_timeout;
  while (true) {
    absl::StatusOr<NextStepResult> next =
        Fetch(std::max(deadline - absl::Now(), absl::ZeroDuration()));
    if (!next.ok()) {
      return absl::Status(
          next.status().code(),
          absl::StrCat("no step of an epoch after ", failed_epoch,
                       " came (was the world shrunk? the scheduler holds a "
                       "job with --on_rank_failure=hold): ",
                       next.status().message()));
    }
    if (next->drained || next->step.epoch() > failed_epoch) {
      return Resolve(*std::move(next));
    }
    // A step of the failed epoch: its world is broken, never run.
    last_step_ = next->step.step();
  }
}

absl::StatusOr<Step> Client::Resolve(NextStepResult next) {
  Step step;
  if (next.drained) {
    step.drained = true;
    step.step = last_step_;
    return step;
  }
  const v1::RankStep& plan = next.step;
  step.step = plan.step();
  step.epoch = plan.epoch();
  step.total_tokens = plan.total_tokens();
  step.world_ranks.assign(plan.world_ranks().begin(), plan.world_ranks().end());
  if (plan.has_abandoned_from()) step.abandoned_from = plan.abandoned_from();
  step.tasks.reserve(plan.tasks_size());
  for (int m = 0; m < plan.tasks_size(); ++m) {
    const v1::Task& t = plan.tasks(m);
    StepTask& task = step.tasks.emplace_back();
    task.task_index = t.task_index();
    task.micro_step = m;
    task.samples.assign(t.samples().begin(), t.samples().end());
    task.lengths.assign(t.lengths().begin(), t.lengths().end());
    task.loss_weights.assign(t.loss_weights().begin(), t.loss_weights().end());
    task.recompute = t.recompute();
    task.ulysses = t.ulysses();
    task.group_ranks.assign(t.ranks().begin(), t.ranks().end());
    if (t.ranks_size() < 2) continue;
    const v1::CommGroup* group = nullptr;
    for (const v1::CommGroup& g : plan.groups()) {
      if (g.id() == t.group_id()) group = &g;
    }
    if (group == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", plan.step(), " task ", t.task_index(),
                       ": its group ", t.group_id(), " is not in the plan"));
    }
    task.rendezvous_prefix = group->rendezvous_prefix();
    if (agent_ != nullptr && options_.form_groups) {
      absl::StatusOr<c10d::ProcessGroup*> comm = agent_->Group(*group);
      if (!comm.ok()) {
        return absl::Status(
            comm.status().code(),
            absl::StrCat("step ", plan.step(), " task ", t.task_index(),
                         ": forming its group: ", comm.status().message()));
      }
      task.group = *comm;
    }
  }
  step.plan = std::move(next.step);
  last_step_ = step.step;
  return step;
}

absl::StatusOr<c10d::ProcessGroup*> Client::DataParallelGroup() {
  if (agent_ == nullptr) {
    return absl::FailedPreconditionError(
        "the data-parallel group is only available in in-process mode; in "
        "sidecar mode the trainer forms its own (e.g. torch.distributed)");
  }
  return agent_->DataParallelGroup();
}

absl::Status Client::ReportStep(const Step& step,
                                const std::vector<double>& task_seconds,
                                double sync_seconds) {
  if (step.drained) {
    return absl::InvalidArgumentError("a drained step has nothing to report");
  }
  if (task_seconds.size() != step.tasks.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step.step, " has ", step.tasks.size(),
                     " tasks but ", task_seconds.size(), " times were given"));
  }
  if (!(sync_seconds >= 0) || !std::isfinite(sync_seconds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step.step, ": sync time ", sync_seconds,
                     " is not a non-negative number of seconds"));
  }
  if (step.plan.tasks_size() != static_cast<int>(step.tasks.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step.step, " has ", step.tasks.size(),
                     " tasks but the plan it came with has ",
                     step.plan.tasks_size(), ": report a Step from NextStep"));
  }
  for (size_t i = 0; i < step.tasks.size(); ++i) {
    if (!(task_seconds[i] > 0) || !std::isfinite(task_seconds[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", step.step, " task ", step.tasks[i].task_index, ": time ",
          task_seconds[i], " is not positive"));
    }
  }
  v1::TimingReport report =
      TimingReportOf(step.plan, task_seconds, sync_seconds);
  report.set_rank(rank());
  if (agent_ != nullptr) return agent_->ReportTimings(report);
  // The agent makes one attempt at the scheduler; a lost connection is
  // retried here (a report that did arrive is not counted twice).
  absl::Status status;
  absl::Duration backoff = absl::Milliseconds(100);
  for (int attempt = 0; attempt < 4; ++attempt) {
    if (attempt > 0) {
      absl::SleepFor(backoff);
      backoff *= 2;
    }
    v1::AgentAck ack;
    grpc::ClientContext context;
    context.set_deadline(Deadline(options_.rpc_timeout));
    status =
        FromGrpcStatus(sidecar_->stub->ReportTimings(&context, report, &ack));
    if (!absl::IsUnavailable(status)) break;
  }
  return status;
}

}  // namespace dcp
