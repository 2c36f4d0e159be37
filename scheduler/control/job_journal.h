#ifndef DCP_SCHEDULER_CONTROL_JOB_JOURNAL_H_
#define DCP_SCHEDULER_CONTROL_JOB_JOURNAL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/model_spec.h"
#include "proto/plan.pb.h"
#include "scheduler/control/state.pb.h"
#include "scheduler/control/state_store.h"
#include "scheduler/control/step_window.h"
#include "scheduler/planner/cost_model.h"
#include "scheduler/planner/step_builder.h"

namespace dcp {

/// FNV-1a over the lengths' 32-bit little-endian bytes: stable across
/// builds and hosts, unlike absl::Hash (`JobIdentity::lengths_digest`).
uint64_t LengthsDigest(const std::vector<int32_t>& lengths);

/// The model as a job identity names it: `name layers=.. hidden=.. ...`.
std::string ModelText(const ModelSpec& model);

/// A cost model's coefficients and refit count as the state keeps them,
/// and back (on `like`'s model, memory cap and node size).
state::CostModelState ModelState(const CostModel& model, int64_t refits);
CostModel ModelFromState(const state::CostModelState& stored,
                         const CostModel& like);

/// The durable side of a control plane, after Ray's `GcsTableStorage`: it
/// turns each effect the control plane is about to let out of the process
/// (a plan, an accepted report, a rendezvous key, a refit, a change of the
/// world) into a state record and writes it, so that the control plane
/// itself knows no record format. Without a store every write is OK and
/// keeps nothing (a restart starts over).
///
/// Thread-safe as the store is; holds no lock of its own. Does not own the
/// store, which must outlive it.
///
///   JobJournal journal(options.state_store);
///   RETURN_IF_ERROR(journal.WritePlan(plan));  // before a stream sees it
class JobJournal {
 public:
  explicit JobJournal(StateStoreInterface* store) : store_(store) {}

  /// Whether anything is kept.
  bool durable() const { return store_ != nullptr; }

  /// Each returns once the record is durable; an error names what could
  /// not be kept. `plan` is unchanged on return (swapped through the
  /// record, not copied).
  absl::Status WriteJob(const state::JobIdentity& job) const;
  absl::Status WritePlan(v1::StepPlan& plan) const;
  absl::Status WriteReport(const v1::TimingReport& report) const;
  absl::Status WriteStoreSet(absl::string_view key,
                             absl::string_view value) const;
  absl::Status WriteStorePurge(int64_t epoch) const;
  absl::Status WriteModel(const CostModel& model, int64_t refits) const;
  absl::Status WriteWorldChange(const EpochChange& change) const;

 private:
  absl::Status Write(const state::StateRecord& record,
                     absl::string_view what) const;

  StateStoreInterface* const store_;
};

/// Draws from `builder` (new, of the job's options) every step the job
/// drew from it, checking the kept steps that were drawn against their
/// plans' samples: FAILED_PRECONDITION when they differ (another job's or
/// another dcp version's state). Steps that re-served an abandoned step
/// drew nothing.
absl::Status ReplayStepBuilder(const DurableState& durable,
                               StepBuilder& builder);

/// What a `StepWindow` resumes from: `durable`'s epoch, world, kept steps,
/// abandoned ranges and the steps still to re-serve.
RestoredWindow WindowStateOf(const DurableState& durable);

}  // namespace dcp

#endif  // DCP_SCHEDULER_CONTROL_JOB_JOURNAL_H_
