#include "worker_agent/agent.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/process_groups.h"
#include "comm/scheduler_rendezvous_store.h"
#include "common/grpc_credentials.h"
#include "common/rpc_timeout.h"
#include "common/status_macros.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/channel_arguments.h"
#include "proto/scheduler_service.grpc.pb.h"
#include "worker_agent/cancellable_store.h"
#include "worker_agent/plan_reader.h"
#include "worker_agent/profile_responder.h"
#include "worker_agent/registration.h"
#include "worker_agent/report_sender.h"
#include "worker_agent/step_mailbox.h"

namespace dcp {

struct Agent::Stub {
  std::unique_ptr<v1::Scheduler::Stub> stub;
};

namespace {

/// The channel to the scheduler, secured as `options.security` says.
absl::StatusOr<std::shared_ptr<grpc::Channel>> SchedulerChannel(
    const AgentOptions& options) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetMaxReceiveMessageSize(64 << 20);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateSecureChannel(
      options.scheduler_address, options.security, std::move(args));
  if (!channel.ok()) {
    return absl::Status(channel.status().code(),
                        absl::StrCat("agent options: ",
                                     channel.status().message()));
  }
  return channel;
}

}  // namespace

Agent::Agent(AgentOptions options,
             std::shared_ptr<grpc::ChannelInterface> channel)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : RealClock::Default()),
      channel_(std::move(channel)),
      stub_(std::make_unique<Stub>()) {
  stub_->stub = v1::Scheduler::NewStub(channel_);
  const AgentOptions& o = options_;
  registration_ = std::make_unique<Registration>(
      stub_->stub.get(),
      RegistrationOptions{o.scheduler_address, o.rank, o.host, o.gpu,
                          o.world_size, clock_, o.fixed_world});
  mailbox_ = std::make_unique<StepMailbox>(
      StepMailboxOptions{o.rank, o.prefetch_depth, clock_});
  reports_ = std::make_unique<ReportSender>(
      stub_->stub.get(), registration_.get(),
      ReportSenderOptions{o.rank, o.rpc_timeout, o.initial_backoff,
                          o.max_backoff, o.report_stream, clock_,
                          o.max_pending_reports, o.report_spool});
  ProfileResponderOptions profile;
  profile.rank = o.rank;
  profile.rpc_timeout = o.rpc_timeout;
  profile.initial_backoff = o.initial_backoff;
  profile.max_backoff = o.max_backoff;
  profile.clock = clock_;
  profile.run = [this](const v1::ProfileRequest& request,
                       const GroupResolver& groups) {
    return options_.run_profile(*this, request, groups);
  };
  profile.form_group = [this](const CommKey& key, const std::string& prefix)
      -> absl::StatusOr<c10d::ProcessGroup*> {
    return groups_->Get(key, prefix);
  };
  profiles_ =
      std::make_unique<ProfileResponder>(stub_->stub.get(), std::move(profile));
}

absl::StatusOr<std::unique_ptr<Agent>> Agent::Start(AgentOptions options) {
  RETURN_IF_ERROR(CheckAgentOptions(options));
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                   SchedulerChannel(options));
  auto agent =
      absl::WrapUnique(new Agent(std::move(options), std::move(channel)));
  RETURN_IF_ERROR(agent->RegisterFirst());
  RETURN_IF_ERROR(agent->StartStreams());
  return agent;
}

absl::Status Agent::RegisterFirst() {
  grpc::ClientContext context;
  SetRpcTimeout(context, options_.connect_timeout);
  context.set_wait_for_ready(true);
  absl::StatusOr<v1::RegisterResponse> hello = registration_->Register(context);
  if (!hello.ok()) {
    return WithConnectionHint(hello.status(), options_.security);
  }
  return registration_->Accept(*hello);
}

