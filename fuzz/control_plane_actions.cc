// How a dcp.fuzz.Action becomes the call an RPC handler makes: the
// request decoded from the fuzz proto, or one a correct agent would send.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "fuzz/control_plane_session.h"
#include "fuzz/fuzz_support.h"
#include "scheduler/control/test_plan.h"

namespace dcp {
namespace fuzz {

using absl::StatusCode;

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
        testing_plan::ReportAtRate(step, rank, per_token,
                                   planned.sync_seconds());
    report.MergeFrom(planned.overrides());
    Report(report);
  }
}

}  // namespace fuzz
}  // namespace dcp
