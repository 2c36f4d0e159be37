#ifndef DCP_SCHEDULER_CONTROL_PROFILE_STAGE_H_
#define DCP_SCHEDULER_CONTROL_PROFILE_STAGE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/profile_point.h"
#include "proto/scheduler_service.pb.h"
#include "scheduler/control/control_events.h"
#include "scheduler/planner/cost_model.h"

namespace dcp {

/// What a `ProfileStage` asks for and how long it waits. `ControlPlane`
/// initialises it in field order.
struct ProfileStageOptions {
  /// Whether there is a profile stage at all; without one the stage is
  /// never pending.
  bool enabled = false;
  /// How long after the first registration the stage waits for answers.
  absl::Duration timeout = absl::Seconds(60);
  std::string session_id;
  int world_size = 0;
  int gpus_per_node = 8;
  /// The model's attention heads: a shape's Ulysses degree divides them.
  int heads = 1;
  /// The grid of the ProfileRequest (see `ControlPlaneOptions`);
  /// `CompleteProfileGrid` fills an empty `lengths` for a window.
  std::vector<int64_t> lengths = {256, 1024, 4096};
  std::vector<double> recompute = {0.0, 1.0};
  int repetitions = 2;
  /// One per `recompute` ratio, or empty (every point): a point (length,
  /// group size p, recompute[i]) is measured only when length / p tokens
  /// per GPU are at most max_tokens_per_gpu[i] (`ProfilePointFits`).
  std::vector<int64_t> max_tokens_per_gpu;
  /// When > 0, a length above it is measured only on the largest group size
  /// in its first shape (`ProfilePointMeasured`).
  int64_t all_groups_up_to_length = 0;
};

/// The Ulysses degrees the start-up profile measures groups of `p` ranks
/// at, for a model of `heads` heads: where the heads allow plain Ulysses on
/// the whole group, that and the shortest ring (u the largest divisor of p
/// below it: p / 2 for even p), so that the fit sees a ring's passes before
/// the first plan; otherwise the largest degree dividing both, inside a ring
/// of p / u. One degree, 1, for p = 1.
std::vector<int> ProfiledDegrees(int p, int heads);

/// The longest length `CompleteProfileGrid` has measured on every group
/// size; longer ones only on the largest (the former default grid's end).
inline constexpr int64_t kProfileAllGroupsUpToLength = 4096;

/// The grid lengths that reach a context window: 256, 1024, ... (times 4)
/// below `window`, then `window` itself (at least 256).
std::vector<int64_t> DefaultProfileLengths(int64_t window);

/// The scheduler's default grid, one rule for the control plane and for
/// dcp-bench's simulated profile: empty `lengths` become
/// `DefaultProfileLengths(window)`, `max_tokens_per_gpu` what `model`
/// says fits in memory at each recompute ratio, so that a long length is
/// measured only on groups (and at ratios) that can hold it, and lengths
/// above `kProfileAllGroupsUpToLength` only on the largest group size.
void CompleteProfileGrid(const CostModel& model, int64_t window,
                         ProfileStageOptions& options);

/// The start-up "data profile" stage: which ranks still owe an answer to
/// the ProfileRequest, and when the stage ends (every rank answered, or
/// `timeout` after the first registration by the caller's clock). It only
/// keeps the stage's state: the control plane sends the request, collects
/// the observations, refits and starts planning when `BeginEnd` says so.
///
/// Thread-safe; one lock of its own, never held while calling out. The
/// stage goes pending -> ending (`BeginEnd`, once) -> over (`End`).
///
///   ProfileStage stage(options);
///   stage.OnRegistration(clock.Now());
///   if (stage.Answer(rank)) WakePlanner();
///   if (std::optional<bool> timed_out = stage.BeginEnd(clock.Now())) ...
class ProfileStage {
 public:
  explicit ProfileStage(ProfileStageOptions options);
  ProfileStage(const ProfileStage&) = delete;
  ProfileStage& operator=(const ProfileStage&) = delete;

  /// The ProfileRequest of epoch 0: every group size p <= min(world,
  /// gpus_per_node) dividing the world, and twice a node where that divides
  /// the world (so that the inter-node links are measured too), once for
  /// each of its `ProfiledDegrees`, with the aligned groups [k*p, (k+1)*p)
  /// of each p > 1, and the per-GPU token cap.
  static v1::ProfileRequest MakeRequest(const ProfileStageOptions& options);

  /// The request as the message a plan stream sends (shared, not copied).
  const std::shared_ptr<const v1::PlanUpdate>& request() const {
    return request_;
  }

  /// Whether planning must still wait for the stage (pending or ending).
  bool pending() const ABSL_LOCKS_EXCLUDED(mu_);

  /// Whether a stream of `rank` should send the request: the stage is
  /// pending and `rank` has not answered.
  bool ShouldAsk(int rank) const ABSL_LOCKS_EXCLUDED(mu_);

  /// A rank registered at `now`; the first registration starts the timeout.
  void OnRegistration(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  /// `rank` answered. Only the first answer of each rank counts, and none
  /// once the stage is ending. Returns whether every rank has now answered
  /// (the stage can end).
  bool Answer(int rank) ABSL_LOCKS_EXCLUDED(mu_);

  /// Starts ending the stage if it is due at `now` (every rank answered, or
  /// the timeout passed); returns whether it timed out. Returns nullopt
  /// when it is not due, already ending, or over: one caller ends it.
  std::optional<bool> BeginEnd(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  /// Who answered and who did not, with `observations` held now.
  ProfileDoneEvent Outcome(bool timed_out, int64_t observations) const
      ABSL_LOCKS_EXCLUDED(mu_);

  /// Ends the stage begun with `BeginEnd`: planning may start.
  void End() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const ProfileStageOptions options_;
  const std::shared_ptr<const v1::PlanUpdate> request_;

  mutable absl::Mutex mu_;
  bool pending_ ABSL_GUARDED_BY(mu_);
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<bool> answered_ ABSL_GUARDED_BY(mu_);
  int answers_ ABSL_GUARDED_BY(mu_) = 0;
  /// Set at the first registration.
  absl::Time deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
};

}  // namespace dcp

#endif  // DCP_SCHEDULER_CONTROL_PROFILE_STAGE_H_