absl::Status Agent::StartStreams() {
  SchedulerRendezvousStore::Options store_options;
  store_options.session_id = registration().session_id();
  ASSIGN_OR_RETURN(scheduler_store_,
                   SchedulerRendezvousStore::Create(channel_, store_options));
  store_ = std::make_unique<CancellableStore>(scheduler_store_.get(), clock_);
  RETURN_IF_ERROR(StartGroups());

  PlanReaderOptions reader;
  reader.rank = options_.rank;
  reader.max_reconnect_attempts = options_.max_reconnect_attempts;
  reader.max_outage = options_.max_outage;
  reader.on_reconnect_failed = options_.on_reconnect_failed;
  reader.initial_backoff = options_.initial_backoff;
  reader.max_backoff = options_.max_backoff;
  reader.rpc_timeout = options_.rpc_timeout;
  reader.clock = clock_;
  reader.on_step_received = options_.on_step_received;
  if (options_.warm_groups) {
    reader.on_groups = [this](int64_t epoch,
                              const std::vector<v1::CommGroup>& groups) {
      WarmGroups(epoch, groups);
    };
  }
  if (options_.run_profile) {
    reader.on_profile = [this](const v1::ProfileRequest& request) {
      profiles_->Handle(request);
    };
  }
  reader_ = std::make_unique<PlanReader>(stub_->stub.get(), registration_.get(),
                                         mailbox_.get(), std::move(reader));
  reader_->Start(registration().next_step());
  return absl::OkStatus();
}

absl::Status Agent::StartGroups() {
  ProcessGroups::Options groups;
  groups.rank = options_.rank;
  groups.hostname = options_.gloo_hostname;
  groups.timeout = options_.rendezvous_timeout;
  // The survivors of a shrink reach the new world's groups each when its
  // own wait on the dead peer ended: a later epoch's groups wait longer.
  const int64_t registered = registration().epoch();
  groups.timeout_of = [this, registered](const CommKey& key) {
    return GroupFormTimeout(options_, registered, key.epoch);
  };
  groups.clock = clock_;
  groups.on_formed = options_.on_group_formed;
  ASSIGN_OR_RETURN(groups_, ProcessGroups::Create(store_.get(), groups));
  return absl::OkStatus();
}

void Agent::WarmGroups(int64_t epoch,
                       const std::vector<v1::CommGroup>& groups) {
  std::vector<CommGroupSpec> specs;
  for (const v1::CommGroup& group : groups) {
    if (group.ranks_size() < 2) continue;
    absl::StatusOr<CommKey> key = CommKey::Make(
        std::vector<int>(group.ranks().begin(), group.ranks().end()), epoch);
    // A malformed group is reported by `Group` when the step uses it; so is
    // one without this rank.
    if (!key.ok() || key->GroupRank(options_.rank) < 0) continue;
    specs.push_back(CommGroupSpec{*std::move(key), group.rendezvous_prefix()});
  }
  if (!specs.empty()) groups_->Warm(specs).IgnoreError();
}

Agent::~Agent() {
  Shutdown();
  // Waits for a warm-up in progress (its rendezvous was cancelled; a
  // connection under way ends by the rendezvous timeout) and destroys the
  // groups before the store they were formed through.
  groups_.reset();
}

void Agent::Shutdown() {
  registration_->Abandon();
  mailbox_->Close();
  reports_->Cancel();
  profiles_->Cancel();
  if (reader_ != nullptr) reader_->Cancel();
  // Formations under way finish first (their peers are connecting to us);
  // then whatever still waits for peers is cancelled.
  if (groups_ != nullptr) groups_->Quiesce(options_.shutdown_formation_grace);
  if (store_ != nullptr) store_->Cancel();
  absl::MutexLock lock(&join_mu_);
  // Neither joins from its own thread (a callback must not shut the agent
  // down): it would wait for itself.
  if (reader_ != nullptr) reader_->Join();
  mailbox_->Join();
  if (groups_ != nullptr) groups_->AbortAll();
  // Unanswered reports on the streams fail over to ReportTimings, which
  // now refuses at once (shut down).
  reports_->CloseStreams();
  // Report callbacks touch the sender; each ends by its RPC deadline.
  reports_->AwaitCallbacks();
}

const v1::RegisterResponse& Agent::registration() const {
  return registration_->first();
}

absl::StatusOr<NextStepResult> Agent::NextStep(int64_t after_step,
                                               absl::Duration timeout) {
  absl::StatusOr<NextStepResult> next = mailbox_->NextStep(after_step, timeout);
  NoteWorld(next);
  if (next.ok() && !next->drained) GroupEpoch().IgnoreError();
  return next;
}

