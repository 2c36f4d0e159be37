// The guard (CallAuthenticator, what SchedulerService checks first)
// and the restart from the durable state, each checked against the oracle.

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_credentials.h"
#include "fuzz/control_plane_session.h"
#include "fuzz/fuzz_support.h"

namespace dcp {
namespace fuzz {

using absl::StatusCode;

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
  DCP_FUZZ_CHECK(after.timing_reports() <= oracle_.accepted_reports,
                 "a restart counts ", after.timing_reports(),
                 " reports of the ", oracle_.accepted_reports, " accepted");
  oracle_.accepted_reports = after.timing_reports();
  for (int rank = 0; rank < kWorld; ++rank) {
    const int64_t shown = after.ranks(rank).last_reported_step();
    const int64_t highest = oracle_.HighestReported(rank);
    DCP_FUZZ_CHECK(shown <= highest, "after a restart rank ", rank,
                   " last reported step ", shown, " of ", highest);
    oracle_.reported_base[rank] = shown;
    oracle_.reported_since[rank] = -1;
  }
  // Agents register and stream again; a drain is not kept.
  oracle_.registered.clear();
  streams_.clear();
  draining_ = after.draining();
  last_ = after;
}

}  // namespace fuzz
}  // namespace dcp
