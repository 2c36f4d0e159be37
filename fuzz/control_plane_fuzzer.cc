// Fuzzes the scheduler's control plane the way its RPC handlers drive it.
// The input is a serialized dcp.fuzz.Session (control_plane_fuzz.proto): a
// small world (4 ranks, 2 a node) and up to 128 calls, each with the decoded
// request an agent or a stranger sent (RegisterRequest, TimingReport,
// ProfileReport, StoreSetRequest, ...), applied to a live in-process
// ControlPlane whose planning the fuzzer runs itself (no threads) on a fake
// clock. Besides no crash or sanitizer report, after every call:
//   - every error is a clean status: a code the call documents, a message;
//   - nothing accepted is lost: each accepted timing report counts once,
//     completed steps are exactly the steps every rank's report was accepted
//     for (so they never decrease), each rank's last reported step is its
//     highest accepted one, registrations stay, and the rendezvous store
//     holds exactly what was set (and not purged), byte for byte;
//   - a rank's plan stream sends strictly increasing planned steps from its
//     from_step on, the drain marker once, and then only its end;
//   - planning never fails and never passes the look-ahead or max_steps,
//     and the cost model's coefficients stay finite, whatever was reported;
//   - a call whose metadata (job id, bearer token) the guard refuses
//     (CallAuthenticator, what GuardedSchedulerService checks first) is
//     refused with UNAUTHENTICATED / PERMISSION_DENIED / INVALID_ARGUMENT
//     exactly when a correct client's would not be, and reaches nothing;
//   - with World.durable, a restart from the durable state keeps every
//     kept step's plan byte for byte, the planned and completed steps, the
//     store, and every accepted report (one sent again is ALREADY_EXISTS).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/grpc_credentials.h"
#include "common/model_spec.h"
#include "fuzz/control_plane_fuzz.pb.h"
#include "fuzz/fuzz_support.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/plan.pb.h"
#include "proto/scheduler_service.pb.h"
#include "scheduler/control/control_plane.h"
#include "scheduler/control/state_store.h"

