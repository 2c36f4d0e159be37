#ifndef DCP_WORKER_AGENT_SIMULATED_STEP_H_
#define DCP_WORKER_AGENT_SIMULATED_STEP_H_

#include "absl/time/time.h"
#include "proto/plan.pb.h"
#include "worker_agent/step_execution.h"

namespace dcp {

/// dcp-agent's simulate mode: what running `step` would report if each of
/// the rank's tasks took `task_time` and the gradient sync nothing. Nothing
/// is computed and no group is formed (so it follows any change of the
/// world: a shrink or a grow is just the next step's tasks). The report
/// has the plan's tokens and lengths, as a trainer's would; the tasks' log
/// lines name their samples, so a test can check what ran. Pure.
StepExecution SimulateStep(const v1::RankStep& step, absl::Duration task_time);

}  // namespace dcp

#endif  // DCP_WORKER_AGENT_SIMULATED_STEP_H_
