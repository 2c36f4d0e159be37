#ifndef DCP_SCHEDULER_PLANNER_PLAN_H_
#define DCP_SCHEDULER_PLANNER_PLAN_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace dcp {

/// One forward+backward pass of a sequence-parallel group over a pack of
/// samples. Plain value type.
///
/// The group is `u`-way Ulysses inside a `c`-way ring (docs/COST_MODEL.md,
/// "Hybrid groups"): `p = u * c` ranks, whose consecutive runs of `u` are
/// the Ulysses subgroups and whose consecutive subgroups are ring
/// neighbours. `ulysses == 0` means the whole group is Ulysses (u = p, no
/// ring), as every plan was before rings.
struct TaskPlan {
  /// Global ranks of the group, ascending. Its size is the sequence-parallel
  /// degree p.
  std::vector<int> ranks;
  /// Sample ids (indices into the length table) packed into this task.
  std::vector<int64_t> samples;
  /// Parallel to `samples`: the factor each sample's mean per-token loss is
  /// multiplied by so that the sum over the step, with gradients summed over
  /// all ranks, equals the mean loss over every token of the step. Empty when
  /// the plan came from a file that did not carry weights.
  std::vector<double> loss_weights;
  /// Fraction of layers whose activations are recomputed in the backward pass.
  double recompute = 0.0;
  /// The Ulysses degree u, dividing the heads and p; 0 for the whole group.
  int ulysses = 0;

  /// The Ulysses degree the task runs with: `ulysses`, or p when it is 0.
  int UlyssesDegree() const {
    return ulysses > 0 ? ulysses : static_cast<int>(ranks.size());
  }
  /// The `ulysses` of a task of `p` ranks at Ulysses degree `u`: 0 for
  /// plain Ulysses (u = p), as plans carry it.
  static int UlyssesField(int p, int u) { return u == p ? 0 : u; }
};

/// Which of the planner's candidates a plan is: the data-centric search's
/// or a uniform one (every sequence on groups of one size, as a static
/// layout runs).
enum class PlanOrigin {
  kUnknown,  ///< not from the planner (a plan file, a baseline, the wire)
  kSearch,
  kUniform,
};

/// The plan of one global batch: its samples and its tasks in execution
/// order. A rank's micro-steps are the tasks that name it, in order.
struct StepPlan {
  int64_t step = 0;
  std::vector<int64_t> samples;
  std::vector<TaskPlan> tasks;
  /// The planner's own prediction of the step time (0 when unknown).
  double predicted_makespan_s = 0.0;
  /// The candidate the planner kept; not carried on the wire or in plan
  /// files.
  PlanOrigin origin = PlanOrigin::kUnknown;
};

/// Read-only view of the length table with the context window applied.
/// Cheap to copy; does not own the lengths.
class LengthView {
 public:
  LengthView() = default;
  LengthView(absl::Span<const int32_t> lengths, int64_t window)
      : lengths_(lengths), window_(window) {}

  int64_t size() const { return static_cast<int64_t>(lengths_.size()); }
  /// Length of sample `id` truncated to the context window.
  int64_t operator[](int64_t id) const {
    return std::min<int64_t>(lengths_[id], window_);
  }
  int64_t window() const { return window_; }
  /// Hints that sample `id`'s length is read soon: a step reads the table
  /// in shuffled order, a cache miss a sample. Ids out of range are ignored.
  void Prefetch(int64_t id) const {
    if (id >= 0 && id < size()) __builtin_prefetch(lengths_.data() + id);
  }

 private:
  absl::Span<const int32_t> lengths_;
  int64_t window_ = 0;
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_PLANNER_PLAN_H_
