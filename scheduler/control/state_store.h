#ifndef DCP_SCHEDULER_CONTROL_STATE_STORE_H_
#define DCP_SCHEDULER_CONTROL_STATE_STORE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "proto/plan.pb.h"
#include "scheduler/control/state.pb.h"

namespace dcp {

/// The most ranks a job's world may have: a job record naming more is
/// refused (its member list is built from the count).
inline constexpr int kMaxWorldSize = 1 << 20;

/// What a job's durable state holds: what a restarted control plane
/// resumes from. Rebuilt by applying records in order (`ApplyStateRecord`).
struct DurableState {
  /// One planned step that is not completed yet.
  struct Step {
    v1::StepPlan plan;
    /// The accepted timing reports, in the order they were accepted, at
    /// most one a rank of `members`.
    std::vector<v1::TimingReport> reports;
    /// The ranks of the step's world, ascending (every rank until a
    /// shrink); the step completes when each of them reported.
    std::vector<int> members;
    /// The abandoned step whose samples it trains again (-1: none, its
    /// samples were the step builder's).
    int64_t reserve_of = -1;
  };

  /// Set by the first record; empty in a new state.
  std::optional<state::JobIdentity> job;
  /// The current epoch: the latest of the plans' and epoch records'.
  int64_t epoch = 0;
  /// Steps [0, completed_steps) were reported by every rank.
  int64_t completed_steps = 0;
  /// Steps [completed_steps, planned_steps()) in order.
  std::deque<Step> steps;
  /// The cost model after the last refit; empty before the first.
  std::optional<state::CostModelState> model;
  /// The rendezvous store.
  std::map<std::string, std::string> store;
  /// The current epoch's ranks, ascending: every rank until a shrink.
  std::vector<int> members;
  /// Steps a shrink abandoned that no plan re-served yet, in order; the
  /// next plans re-serve them first, one each.
  std::deque<state::AbandonedStep> reserve;
  /// The [from, to) ranges of steps ever abandoned, ascending.
  std::vector<std::pair<int64_t, int64_t>> abandoned;
  /// Plans that re-served an abandoned step; the others drew their samples
  /// from the step builder (`planned_steps() - reserved_planned` of them).
  int64_t reserved_planned = 0;
  /// The first step the shrink that began the current epoch abandoned
  /// (-1: it abandoned none, or a grow or no change began it).
  int64_t epoch_abandoned_from = -1;

  int64_t planned_steps() const {
    return completed_steps + static_cast<int64_t>(steps.size());
  }
  /// Whether a shrink or grow left anything a plain replay would not
  /// rebuild (snapshots then write the world and each kept step's).
  bool world_changed() const;
};

/// Applies one record to `state`. FAILED_PRECONDITION for a record that
/// cannot follow what `state` holds: anything before the job, a second job,
/// a plan that is not the next step (or, while abandoned steps wait, does
/// not train the first one's samples), a report for a step never planned or
/// from a rank outside the step's world, a world change whose epoch is not
/// later, whose ranks are not a non-empty ascending subset of the world,
/// or whose abandoned steps are not the ones planned and not completed. A
/// report for a completed or abandoned step, or a second report of a rank
/// for a step, changes nothing (a retry that was recorded twice). A step
/// leaves `steps` once it and every step before it have a report from
/// every rank of its world.
absl::Status ApplyStateRecord(const state::StateRecord& record,
                              DurableState* state);

/// Records that rebuild `state` from nothing, in an order
/// `ApplyStateRecord` takes: the job, the completed-step count, the epoch,
/// the model, the store, the world (only when `world_changed()`), then
/// every kept step's plan (a `kept_step` once the world changed) followed
/// by its reports.
std::vector<state::StateRecord> SnapshotRecords(const DurableState& state);

/// FAILED_PRECONDITION naming the first field in which `current` (the
/// restarted scheduler's configuration) differs from `stored`, with both
/// values. `current.session_id` is compared only when it is set.
absl::Status CheckSameJob(const state::JobIdentity& stored,
                          const state::JobIdentity& current);

/// Where the control plane keeps its durable state: records written in
/// order, each durable when `Write` returns. The control plane works
/// without one (nothing survives a restart) and uses `FakeStateStore` in
/// tests.
///
/// Implementations are thread-safe: `Write` may be called from any thread,
/// concurrently.
class StateStoreInterface {
 public:
  virtual ~StateStoreInterface() = default;

  /// The state found when the store was opened (no job: a new one). Does
  /// not change afterwards.
  virtual const DurableState& recovered() const = 0;

  /// Appends `record`; returns once it is durable. An error means the
  /// record may or may not survive a restart; after an I/O error every
  /// later write fails too.
  virtual absl::Status Write(const state::StateRecord& record) = 0;
};

/// A `StateStoreInterface` in memory, for tests: keeps the records it was
/// given, can be told to fail, and a new one can start from what an old one
/// holds (a restart). Thread-safe.
///
///   FakeStateStore first;
///   ... a control plane writes to &first, then "crashes" ...
///   FakeStateStore second(first.state());
class FakeStateStore final : public StateStoreInterface {
 public:
  FakeStateStore() = default;
  /// A store that starts from `recovered` (as a restart would find it).
  explicit FakeStateStore(DurableState recovered);

  const DurableState& recovered() const override { return recovered_; }
  absl::Status Write(const state::StateRecord& record) override
      ABSL_LOCKS_EXCLUDED(mu_);

  /// From now on every write fails with `error` (OK: writes work again).
  void FailWrites(absl::Status error) ABSL_LOCKS_EXCLUDED(mu_);
  /// What a restart would find now.
  DurableState state() const ABSL_LOCKS_EXCLUDED(mu_);
  /// The records written, in order.
  std::vector<state::StateRecord> written() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const DurableState recovered_;
  mutable absl::Mutex mu_;
  DurableState live_ ABSL_GUARDED_BY(mu_);
  std::vector<state::StateRecord> written_ ABSL_GUARDED_BY(mu_);
  absl::Status fail_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_CONTROL_STATE_STORE_H_
