#include "scheduler/control/state_store.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace dcp {
namespace {

absl::Status Refused(absl::string_view why) {
  return absl::FailedPreconditionError(
      absl::StrCat("state record out of place: ", why));
}

/// Drops completed steps from the front: every rank of their world
/// reported them.
void AdvanceCompleted(DurableState* state) {
  while (!state->steps.empty() && state->steps.front().reports.size() ==
                                      state->steps.front().members.size()) {
    state->steps.pop_front();
    ++state->completed_steps;
  }
}

/// `ranks` as a world: non-empty, ascending, each in [0, world_size).
absl::StatusOr<std::vector<int>> Members(
    const google::protobuf::RepeatedField<int32_t>& ranks, int world_size) {
  std::vector<int> members(ranks.begin(), ranks.end());
  const bool in_world =
      !members.empty() && members.front() >= 0 && members.back() < world_size;
  if (!in_world || std::adjacent_find(members.begin(), members.end(),
                                      std::greater_equal<int>()) !=
                       members.end()) {
    return Refused(absl::StrCat("a world of ranks [",
                                absl::StrJoin(members, ","),
                                "], not an ascending subset of ", world_size,
                                " ranks"));
  }
  return members;
}

/// The same samples, in any order.
bool SameSamples(const google::protobuf::RepeatedField<int64_t>& a,
                 const google::protobuf::RepeatedField<int64_t>& b) {
  std::vector<int64_t> x(a.begin(), a.end());
  std::vector<int64_t> y(b.begin(), b.end());
  std::sort(x.begin(), x.end());
  std::sort(y.begin(), y.end());
  return x == y;
}

absl::Status ApplyKept(const v1::StepPlan& plan, std::vector<int> members,
                       int64_t reserve_of, DurableState* state) {
  if (plan.step() != state->planned_steps()) {
    return Refused(absl::StrCat("the plan of step ", plan.step(),
                                " follows step ", state->planned_steps() - 1));
  }
  state->steps.push_back(
      DurableState::Step{plan, {}, std::move(members), reserve_of});
  state->epoch = std::max(state->epoch, plan.epoch());
  return absl::OkStatus();
}

/// A new plan: for the current world, re-serving the first abandoned step
/// while any waits (as the step window plans them).
absl::Status ApplyPlan(const v1::StepPlan& plan, DurableState* state) {
  if (state->reserve.empty()) {
    return ApplyKept(plan, state->members, -1, state);
  }
  const state::AbandonedStep& first = state->reserve.front();
  if (!SameSamples(plan.samples(), first.samples())) {
    return Refused(absl::StrCat("the plan of step ", plan.step(),
                                " does not train the samples of abandoned "
                                "step ",
                                first.step(), ", the next to re-serve"));
  }
  RETURN_IF_ERROR(ApplyKept(plan, state->members, first.step(), state));
  state->reserve.pop_front();
  ++state->reserved_planned;
  return absl::OkStatus();
}

/// The abandoned range of `change` fits `state`: it ends at the steps
/// planned and, unless empty, starts no earlier than the last abandoned
/// range's end (nor after the completed steps); its reserve is its steps,
/// in order.
absl::Status CheckAbandoned(const state::WorldChange& change,
                            const DurableState& state) {
  const int64_t from = change.abandoned_from();
  const int64_t to = change.abandoned_to();
  const int64_t floor =
      state.abandoned.empty() ? 0 : state.abandoned.back().second;
  // A grow abandons nothing: [to, to).
  const bool abandons = from != to;
  if (to != state.planned_steps() || from > to ||
      (abandons && (from < floor || from > state.completed_steps))) {
    return Refused(absl::StrCat("a world change abandoning steps [", from,
                                ", ", to, ") with steps [",
                                state.completed_steps, ", ",
                                state.planned_steps(), ") not completed"));
  }
  if (change.reserve_size() != to - from) {
    return Refused(absl::StrCat("a world change abandoning ", to - from,
                                " steps with ", change.reserve_size(),
                                " to re-serve"));
  }
  for (int i = 0; i < change.reserve_size(); ++i) {
    if (change.reserve(i).step() != from + i) {
      return Refused(absl::StrCat("abandoned step ", change.reserve(i).step(),
                                  " where step ", from + i, " was expected"));
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyWorldChange(const state::WorldChange& change,
                              DurableState* state) {
  if (change.epoch() <= state->epoch) {
    return Refused(absl::StrCat("a world change to epoch ", change.epoch(),
                                " in epoch ", state->epoch));
  }
  ASSIGN_OR_RETURN(std::vector<int> members,
                   Members(change.members(), state->job->world_size()));
  RETURN_IF_ERROR(CheckAbandoned(change, *state));
  if (change.abandoned_from() < change.abandoned_to()) {
    state->abandoned.emplace_back(change.abandoned_from(),
                                  change.abandoned_to());
    state->steps.clear();
    state->completed_steps = change.abandoned_to();
  }
  state->reserve.insert(state->reserve.end(), change.reserve().begin(),
                        change.reserve().end());
  state->members = std::move(members);
  state->epoch = change.epoch();
  state->epoch_abandoned_from = change.abandoned_from() < change.abandoned_to()
                                    ? change.abandoned_from()
                                    : -1;
  return absl::OkStatus();
}

absl::Status ApplyWorldState(const state::WorldState& world,
                             DurableState* state) {
  if (!state->steps.empty() || world.abandoned_bounds_size() % 2 != 0 ||
      world.reserved_planned() < 0) {
    return Refused("a world snapshot after plans, or with odd bounds");
  }
  ASSIGN_OR_RETURN(state->members,
                   Members(world.members(), state->job->world_size()));
  state->reserve.assign(world.reserve().begin(), world.reserve().end());
  state->abandoned.clear();
  for (int i = 0; i < world.abandoned_bounds_size(); i += 2) {
    state->abandoned.emplace_back(world.abandoned_bounds(i),
                                  world.abandoned_bounds(i + 1));
  }
  state->reserved_planned = world.reserved_planned();
  state->epoch_abandoned_from =
      world.has_epoch_abandoned_from() ? world.epoch_abandoned_from() : -1;
  return absl::OkStatus();
}

absl::Status ApplyKeptStep(const state::KeptStep& kept, DurableState* state) {
  ASSIGN_OR_RETURN(std::vector<int> members,
                   Members(kept.members(), state->job->world_size()));
  return ApplyKept(kept.plan(), std::move(members), kept.reserve_of(), state);
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
  if (!std::binary_search(step.members.begin(), step.members.end(),
                          report.rank())) {
    return Refused(absl::StrCat("a report of rank ", report.rank(),
                                " for step ", report.step(),
                                ", whose world it is not in"));
  }
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

state::WorldState WorldOf(const DurableState& state) {
  state::WorldState world;
  world.mutable_members()->Add(state.members.begin(), state.members.end());
  for (const state::AbandonedStep& step : state.reserve) {
    *world.add_reserve() = step;
  }
  for (const auto& [from, to] : state.abandoned) {
    world.add_abandoned_bounds(from);
    world.add_abandoned_bounds(to);
  }
  world.set_reserved_planned(state.reserved_planned);
  if (state.epoch_abandoned_from >= 0) {
    world.set_epoch_abandoned_from(state.epoch_abandoned_from);
  }
  return world;
}

}  // namespace

absl::Status ApplyStateRecord(const state::StateRecord& record,
                              DurableState* state) {
  if (record.has_job()) {
    if (state->job.has_value()) return Refused("a second job");
    if (record.job().world_size() < 1 ||
        record.job().world_size() > kMaxWorldSize) {
      return Refused(absl::StrCat("a job of ", record.job().world_size(),
                                  " ranks (1 to ", kMaxWorldSize, ")"));
    }
    state->job = record.job();
    state->members.clear();
    for (int r = 0; r < state->job->world_size(); ++r) {
      state->members.push_back(r);
    }
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
    case state::StateRecord::kWorldChange:
      return ApplyWorldChange(record.world_change(), state);
    case state::StateRecord::kWorld:
      return ApplyWorldState(record.world(), state);
    case state::StateRecord::kKeptStep:
      return ApplyKeptStep(record.kept_step(), state);
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
  const bool world = state.world_changed();
  if (world) *records.emplace_back().mutable_world() = WorldOf(state);
  for (const DurableState::Step& step : state.steps) {
    if (world) {
      state::KeptStep* kept = records.emplace_back().mutable_kept_step();
      *kept->mutable_plan() = step.plan;
      kept->mutable_members()->Add(step.members.begin(), step.members.end());
      kept->set_reserve_of(step.reserve_of);
    } else {
      *records.emplace_back().mutable_planned_step() = step.plan;
    }
    for (const v1::TimingReport& report : step.reports) {
      *records.emplace_back().mutable_report() = report;
    }
  }
  return records;
}

bool DurableState::world_changed() const {
  const auto partial = [this](const std::vector<int>& world) {
    return job.has_value() &&
           static_cast<int>(world.size()) != job->world_size();
  };
  if (partial(members) || !reserve.empty() || !abandoned.empty() ||
      reserved_planned > 0) {
    return true;
  }
  return std::any_of(steps.begin(), steps.end(),
                     [&](const Step& step) { return partial(step.members); });
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
