#include "scheduler/control/state_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dcp {
namespace {

absl::Status Refused(absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat("state record out of place: ", why));
}

/// Drops completed steps from the front: every rank reported them.
void AdvanceCompleted(DurableState* state) {
  const size_t world = static_cast<size_t>(state->job->world_size());
  while (!state->steps.empty() &&
         state->steps.front().reports.size() == world) {
    state->steps.pop_front();
    ++state->completed_steps;
  }
}

absl::Status ApplyPlan(const v1::StepPlan& plan, DurableState* state) {
  if (plan.step() != state->planned_steps()) {
    return Refused(absl::StrCat("the plan of step ", plan.step(),
                                " follows step ", state->planned_steps() - 1));
  }
  state->steps.push_back(DurableState::Step{plan, {}});
  state->epoch = std::max(state->epoch, plan.epoch());
  return absl::OkStatus();
}

absl::Status ApplyReport(const v1::TimingReport& report, DurableState* state) {
  if (report.rank() < 0 || report.rank() >= state->job->world_size()) {
    return Refused(absl::StrCat("a report of rank ", report.rank(),
                                " in a world of ", state->job->world_size()));
  }
  if (report.step() < state->completed_steps) return absl::OkStatus();
  if (report.step() >= state->planned_steps()) {
    return Refused(absl::StrCat("a report for step ", report.step(),
                                ", which was never planned"));
  }
  DurableState::Step& step =
      state->steps[report.step() - state->completed_steps];
  for (const v1::TimingReport& seen : step.reports) {
    if (seen.rank() == report.rank()) return absl::OkStatus();
  }
  step.reports.push_back(report);
  AdvanceCompleted(state);
  return absl::OkStatus();
}

/// Removes the keys "<session>/e<k>/..." with k < `epoch`.
void PurgeBefore(int64_t epoch, DurableState* state) {
  const std::string prefix = absl::StrCat(state->job->session_id(), "/e");
  for (auto it = state->store.lower_bound(prefix);
       it != state->store.end() && absl::StartsWith(it->first, prefix);) {
    const absl::string_view rest =
        absl::string_view(it->first).substr(prefix.size());
    const size_t slash = rest.find('/');
    int64_t key_epoch = 0;
    if (slash != absl::string_view::npos &&
        absl::SimpleAtoi(rest.substr(0, slash), &key_epoch) &&
        key_epoch < epoch) {
      it = state->store.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace

absl::Status ApplyStateRecord(const state::StateRecord& record,
                              DurableState* state) {
  if (record.has_job()) {
    if (state->job.has_value()) return Refused("a second job");
    state->job = record.job();
    return absl::OkStatus();
  }
  if (!state->job.has_value()) return Refused("a record before the job");
  switch (record.record_case()) {
    case state::StateRecord::kPlannedStep:
      return ApplyPlan(record.planned_step(), state);
    case state::StateRecord::kReport:
      return ApplyReport(record.report(), state);
    case state::StateRecord::kModel:
      state->model = record.model();
      return absl::OkStatus();
    case state::StateRecord::kStoreSet:
      state->store[record.store_set().key()] = record.store_set().value();
      return absl::OkStatus();
    case state::StateRecord::kStorePurgeBefore:
      PurgeBefore(record.store_purge_before(), state);
      return absl::OkStatus();
    case state::StateRecord::kCompletedSteps:
      if (!state->steps.empty() || record.completed_steps() < 0) {
        return Refused("a completed-step count after plans");
      }
      state->completed_steps = record.completed_steps();
      return absl::OkStatus();
    case state::StateRecord::kEpoch:
      if (record.epoch() < state->epoch) {
        return Refused(absl::StrCat("epoch ", record.epoch(), " after epoch ",
                                    state->epoch));
      }
      state->epoch = record.epoch();
      return absl::OkStatus();
    default:
      return Refused("an empty or unknown record");
  }
}

std::vector<state::StateRecord> SnapshotRecords(const DurableState& state) {
  std::vector<state::StateRecord> records;
  if (!state.job.has_value()) return records;
  *records.emplace_back().mutable_job() = *state.job;
  records.emplace_back().set_completed_steps(state.completed_steps);
  records.emplace_back().set_epoch(state.epoch);
  if (state.model.has_value())
    *records.emplace_back().mutable_model() = *state.model;
  for (const auto& [key, value] : state.store) {
    state::StoreEntry* entry = records.emplace_back().mutable_store_set();
    entry->set_key(key);
    entry->set_value(value);
  }
  for (const DurableState::Step& step : state.steps) {
    *records.emplace_back().mutable_planned_step() = step.plan;
    for (const v1::TimingReport& report : step.reports) {
      *records.emplace_back().mutable_report() = report;
    }
  }
  return records;
}

absl::Status CheckSameJob(const state::JobIdentity& stored,
                          const state::JobIdentity& current) {
  const auto differs = [](absl::string_view field, const auto& was,
                          const auto& now) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the state holds another job: its ", field, " is ", was,
        ", this scheduler's is ", now,
        "; restart with the job's own flags, or use a new --state_dir"));
  };
  if (!current.session_id().empty() &&
      current.session_id() != stored.session_id()) {
    return differs("session_id", stored.session_id(), current.session_id());
  }
  if (current.samples() != stored.samples() ||
      current.lengths_digest() != stored.lengths_digest()) {
    return differs("lengths",
                   absl::StrCat(stored.samples(), " samples (digest ",
                                absl::Hex(stored.lengths_digest()), ")"),
                   absl::StrCat(current.samples(), " samples (digest ",
                                absl::Hex(current.lengths_digest()), ")"));
  }
  if (current.window() != stored.window()) {
    return differs("window", stored.window(), current.window());
  }
  if (current.tokens_per_step() != stored.tokens_per_step()) {
    return differs("tokens_per_step", stored.tokens_per_step(),
                   current.tokens_per_step());
  }
  if (current.seed() != stored.seed()) {
    return differs("seed", stored.seed(), current.seed());
  }
  if (current.balance_steps() != stored.balance_steps()) {
    return differs("balance_steps", stored.balance_steps(),
                   current.balance_steps());
  }
  if (current.world_size() != stored.world_size()) {
    return differs("world_size", stored.world_size(), current.world_size());
  }
  if (current.gpus_per_node() != stored.gpus_per_node()) {
    return differs("gpus_per_node", stored.gpus_per_node(),
                   current.gpus_per_node());
  }
  if (current.model() != stored.model()) {
    return differs("model", absl::StrCat("'", stored.model(), "'"),
                   absl::StrCat("'", current.model(), "'"));
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------- fake

FakeStateStore::FakeStateStore(DurableState recovered)
    : recovered_(std::move(recovered)), live_(recovered_) {}

absl::Status FakeStateStore::Write(const state::StateRecord& record) {
  absl::MutexLock lock(&mu_);
  if (!fail_.ok()) return fail_;
  if (absl::Status applied = ApplyStateRecord(record, &live_); !applied.ok()) {
    return applied;
  }
  written_.push_back(record);
  return absl::OkStatus();
}

void FakeStateStore::FailWrites(absl::Status error) {
  absl::MutexLock lock(&mu_);
  fail_ = std::move(error);
}

DurableState FakeStateStore::state() const {
  absl::MutexLock lock(&mu_);
  return live_;
}

std::vector<state::StateRecord> FakeStateStore::written() const {
  absl::MutexLock lock(&mu_);
  return written_;
}

}  // namespace dcp
