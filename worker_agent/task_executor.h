#ifndef DCP_WORKER_AGENT_TASK_EXECUTOR_H_
#define DCP_WORKER_AGENT_TASK_EXECUTOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "comm/communicator.h"
#include "proto/plan.pb.h"
#include "proto/scheduler_service.pb.h"

namespace dcp {

/// Configuration of a `TaskExecutor`: the rank and the shape of the
/// attention layer it runs (from the model's spec: heads, hidden / heads).
struct TaskExecutorOptions {
  /// The global rank this executor runs for. Required, >= 0.
  int rank = -1;
  /// Attention heads; every group size of the plans must divide it.
  /// Required.
  int num_heads = 0;
  /// Dimension of one head (the model's hidden size / heads). Required.
  int head_dim = 0;
  /// Causal (decoder) attention, as the model's `causal`.
  bool causal = true;
  /// Attention layers run per task, one after the other (each a full
  /// Ulysses layer: all-to-all, attention, all-to-all). At least 1.
  int layers = 1;
  /// Divisor of every sequence length: a sample of L tokens runs as
  /// ceil(L / token_scale) tokens (at least one), so that plans made for
  /// GPUs run in milliseconds on a CPU (attention is quadratic in the
  /// length). Reports still carry the plan's token counts; their seconds
  /// are what the scaled run took. 1 runs the real lengths. At least 1.
  int64_t token_scale = 64;
  /// Times the tasks; it must be monotonic. Null uses the steady clock.
  /// Not owned; must outlive the executor.
  Clock* clock = nullptr;
};

/// What one task did on this rank.
struct ExecutedTask {
  int task_index = 0;
  /// Its micro-step index on this rank.
  int micro_step = 0;
  /// The task's ranks (its group; one rank when p = 1).
  std::vector<int> group;
  std::vector<int64_t> samples;
  /// Tokens of the whole task after `token_scale` (and padding to a
  /// multiple of the group size).
  int64_t scaled_tokens = 0;
  double seconds = 0;
};

/// One step as run by this rank.
struct StepExecution {
  /// The timing report to send to the scheduler (`sync_seconds` is 0: there
  /// is no gradient to synchronise).
  v1::TimingReport report;
  /// Sample ids this rank processed, in micro-step order (a sample split
  /// over a group is processed by every member).
  std::vector<int64_t> samples;
  std::vector<ExecutedTask> tasks;
};

/// Runs one rank's part of a step on the CPU, as the dcp-agent's execute
/// mode does: for each of the rank's tasks in micro-step order, the Ulysses
/// attention layer (kernels/ulysses_attention.h) over the task's packed
/// samples with real collectives on the task's group, timed, plus a check
/// that the whole group runs the same task.
///
/// Inputs are deterministic: each token's q, k and v values are a hash of
/// (sample id, position in the sample, head, dim), so a sample's data does
/// not depend on how it was split or packed. The task's samples are packed
/// back to back after scaling (`token_scale`), padded at the end (a padding
/// sequence of its own) to a multiple of the group size p, and rank i of
/// the group holds tokens [i*T/p, (i+1)*T/p) of the pack: its 1/p share of
/// every packed sequence's tokens, sequence boundaries given by the
/// lengths.
///
/// Group agreement: after the layers, the members all-reduce a checksum of
/// (step, task index, sample ids) in which each member fills only its own
/// slot, so every member sees every other's exactly; any difference is an
/// INTERNAL error naming the step, the task and the ranks that disagree.
///
/// Thread-compatible; stateless between steps. Communicators are borrowed
/// from the resolver for the duration of a task.
///
///   TaskExecutorOptions options;
///   options.rank = 3;
///   options.num_heads = 8;
///   options.head_dim = 64;
///   ASSIGN_OR_RETURN(std::unique_ptr<TaskExecutor> executor,
///                    TaskExecutor::Create(options));
///   ASSIGN_OR_RETURN(StepExecution done, executor->RunStep(
///       step, [&](const v1::CommGroup& g) { return agent->Group(g); }));
///   RETURN_IF_ERROR(agent->ReportTimings(done.report));
class TaskExecutor {
 public:
  /// The communicator of a group of the step (p > 1).
  using GroupResolver =
      std::function<absl::StatusOr<Communicator*>(const v1::CommGroup&)>;

  /// INVALID_ARGUMENT names the bad option.
  static absl::StatusOr<std::unique_ptr<TaskExecutor>> Create(
      TaskExecutorOptions options);

  /// Runs every task of `step` (which must be this rank's) in micro-step
  /// order. INVALID_ARGUMENT for a malformed step (a task without this rank,
  /// lengths that do not match the samples, a group missing from
  /// `step.groups`, a group size that does not divide the heads); INTERNAL
  /// when the group disagrees or a communicator does not match its task;
  /// the communicator's error when a collective fails.
  absl::StatusOr<StepExecution> RunStep(const v1::RankStep& step,
                                        const GroupResolver& groups);

  /// Runs the scheduler's "data profile" grid on this rank: for each group
  /// size p of `request` (in order), on the request's group of size p that
  /// holds this rank (alone when p = 1), for each length and then each
  /// recompute ratio, one sequence of that length (scaled by `token_scale`
  /// as a task's) through the layers, `repetitions` times, with the group
  /// agreement check of a task; the median time is the entry's seconds
  /// (memory_bytes is 0: nothing is measured on the CPU). Every member of a
  /// group runs the same collectives in the same order. Only a group's
  /// first rank returns its entries (every rank for p = 1), so each group's
  /// measurement reaches the scheduler once. INVALID_ARGUMENT for a size
  /// that does not divide the heads or has no group holding this rank.
  absl::StatusOr<v1::Profile> RunProfile(const v1::ProfileRequest& request,
                                         const GroupResolver& groups);

  const TaskExecutorOptions& options() const { return options_; }

 private:
  explicit TaskExecutor(TaskExecutorOptions options);

  absl::StatusOr<ExecutedTask> RunTask(const v1::RankStep& step, int micro_step,
                                       Communicator* comm);

  const TaskExecutorOptions options_;
  std::unique_ptr<Clock> steady_clock_;
  Clock* const clock_;
};

/// The execute-mode log of a step, JSON Lines: one line per task,
///   {"kind":"task","step":S,"epoch":E,"rank":R,"task_index":I,
///    "micro_step":M,"group":[ranks],"samples":[ids],"seconds":X}
/// then one line for the step,
///   {"kind":"step","step":S,"epoch":E,"rank":R,"tasks":N,"seconds":X}
/// (a rank with no task in a step still logs the step line).
std::string FormatExecutionLog(const v1::RankStep& step,
                               const StepExecution& execution);

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_TASK_EXECUTOR_H_