namespace dcp {
namespace fuzz {
namespace {

using absl::StatusCode;

constexpr int kWorld = 4;
constexpr int kGpusPerNode = 2;
constexpr char kSession[] = "fz";
constexpr int kMaxActions = 128;
constexpr char kJob[] = "fuzz-job";
constexpr char kToken[] = "fuzz-token-0123456789abcdef";

// 512 samples of 1..3000 tokens, the same for every input.
const std::vector<int32_t>& Lengths() {
  static const std::vector<int32_t>* const lengths = [] {
    auto* v = new std::vector<int32_t>();
    uint32_t x = 12345;
    for (int i = 0; i < 512; ++i) {
      x = x * 1103515245u + 12345u;
      v->push_back(1 + static_cast<int32_t>((x >> 8) % 3000));
    }
    return v;
  }();
  return *lengths;
}

ModelSpec TinyModel() {
  ModelSpec m;
  m.name = "fuzz-tiny";
  m.layers = 2;
  m.hidden = 256;
  m.heads = 4;
  m.kv_heads = 2;
  m.ffn = 512;
  m.vocab = 1000;
  return m;
}

ControlPlaneOptions Options(const World& w, Clock* clock) {
  ControlPlaneOptions o;
  o.lengths = Lengths();
  o.window = 4096;
  o.model = TinyModel();
  o.cluster.gpus_per_node = kGpusPerNode;
  o.world_size = kWorld;
  o.tokens_per_step = 8192;
  o.seed = w.seed();
  o.lookahead_steps = 1 + static_cast<int>(w.lookahead_steps() % 3);
  o.max_steps = w.max_steps() % 8;
  o.refit_every = 1 + static_cast<int>(w.refit_every() % 8);
  o.observation_window = 64;
  o.profile_at_start = w.profile_at_start();
  o.profile_timeout = absl::Minutes(1);
  o.profile_lengths = {256, 1024};
  o.profile_recompute = {0.0, 1.0};
  o.profile_repetitions = 1;
  o.step_error_window = 8;
  o.sync_window = 8;
  o.store_max_key_bytes = 64;
  o.store_max_value_bytes = 256;
  o.store_max_keys = 16;
  o.store_max_total_bytes = 2048;
  o.session_id = kSession;
  o.start_planner_thread = false;
  o.clock = clock;
  return o;
}

// What a correct agent of `rank` reports for `plan`: its tasks in plan
// order at `seconds_per_token`.
v1::TimingReport CorrectReport(const v1::StepPlan& plan, int rank,
                               double seconds_per_token, double sync_seconds) {
  v1::TimingReport report;
  report.set_epoch(plan.epoch());
  report.set_step(plan.step());
  report.set_rank(rank);
  report.set_sync_seconds(sync_seconds);
  for (const v1::Task& task : plan.tasks()) {
    if (std::find(task.ranks().begin(), task.ranks().end(), rank) ==
        task.ranks().end()) {
      continue;
    }
    int64_t tokens = 0;
    for (int64_t length : task.lengths()) tokens += length;
    v1::TaskTiming* t = report.add_tasks();
    t->set_task_index(task.task_index());
    t->set_micro_step(report.tasks_size() - 1);
    t->set_group_size(task.ranks_size());
    t->set_tokens(tokens);
    t->set_recompute(task.recompute());
    t->set_seconds(seconds_per_token * static_cast<double>(tokens));
    t->set_peak_memory_bytes(1000 * tokens);
  }
  return report;
}

// The keys `ControlPlane::PurgeStoreBefore(epoch)` removes: under
// "<session>/e<k>/" with k < epoch.
bool Purged(const std::string& key, int64_t epoch) {
  const std::string prefix = absl::StrCat(kSession, "/e");
  if (!absl::StartsWith(key, prefix)) return false;
  absl::string_view rest = absl::string_view(key).substr(prefix.size());
  const size_t slash = rest.find('/');
  int64_t key_epoch = 0;
  return slash != absl::string_view::npos &&
         absl::SimpleAtoi(rest.substr(0, slash), &key_epoch) &&
         key_epoch < epoch;
}

// One input's run: the control plane, and what the fuzzer knows it
// accepted, to check it against after every call.
class SessionRun {
 public:
  explicit SessionRun(const World& world)
      : world_(world),
        clock_(std::make_unique<FakeClock>()),
        // A new state (clang deletes FakeStateStore's default constructor).
        durable_(world.durable()
                     ? std::make_unique<FakeStateStore>(DurableState())
                     : nullptr) {
    StartControlPlane();
    last_ = cp_->Status();
  }

  /// Applies `action` if the guard admits its credentials.
  void Apply(const Action& action);
  void CheckInvariants();
  void Finish();

 private:
  struct Stream {
    int64_t id = 0;
    int rank = 0;
    int64_t from_step = 0;
    int64_t last_step = -1;
    bool drained = false;
    bool ended = false;
  };

  void StartControlPlane();
  // Whether the guard admits `credentials` (checked against the oracle).
  bool Admit(const Credentials& credentials);
  void Dispatch(const Action& action);
  void RegisterAll();
  void Register(const v1::RegisterRequest& request);
  void OpenStream(const fuzz::OpenStream& open);
  void PollSome(const PollStream& poll);
  void Close(const fuzz::CloseStream& close);
  void Profile(const v1::ProfileReport& report);
  void StoreSetAction(const fuzz::StoreSet& set);
  void StoreGetAction(const fuzz::StoreGet& get);
  void PurgeStore(int64_t epoch);
  void Drain(const v1::DrainRequest& drain);
  void CheckPlannedStep(int64_t step);
  void Restart();
  // The kept steps' plans, serialized, from the first kept one on.
  std::vector<std::string> KeptPlans();
  void Poll(Stream& stream, int times);
  void Report(const v1::TimingReport& report);
  void PlannedReport(const fuzz::PlannedReport& planned);
  void StoreSet(absl::string_view session, const std::string& key,
                absl::string_view value);
  void StoreGet(absl::string_view session,
                const std::vector<std::string>& keys);
  void Plan();