int64_t Agent::NextStepAsync(int64_t after_step, absl::Time deadline,
                             NextStepCallback done) {
  return mailbox_->NextStepAsync(
      after_step, deadline,
      [this, done = std::move(done)](absl::StatusOr<NextStepResult> next) {
        NoteWorld(next);
        done(std::move(next));
      });
}

void Agent::NoteWorld(const absl::StatusOr<NextStepResult>& result) {
  if (!result.ok() || result->drained) return;
  const v1::RankStep& step = result->step;
  absl::MutexLock lock(&world_mu_);
  if (step.epoch() < world_epoch_) return;
  world_epoch_ = step.epoch();
  world_ranks_.assign(step.world_ranks().begin(), step.world_ranks().end());
}

std::vector<int> Agent::WorldOf(int64_t epoch) const {
  {
    absl::MutexLock lock(&world_mu_);
    if (world_epoch_ == epoch && !world_ranks_.empty()) return world_ranks_;
  }
  std::vector<int> ranks(registration().world_size());
  std::iota(ranks.begin(), ranks.end(), 0);
  return ranks;
}

bool Agent::CancelNextStep(int64_t id) { return mailbox_->CancelNextStep(id); }

absl::Status Agent::WaitForDrainDelivered(absl::Duration timeout) {
  return mailbox_->WaitForDrainDelivered(timeout);
}

absl::Status Agent::ReportTimings(const v1::TimingReport& report) {
  return reports_->Report(report);
}

void Agent::ReportTimingsAsync(const v1::TimingReport& report,
                               std::function<void(absl::Status)> done) {
  reports_->ReportAsync(report, std::move(done));
}

absl::StatusOr<c10d::ProcessGroup*> Agent::Group(const v1::CommGroup& group) {
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
                     "scheduler to form process groups"));
  }
  ASSIGN_OR_RETURN(const int64_t epoch, GroupEpoch());
  ASSIGN_OR_RETURN(CommKey key, CommKey::Make(std::move(ranks), epoch));
  return groups_->Get(key, group.rendezvous_prefix());
}

absl::StatusOr<int64_t> Agent::GroupEpoch() {
  ASSIGN_OR_RETURN(const std::optional<int64_t> delivered,
                   mailbox_->DeliveredEpoch());
  const int64_t epoch = delivered.value_or(registration().epoch());
  bool evict = false;
  {
    absl::MutexLock lock(&world_mu_);
    evict = epoch > evicted_before_;
    if (evict) evicted_before_ = epoch;
  }
  // A new world: the groups of the old one (a failed peer's among them)
  // are released, never used again.
  if (evict) groups_->EvictBefore(epoch);
  return epoch;
}

absl::StatusOr<c10d::ProcessGroup*> Agent::DataParallelGroup() {
  ASSIGN_OR_RETURN(const int64_t epoch, GroupEpoch());
  std::vector<int> ranks = WorldOf(epoch);
  if (ranks.size() < 2) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the world of epoch ", epoch, " has one rank [",
        absl::StrJoin(ranks, ","), "]: no data-parallel group"));
  }
  return groups_->DataParallel(
      std::move(ranks), epoch,
      absl::StrCat(registration().session_id(), "/e", epoch, "/dp"));
}

RendezvousStoreInterface* Agent::rendezvous_store() const {
  return store_.get();
}

AgentStats Agent::Stats() const {
  AgentStats stats;
  const StepMailbox::Stats steps = mailbox_->stats();
  stats.steps_received = steps.steps_received;
  stats.steps_delivered = steps.steps_delivered;
  stats.stale_dropped = steps.stale_dropped;
  stats.reconnects = reader_->reconnects();
  stats.reports_sent = reports_->sent();
  stats.report_fallbacks = reports_->fallbacks();
  stats.profiles_sent = profiles_->sent();
  stats.profile_failures = profiles_->failures();
  const ProcessGroups::Stats groups = groups_->stats();
  stats.cache_hits = groups.hits;
  stats.cache_misses = groups.misses;
  stats.groups_warmed = groups.warmed;
  stats.group_failures = groups.failures;
  stats.groups_live = groups.live;
  return stats;
}

}  // namespace dcp
