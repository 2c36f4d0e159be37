#ifndef DCP_WORKER_AGENT_STEP_EXECUTION_H_
#define DCP_WORKER_AGENT_STEP_EXECUTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "proto/plan.pb.h"
#include "proto/scheduler_service.pb.h"

namespace dcp {

/// What one task did on this rank.
struct ExecutedTask {
  int task_index = 0;
  /// Its micro-step index on this rank.
  int micro_step = 0;
  /// The task's ranks (its group; one rank when p = 1).
  std::vector<int> group;
  std::vector<int64_t> samples;
  /// Tokens of the whole task as run (after the token scale).
  int64_t scaled_tokens = 0;
  double seconds = 0;
};

/// One training step as run by this rank.
struct StepExecution {
  /// The timing report to send to the scheduler: the plan's tokens and
  /// lengths, the measured seconds of each task and of the step's tail
  /// (gradient all-reduce and optimizer step) as `sync_seconds`.
  v1::TimingReport report;
  std::vector<ExecutedTask> tasks;
  /// The step's loss over the global batch and the gradient norm, the same
  /// on every rank.
  double loss = 0;
  double grad_norm = 0;
  /// Real tokens the world ran in the step (after the token scale).
  int64_t tokens = 0;
  /// A digest of the weights after the step (FNV-1a over the parameters'
  /// bytes, in hex): the same on every rank of a world that agrees; empty
  /// when nothing was trained (simulate mode).
  std::string weights_digest;
  /// The same when the step began (after a new epoch's state was made
  /// one), empty in simulate mode.
  std::string start_digest;
};

/// The execute-mode log of a step, JSON Lines: one line per task,
///   {"kind":"task","step":S,"epoch":E,"rank":R,"task_index":I,
///    "micro_step":M,"group":[ranks],"samples":[ids],"tokens":T,
///    "seconds":X}
/// then one line for the step,
///   {"kind":"step","step":S,"epoch":E,"rank":R,"tasks":N,"seconds":X,
///    "sync_seconds":Y,"loss":L,"grad_norm":G,"tokens":T
///    [,"weights":D,"start_weights":D0]}
/// with "seconds" the sum of the tasks' (a rank with no task in a step
/// still logs the step line), "weights" and "start_weights" the
/// `weights_digest` and `start_digest` when there are some.
std::string FormatExecutionLog(const v1::RankStep& step,
                               const StepExecution& execution);

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_STEP_EXECUTION_H_