  int64_t Planned() const { return cp_->Status().planned_steps(); }
  // Steps every rank's report was accepted for, from step 0 on.
  int64_t ExpectedCompleted() const;
  // The first step `rank` has no accepted report for.
  int64_t ExpectedNextStep(int rank, int64_t completed, int64_t planned) const;

  const World world_;
  std::unique_ptr<FakeClock> clock_;
  // The durable state (World.durable), or null.
  std::unique_ptr<FakeStateStore> durable_;
  std::unique_ptr<ControlPlane> cp_;
  std::vector<Stream> streams_;
  std::set<int> registered_;
  std::map<int64_t, std::set<int>> accepted_;  // step -> ranks
  // Accepted reports the status counts: since the last restart, on top of
  // those it counted right after it.
  int64_t accepted_reports_ = 0;
  // Per rank: the last reported step the status showed right after the
  // last restart (-1 before any), and the highest accepted since.
  std::vector<int64_t> reported_base_ = std::vector<int64_t>(kWorld, -1);
  std::vector<int64_t> reported_since_ = std::vector<int64_t>(kWorld, -1);
  std::map<std::string, std::string> store_;
  bool draining_ = false;
  v1::StatusResponse last_;
};

int64_t SessionRun::ExpectedCompleted() const {
  int64_t step = 0;
  for (auto it = accepted_.find(0);
       it != accepted_.end() && it->first == step &&
       static_cast<int>(it->second.size()) == kWorld;
       ++it) {
    ++step;
  }
  return step;
}

int64_t SessionRun::ExpectedNextStep(int rank, int64_t completed,
                                     int64_t planned) const {
  for (int64_t step = completed; step < planned; ++step) {
    auto it = accepted_.find(step);
    if (it == accepted_.end() || it->second.count(rank) == 0) return step;
  }
  return planned;
}

void SessionRun::Register(const v1::RegisterRequest& request) {
  const v1::StatusResponse before = cp_->Status();
  absl::StatusOr<v1::RegisterResponse> response = cp_->Register(request);
  CheckClean(response.status(), {StatusCode::kInvalidArgument}, "Register");
  const bool valid =
      request.rank() >= 0 && request.rank() < kWorld &&
      (request.world_size() == 0 || request.world_size() == kWorld);
  DCP_FUZZ_CHECK(response.ok() == valid, "Register of rank ", request.rank(),
                 " for world ", request.world_size(), ": ",
                 response.status().ToString());
  if (!response.ok()) return;
  registered_.insert(request.rank());
  DCP_FUZZ_CHECK(response->session_id() == kSession &&
                     response->world_size() == kWorld &&
                     response->gpus_per_node() == kGpusPerNode,
                 "Register answered ", response->ShortDebugString());
  const int64_t expected = ExpectedNextStep(
      request.rank(), before.completed_steps(), before.planned_steps());
  DCP_FUZZ_CHECK(response->next_step() == expected, "rank ", request.rank(),
                 " is told to resume at step ", response->next_step(),
                 " but its first unreported step is ", expected);
}

void SessionRun::OpenStream(const fuzz::OpenStream& open) {
  const std::string session =
      open.session_id().empty() ? kSession : open.session_id();
  absl::StatusOr<int64_t> id =
      cp_->OpenStream(open.rank(), session, open.from_step(), [] {});
  CheckClean(id.status(),
             {StatusCode::kInvalidArgument, StatusCode::kFailedPrecondition},
             "OpenStream");
  const bool valid = open.rank() >= 0 && open.rank() < kWorld &&
                     session == kSession && open.from_step() >= 0 &&
                     registered_.count(open.rank()) > 0;
  DCP_FUZZ_CHECK(id.ok() == valid, "OpenStream of rank ", open.rank(),
                 " from step ", open.from_step(), ": ", id.status().ToString());
  if (!id.ok()) return;
  Stream stream;
  stream.id = *id;
  stream.rank = open.rank();
  stream.from_step = open.from_step();
  streams_.push_back(stream);
}

void SessionRun::Poll(Stream& stream, int times) {
  for (int i = 0; i < times; ++i) {
    const int64_t planned = Planned();
    StreamNext next = cp_->NextForStream(stream.id);
    const std::string who =
        absl::StrCat("stream ", stream.id, " of rank ", stream.rank);
    if (stream.ended) {
      DCP_FUZZ_CHECK(next.kind == StreamNext::Kind::kEnd, who,
                     " sent again after it ended");
    }
    if (next.kind == StreamNext::Kind::kWait) return;
    if (next.kind == StreamNext::Kind::kEnd) {
      const StatusCode code = next.end_status.code();
      DCP_FUZZ_CHECK(code != StatusCode::kOk || stream.drained, who,
                     " ended OK before its drain marker");
      CheckClean(next.end_status,
                 {StatusCode::kAborted, StatusCode::kCancelled,
                  StatusCode::kUnavailable},
                 absl::StrCat("the end of ", who));
      stream.ended = true;
      return;
    }
    DCP_FUZZ_CHECK(next.update != nullptr, who, " sent no message");
    DCP_FUZZ_CHECK(!stream.drained, who, " sent after its drain marker");
    const v1::PlanUpdate& update = *next.update;
    if (update.has_step()) {
      const v1::RankStep& step = update.step();
      DCP_FUZZ_CHECK(step.rank() == stream.rank, who, " sent rank ",
                     step.rank(), "'s step");
      DCP_FUZZ_CHECK(
          step.step() > stream.last_step && step.step() >= stream.from_step &&
              step.step() < planned,
          who, " from step ", stream.from_step, " sent step ", step.step(),
          " after ", stream.last_step, " with ", planned, " planned");
      stream.last_step = step.step();
    } else if (update.has_drain()) {
      DCP_FUZZ_CHECK(draining_ || world_.max_steps() % 8 != 0, who,
                     " sent a drain marker before any drain");
      DCP_FUZZ_CHECK(update.drain().last_step() == planned - 1, who,
                     " drained at step ", update.drain().last_step(), " with ",
                     planned, " planned");
      stream.drained = true;
    } else {
      DCP_FUZZ_CHECK(update.has_profile() && world_.profile_at_start(), who,
                     " sent ", update.ShortDebugString());
    }
  }
}

void SessionRun::Report(const v1::TimingReport& report) {
  absl::StatusOr<v1::ReportAck> ack = cp_->ReportTimings(report);
  CheckClean(ack.status(),
             {StatusCode::kInvalidArgument, StatusCode::kFailedPrecondition,
              StatusCode::kAlreadyExists},
             "ReportTimings");
  if (!ack.ok()) return;
  const bool first = accepted_[report.step()].insert(report.rank()).second;
  DCP_FUZZ_CHECK(first, "a second timing report of rank ", report.rank(),
                 " for step ", report.step(), " was accepted");
  ++accepted_reports_;
  reported_since_[report.rank()] =
      std::max(reported_since_[report.rank()], report.step());
  DCP_FUZZ_CHECK(ack->planned_through_step() == Planned() - 1,
                 "the ack says planned through step ",
                 ack->planned_through_step(), " with ", Planned(), " planned");
  DCP_FUZZ_CHECK(std::isfinite(ack->model_error()), "model error ",
                 ack->model_error());
}

void SessionRun::PlannedReport(const fuzz::PlannedReport& planned) {
  absl::StatusOr<v1::StepPlan> plan = cp_->PlannedStep(planned.step());
  CheckClean(plan.status(), {StatusCode::kNotFound}, "PlannedStep");
  v1::StepPlan empty;
  empty.set_step(planned.step());
  const v1::StepPlan& step = plan.ok() ? *plan : empty;
  const double per_token =
      planned.seconds_per_token() != 0 ? planned.seconds_per_token() : 1e-6;
  const int first = planned.all_ranks() ? 0 : planned.rank();
  const int last = planned.all_ranks() ? kWorld - 1 : planned.rank();
  for (int rank = first; rank <= last; ++rank) {
    v1::TimingReport report =
        CorrectReport(step, rank, per_token, planned.sync_seconds());
    report.MergeFrom(planned.overrides());
    Report(report);
  }
}

void SessionRun::StoreSet(absl::string_view session, const std::string& key,
                          absl::string_view value) {
  absl::Status status = cp_->StoreSet(session, key, value);
  CheckClean(status,
             {StatusCode::kInvalidArgument, StatusCode::kFailedPrecondition,
              StatusCode::kResourceExhausted},
             "StoreSet");
  if (status.ok()) store_[key] = std::string(value);
}

void SessionRun::StoreGet(absl::string_view session,
                          const std::vector<std::string>& keys) {
  absl::StatusOr<std::vector<std::string>> values =
      cp_->StoreGet(session, keys);
  CheckClean(values.status(),
             {StatusCode::kFailedPrecondition, StatusCode::kNotFound},
             "StoreGet");
  if (session != kSession) {
    DCP_FUZZ_CHECK(!values.ok(), "StoreGet of session '", session,
                   "' answered");
    return;
  }
  bool all_set = true;
  for (const std::string& key : keys) all_set = all_set && store_.count(key);
  DCP_FUZZ_CHECK(values.ok() == all_set, "StoreGet of ", keys.size(),
                 " keys: ", values.status().ToString(),
                 all_set ? " though all were set" : " though one is not set");
  if (!values.ok()) return;
  DCP_FUZZ_CHECK(values->size() == keys.size(), "StoreGet of ", keys.size(),
                 " keys gave ", values->size(), " values");
  for (size_t i = 0; i < keys.size(); ++i) {
    DCP_FUZZ_CHECK((*values)[i] == store_[keys[i]], "store key '", keys[i],
                   "' holds another value than was set");
  }
}

void SessionRun::Plan() {
  absl::StatusOr<int> planned = cp_->PlanAvailableSteps();
  DCP_FUZZ_CHECK(planned.ok(),
                 "planning failed: ", planned.status().ToString());
  const v1::StatusResponse s = cp_->Status();
  DCP_FUZZ_CHECK(s.planner_error().empty(), "planner error ",
                 s.planner_error());
  const int64_t lookahead = 1 + world_.lookahead_steps() % 3;
  const int64_t max_steps = world_.max_steps() % 8;
  int64_t limit = s.completed_steps() + lookahead;
  if (max_steps > 0) limit = std::min(limit, max_steps);
  DCP_FUZZ_CHECK(s.planned_steps() <= limit, s.planned_steps(),
                 " steps planned with ", s.completed_steps(),
                 " completed, look-ahead ", lookahead, " and max_steps ",
                 max_steps);
  if (draining_) {
    DCP_FUZZ_CHECK(s.planned_steps() == last_.planned_steps(),
                   "planned after a drain");
  } else if (!world_.profile_at_start()) {
    DCP_FUZZ_CHECK(s.planned_steps() >= limit, "only ", s.planned_steps(),
                   " steps planned where ", limit, " may be");
  }
}

void SessionRun::StartControlPlane() {
  ControlPlaneOptions options = Options(world_, clock_.get());
  options.state_store = durable_.get();
  absl::StatusOr<std::unique_ptr<ControlPlane>> cp =
      ControlPlane::Start(std::move(options));
  if (!cp.ok()) Fail(cp.status().ToString());
  cp_ = *std::move(cp);
}

bool SessionRun::Admit(const Credentials& c) {
  const std::string job = c.job_id().empty() ? kJob : c.job_id();
  const std::string token = absl::StrCat("Bearer ", kToken);
  const std::string authorization =
      c.authorization().empty() ? token : c.authorization();
  std::multimap<grpc::string_ref, grpc::string_ref> metadata;
  if (!c.omit_job_id()) metadata.emplace(kJobIdMetadataKey, job);
  if (c.duplicate_job_id()) metadata.emplace(kJobIdMetadataKey, job);
  if (!c.omit_authorization()) {
    metadata.emplace(kAuthorizationMetadataKey, authorization);
  }
  const absl::Status status = CallAuthenticator(kJob, kToken).Check(metadata);
  CheckClean(status,
             {StatusCode::kUnauthenticated, StatusCode::kPermissionDenied,
              StatusCode::kInvalidArgument},
             "the guard");
  const bool correct = !c.omit_job_id() && job == kJob &&
                       !c.omit_authorization() && authorization == token &&
                       !c.duplicate_job_id();
  DCP_FUZZ_CHECK(status.ok() == correct, "the guard answered ",
                 status.ToString(), " to ", c.ShortDebugString());
  return status.ok();
}

void SessionRun::Apply(const Action& action) {
  // A refused call reaches nothing: CheckInvariants after it sees the
  // state unchanged.
  if (action.has_credentials() && !Admit(action.credentials())) return;
  Dispatch(action);
}

void SessionRun::Dispatch(const Action& action) {
  switch (action.action_case()) {
    case Action::kRegister:
      return Register(action.register_());
    case Action::kRegisterAll:
      return RegisterAll();
    case Action::kOpenStream:
      return OpenStream(action.open_stream());
    case Action::kPollStream:
      return PollSome(action.poll_stream());
    case Action::kCloseStream:
      return Close(action.close_stream());
    case Action::kReportTimings:
      return Report(action.report_timings());
    case Action::kPlannedReport:
      return PlannedReport(action.planned_report());
    case Action::kReportProfile:
      return Profile(action.report_profile());
    case Action::kStoreSet:
      return StoreSetAction(action.store_set());
    case Action::kStoreGet:
      return StoreGetAction(action.store_get());
    case Action::kPurgeStoreBefore:
      return PurgeStore(action.purge_store_before());
    case Action::kDrain:
      return Drain(action.drain());
    case Action::kPlan:
      return Plan();
    case Action::kAdvanceClockMs:
      return clock_->Advance(
          absl::Milliseconds(action.advance_clock_ms() % 600000));
    case Action::kPlannedStep:
      return CheckPlannedStep(action.planned_step());
    case Action::kRestart:
      return Restart();
    case Action::ACTION_NOT_SET:
      return;
  }
}

void SessionRun::RegisterAll() {
  for (int rank = 0; rank < kWorld; ++rank) {
    v1::RegisterRequest request;
    request.set_rank(rank);
    request.set_host(absl::StrCat("h", rank));
    request.set_world_size(kWorld);
    Register(request);
  }
}

void SessionRun::PollSome(const PollStream& poll) {
  if (streams_.empty()) return;
  Poll(streams_[poll.stream() % streams_.size()],
       1 + static_cast<int>(poll.times() % 8));
}

void SessionRun::Close(const fuzz::CloseStream& close) {
  if (streams_.empty()) return;
  cp_->CloseStream(streams_[close.stream() % streams_.size()].id);
}

void SessionRun::Profile(const v1::ProfileReport& report) {
  absl::StatusOr<v1::ReportAck> ack = cp_->ReportProfile(report);
  CheckClean(ack.status(),
             {StatusCode::kInvalidArgument, StatusCode::kFailedPrecondition},
             "ReportProfile");
}

void SessionRun::StoreSetAction(const fuzz::StoreSet& set) {
  if (set.has_raw()) {
    StoreSet(set.raw().session_id(), set.raw().key(), set.raw().value());
  } else {
    StoreSet(kSession, absl::StrCat(kSession, "/", set.key_suffix()),
             set.value());
  }
}

void SessionRun::StoreGetAction(const fuzz::StoreGet& get) {
  std::vector<std::string> keys;
  if (get.has_raw()) {
    keys.assign(get.raw().keys().begin(), get.raw().keys().end());
    StoreGet(get.raw().session_id(), keys);
    return;
  }
  for (const std::string& suffix : get.key_suffixes()) {
    keys.push_back(absl::StrCat(kSession, "/", suffix));
  }
  StoreGet(kSession, keys);
}

void SessionRun::PurgeStore(int64_t epoch) {
  int64_t expected = 0;
  for (auto it = store_.begin(); it != store_.end();) {
    if (Purged(it->first, epoch)) {
      it = store_.erase(it);
      ++expected;
    } else {
      ++it;
    }
  }
  const int64_t purged = cp_->PurgeStoreBefore(epoch);
  DCP_FUZZ_CHECK(purged == expected, "PurgeStoreBefore(", epoch, ") removed ",
                 purged, " keys, not ", expected);
}

void SessionRun::Drain(const v1::DrainRequest& drain) {
  const int64_t planned = Planned();
  const int64_t last = cp_->Drain(drain.stop());
  DCP_FUZZ_CHECK(last == planned - 1, "Drain says the last step is ", last,
                 " with ", planned, " planned");
  draining_ = true;
}

void SessionRun::CheckPlannedStep(int64_t step) {
  const v1::StatusResponse s = cp_->Status();
  absl::StatusOr<v1::StepPlan> plan = cp_->PlannedStep(step);
  CheckClean(plan.status(), {StatusCode::kNotFound}, "PlannedStep");
  const bool kept = step >= s.completed_steps() && step < s.planned_steps();
  DCP_FUZZ_CHECK(plan.ok() == kept, "PlannedStep(", step,
                 "): ", plan.status().ToString(), " with steps [",
                 s.completed_steps(), ", ", s.planned_steps(), ") kept");
  if (plan.ok()) {
    DCP_FUZZ_CHECK(plan->step() == step, "PlannedStep(", step, ") is step ",
                   plan->step());
  }
}

std::vector<std::string> SessionRun::KeptPlans() {
  const v1::StatusResponse s = cp_->Status();
  std::vector<std::string> plans;
  for (int64_t step = s.completed_steps(); step < s.planned_steps(); ++step) {
    absl::StatusOr<v1::StepPlan> plan = cp_->PlannedStep(step);
    DCP_FUZZ_CHECK(plan.ok(), "kept step ", step, ": ",
                   plan.status().ToString());
    plans.push_back(plan->SerializeAsString());
  }
  return plans;
}

void SessionRun::Restart() {
  if (durable_ == nullptr) return;
  const v1::StatusResponse before = cp_->Status();
  const std::vector<std::string> kept = KeptPlans();
  // What a restart finds: the records written, nothing of the memory.
  auto next = std::make_unique<FakeStateStore>(durable_->state());
  cp_->Shutdown();
  cp_.reset();
  durable_ = std::move(next);
  StartControlPlane();
  const v1::StatusResponse after = cp_->Status();
  DCP_FUZZ_CHECK(after.planned_steps() == before.planned_steps() &&
                     after.completed_steps() == before.completed_steps() &&
                     after.epoch() == before.epoch(),
                 "a restart went from ", before.ShortDebugString(), " to ",
                 after.ShortDebugString());
  DCP_FUZZ_CHECK(KeptPlans() == kept, "a restart changed a kept step's plan");
  DCP_FUZZ_CHECK(after.timing_reports() <= accepted_reports_,
                 "a restart counts ", after.timing_reports(),
                 " reports of the ", accepted_reports_, " accepted");
  accepted_reports_ = after.timing_reports();
  for (int rank = 0; rank < kWorld; ++rank) {
    const int64_t shown = after.ranks(rank).last_reported_step();
    const int64_t highest =
        std::max(reported_base_[rank], reported_since_[rank]);
    DCP_FUZZ_CHECK(shown <= highest, "after a restart rank ", rank,
                   " last reported step ", shown, " of ", highest);
    reported_base_[rank] = shown;
    reported_since_[rank] = -1;
  }
  // Agents register and stream again; a drain is not kept.
  registered_.clear();
  streams_.clear();
  draining_ = after.draining();
  last_ = after;
}

void SessionRun::CheckInvariants() {
  const v1::StatusResponse s = cp_->Status();
  DCP_FUZZ_CHECK(s.session_id() == kSession && s.world_size() == kWorld &&
                     s.ranks_size() == kWorld,
                 "status of another world: ", s.ShortDebugString());
  DCP_FUZZ_CHECK(s.completed_steps() <= s.planned_steps(), s.completed_steps(),
                 " steps completed of ", s.planned_steps(), " planned");
  DCP_FUZZ_CHECK(s.planned_steps() >= last_.planned_steps(),
                 "planned steps went from ", last_.planned_steps(), " to ",
                 s.planned_steps());
  DCP_FUZZ_CHECK(s.completed_steps() == ExpectedCompleted(),
                 s.completed_steps(),
                 " steps completed but every rank's "
                 "report was accepted for the first ",
                 ExpectedCompleted());
  DCP_FUZZ_CHECK(s.timing_reports() == accepted_reports_, "status counts ",
                 s.timing_reports(), " timing reports, ", accepted_reports_,
                 " were accepted");
  DCP_FUZZ_CHECK(s.refits() >= last_.refits(), "refits went from ",
                 last_.refits(), " to ", s.refits());
  DCP_FUZZ_CHECK(std::isfinite(s.model_error()) &&
                     std::isfinite(s.step_error()) &&
                     std::isfinite(s.sync_error()),
                 "errors not finite: ", s.ShortDebugString());
  for (const auto& [name, value] : s.coefficients()) {
    DCP_FUZZ_CHECK(std::isfinite(value) && value >= 0, "coefficient ", name,
                   " is ", value);
  }
  for (int rank = 0; rank < kWorld; ++rank) {
    const v1::RankStatus& r = s.ranks(rank);
    const int64_t highest =
        std::max(reported_base_[rank], reported_since_[rank]);
    DCP_FUZZ_CHECK(r.last_reported_step() == highest, "rank ", rank,
                   " last reported step ", r.last_reported_step(),
                   " but its highest accepted report is for step ", highest);
    DCP_FUZZ_CHECK(r.registered() == (registered_.count(rank) > 0), "rank ",
                   rank, " registered: ", r.registered());
  }
  int64_t bytes = 0;
  std::vector<std::string> keys;
  for (const auto& [key, value] : store_) {
    bytes += static_cast<int64_t>(key.size() + value.size());
    keys.push_back(key);
  }
  DCP_FUZZ_CHECK(s.store_keys() == static_cast<int64_t>(store_.size()) &&
                     s.store_bytes() == bytes,
                 "the store holds ", s.store_keys(), " keys, ", s.store_bytes(),
                 " bytes; ", store_.size(), " keys, ", bytes,
                 " bytes were set");
  if (!keys.empty()) StoreGet(kSession, keys);
  last_ = s;
}

void SessionRun::Finish() {
  cp_->Shutdown();
  for (Stream& stream : streams_) {
    StreamNext next = cp_->NextForStream(stream.id);
    DCP_FUZZ_CHECK(next.kind == StreamNext::Kind::kEnd,
                   "a stream sent after shutdown");
  }
  CheckInvariants();
}

}  // namespace
}  // namespace fuzz
}  // namespace dcp

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // An input whose strings are not UTF-8 does not parse, as gRPC would not
  // deliver it; protobuf need not say so every time.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dcp::fuzz::Session session;
  if (!session.ParseFromArray(data, static_cast<int>(size))) return 0;
  dcp::fuzz::SessionRun run(session.world());
  int applied = 0;
  for (const dcp::fuzz::Action& action : session.actions()) {
    if (++applied > dcp::fuzz::kMaxActions) break;
    run.Apply(action);
    run.CheckInvariants();
  }
  run.Finish();
  return 0;
}
