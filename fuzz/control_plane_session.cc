#include "fuzz/control_plane_session.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_support.h"

namespace dcp {
namespace fuzz {

using absl::StatusCode;

SessionRun::SessionRun(const World& world)
    : world_(world),
      clock_(std::make_unique<FakeClock>()),
      // A new state (clang deletes FakeStateStore's default constructor).
      durable_(world.durable()
                   ? std::make_unique<FakeStateStore>(DurableState())
                   : nullptr) {
  StartControlPlane();
  last_ = cp_->Status();
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
  oracle_.registered.insert(request.rank());
  DCP_FUZZ_CHECK(response->session_id() == kSession &&
                     response->world_size() == kWorld &&
                     response->gpus_per_node() == kGpusPerNode,
                 "Register answered ", response->ShortDebugString());
  const int64_t expected = oracle_.ExpectedNextStep(
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
                     oracle_.registered.count(open.rank()) > 0;
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
  if (ack->discarded()) {
    // Taken and dropped: only a report from an epoch before the current one
    // is stale, and it counts nowhere (CheckInvariants sees no change).
    DCP_FUZZ_CHECK(report.epoch() < last_.epoch(), "a report of rank ",
                   report.rank(), " for step ", report.step(), " in epoch ",
                   report.epoch(), " was dropped in epoch ", last_.epoch());
    return;
  }
  const bool first =
      oracle_.accepted[report.step()].insert(report.rank()).second;
  DCP_FUZZ_CHECK(first, "a second timing report of rank ", report.rank(),
                 " for step ", report.step(), " was accepted");
  ++oracle_.accepted_reports;
  oracle_.reported_since[report.rank()] =
      std::max(oracle_.reported_since[report.rank()], report.step());
  DCP_FUZZ_CHECK(ack->planned_through_step() == Planned() - 1,
                 "the ack says planned through step ",
                 ack->planned_through_step(), " with ", Planned(), " planned");
  DCP_FUZZ_CHECK(std::isfinite(ack->model_error()), "model error ",
                 ack->model_error());
}

void SessionRun::StoreSet(absl::string_view session, const std::string& key,
                          absl::string_view value) {
  absl::Status status = cp_->StoreSet(session, key, value);
  CheckClean(status,
             {StatusCode::kInvalidArgument, StatusCode::kFailedPrecondition,
              StatusCode::kResourceExhausted},
             "StoreSet");
  if (status.ok()) oracle_.store[key] = std::string(value);
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
  for (const std::string& key : keys)
    all_set = all_set && oracle_.store.count(key);
  DCP_FUZZ_CHECK(values.ok() == all_set, "StoreGet of ", keys.size(),
                 " keys: ", values.status().ToString(),
                 all_set ? " though all were set" : " though one is not set");
  if (!values.ok()) return;
  DCP_FUZZ_CHECK(values->size() == keys.size(), "StoreGet of ", keys.size(),
                 " keys gave ", values->size(), " values");
  for (size_t i = 0; i < keys.size(); ++i) {
    DCP_FUZZ_CHECK((*values)[i] == oracle_.store[keys[i]], "store key '",
                   keys[i], "' holds another value than was set");
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
  ControlPlaneOptions options = WorldOptions(world_, clock_.get());
  options.state_store = durable_.get();
  absl::StatusOr<std::unique_ptr<ControlPlane>> cp =
      ControlPlane::Start(std::move(options));
  if (!cp.ok()) Fail(cp.status().ToString());
  cp_ = *std::move(cp);
}

void SessionRun::Profile(const v1::ProfileReport& report) {
  absl::StatusOr<v1::ReportAck> ack = cp_->ReportProfile(report);
  CheckClean(ack.status(),
             {StatusCode::kInvalidArgument, StatusCode::kFailedPrecondition},
             "ReportProfile");
}

void SessionRun::PurgeStore(int64_t epoch) {
  int64_t expected = 0;
  for (auto it = oracle_.store.begin(); it != oracle_.store.end();) {
    if (Purged(it->first, epoch)) {
      it = oracle_.store.erase(it);
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
  DCP_FUZZ_CHECK(s.completed_steps() == oracle_.ExpectedCompleted(),
                 s.completed_steps(),
                 " steps completed but every rank's "
                 "report was accepted for the first ",
                 oracle_.ExpectedCompleted());
  DCP_FUZZ_CHECK(s.timing_reports() == oracle_.accepted_reports,
                 "status counts ", s.timing_reports(), " timing reports, ",
                 oracle_.accepted_reports, " were accepted");
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
    const int64_t highest = oracle_.HighestReported(rank);
    DCP_FUZZ_CHECK(r.last_reported_step() == highest, "rank ", rank,
                   " last reported step ", r.last_reported_step(),
                   " but its highest accepted report is for step ", highest);
    DCP_FUZZ_CHECK(r.registered() == (oracle_.registered.count(rank) > 0),
                   "rank ", rank, " registered: ", r.registered());
  }
  int64_t bytes = 0;
  std::vector<std::string> keys;
  for (const auto& [key, value] : oracle_.store) {
    bytes += static_cast<int64_t>(key.size() + value.size());
    keys.push_back(key);
  }
  DCP_FUZZ_CHECK(s.store_keys() == static_cast<int64_t>(oracle_.store.size()) &&
                     s.store_bytes() == bytes,
                 "the store holds ", s.store_keys(), " keys, ", s.store_bytes(),
                 " bytes; ", oracle_.store.size(), " keys, ", bytes,
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

}  // namespace fuzz
}  // namespace dcp
