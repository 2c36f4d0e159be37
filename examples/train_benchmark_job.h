#ifndef DCP_EXAMPLES_TRAIN_BENCHMARK_JOB_H_
#define DCP_EXAMPLES_TRAIN_BENCHMARK_JOB_H_

// What dcp-train-bench's parent and its child processes share through the
// run's folder: the job (job.json), the plans of every step (one
// v1::StepPlan a file and plan kind), and what the children measured (JSON
// Lines). Files rather than pipes so that a failed run can be inspected
// (--keep_dir).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model_spec.h"
#include "proto/plan.pb.h"
#include "scheduler/planner/cost_model.h"
#include "train/trainer.h"

namespace dcp::train_benchmark {

/// The two plans every global batch gets.
enum class PlanKind { kDcp, kStatic };
constexpr PlanKind kPlanKinds[] = {PlanKind::kDcp, PlanKind::kStatic};
/// "dcp" or "static".
const char* PlanKindName(PlanKind kind);

/// What every child process is told. Plain value type.
struct Job {
  ModelSpec model;
  int world_size = 0;
  /// The rendezvous store's session; groups meet under "<session>/e0/...".
  std::string session;
  /// Steps of each plan kind, warm-up included (plans 0 .. steps-1).
  int steps = 0;
  /// Seed of the initial weights; the same on every rank and both kinds.
  uint64_t weight_seed = 0;
  /// Tokens of the one sequence the memory check runs.
  int64_t memory_length = 0;
  /// The context window: the longest sequence of the plans (and of the
  /// probe's tasks).
  int64_t window = 0;
  /// Bound on forming a group and on each collective.
  double group_timeout_s = 120;
};

absl::Status WriteJob(const std::string& dir, const Job& job);
absl::StatusOr<Job> ReadJob(const std::string& dir);

absl::Status WritePlan(const std::string& dir, PlanKind kind, int step,
                       const v1::StepPlan& plan);
absl::StatusOr<v1::StepPlan> ReadPlan(const std::string& dir, PlanKind kind,
                                      int step);

/// One rank's measurement of one step of one plan kind.
struct StepRecord {
  PlanKind kind = PlanKind::kDcp;
  int step = 0;
  /// Elapsed (system clock) and this process's CPU time (ProcessCpuClock)
  /// of RankTrainer::Step.
  double wall_s = 0;
  double cpu_s = 0;
  /// Real tokens the world ran in the step.
  int64_t tokens = 0;
  double loss = 0;
};

/// Appends `record` as a JSON line to rank `rank`'s stats file.
absl::Status AppendStepRecord(const std::string& dir, int rank,
                              const StepRecord& record);
absl::StatusOr<std::vector<StepRecord>> ReadStepRecords(const std::string& dir,
                                                        int rank);

/// One collective the Gloo probe timed over the world (rank 0's median of
/// several runs, after warm-ups).
struct GlooRecord {
  /// "all_to_all" (all_to_all_single of `floats` float32 per rank) or
  /// "all_reduce" (a sum of `floats` float32).
  std::string collective;
  int64_t floats = 0;
  double seconds = 0;
};

absl::Status AppendGlooRecord(const std::string& dir, const GlooRecord& record);
absl::StatusOr<std::vector<GlooRecord>> ReadGlooRecords(const std::string& dir);

/// A task the probe timed (rank 0's fastest run of it), as the cost model is
/// fitted to it: group size, Ulysses degree, recompute, lengths, seconds.
absl::Status AppendTaskRecord(const std::string& dir,
                              const TaskObservation& record);
absl::StatusOr<std::vector<TaskObservation>> ReadTaskRecords(
    const std::string& dir);

/// A step plan of `world` / `size` tasks, task g over ranks g * size ..
/// (g + 1) * size - 1 (as `ulysses`-way Ulysses inside a ring, 0: the whole
/// group), each one sequence of each of `lengths` packed (sample ids
/// apart), at `recompute`: every group busy at once, as they are in
/// training. Group g meets under `prefix`/g<g>. `size` divides `world`;
/// a size of 1 (or less) gives one-rank tasks, no groups.
v1::StepPlan GroupTaskPlan(int64_t step, int world, int size, int ulysses,
                           const std::vector<int64_t>& lengths,
                           double recompute, const std::string& prefix);

/// A step plan of `world` one-rank tasks, task r on rank r, each one
/// sequence of each of `lengths` packed (sample ids apart), at `recompute`:
/// every rank busy at once, as they are in training.
v1::StepPlan EveryRankTaskPlan(int64_t step, int world,
                               const std::vector<int64_t>& lengths,
                               double recompute);

/// The memory check's measurement at one recompute ratio.
struct MemoryRecord {
  double recompute = 0;
  int layers_recomputed = 0;
  /// Resident bytes just before the step, and the peak during it.
  int64_t baseline_bytes = 0;
  int64_t peak_bytes = 0;
};

absl::Status AppendMemoryRecord(const std::string& dir,
                                const MemoryRecord& record);
absl::StatusOr<std::vector<MemoryRecord>> ReadMemoryRecords(
    const std::string& dir);

/// The trainer every process of the job builds for rank `rank` of a world
/// of `world` (1 for single-process measurements): float32, the job's
/// weights, the synthetic corpus over the model's vocabulary. `clock` is
/// not owned.
train::RankTrainerOptions TrainerOptions(const Job& job, int world, int rank,
                                         Clock* clock);

/// A step plan of one task on rank 0 alone: one sequence of each of
/// `lengths` (sample ids 0, 1, ...) packed, at `recompute`.
v1::StepPlan SingleRankPlan(int64_t step, const std::vector<int64_t>& lengths,
                            double recompute);

}  // namespace dcp::train_benchmark

#endif  // DCP_EXAMPLES_TRAIN_BENCHMARK_JOB_H_
