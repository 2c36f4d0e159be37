#ifndef DCP_PROTO_TIMING_REPORT_H_
#define DCP_PROTO_TIMING_REPORT_H_

// The one way a rank's timings of a step become the wire's TimingReport
// (client_lib, the execute- and simulate-mode agents, the delivery
// harness's simulated agents all build it here).

#include "absl/types/span.h"
#include "proto/plan.pb.h"

namespace dcp {

/// The least task time a report carries: the scheduler refuses times that
/// are not positive (`kMinTaskSeconds` of the cost model), so a clock that
/// did not move (a coarse one) still reports a valid time.
inline constexpr double kMinReportedTaskSeconds = 1e-9;

/// The report of `step` (the plan the scheduler sent the rank): its epoch,
/// step and rank; per task, in the plan's order (micro-step m is task m),
/// the task's index, group size, tokens, sample lengths, recompute ratio
/// and Ulysses degree from the plan, and `task_seconds[m]` raised to
/// `kMinReportedTaskSeconds`; and `sync_seconds` as given (0: not
/// measured). Precondition: `task_seconds.size() == step.tasks_size()`.
///
///   v1::TimingReport report =
///       TimingReportOf(step.plan, stats.task_seconds, stats.sync_seconds);
v1::TimingReport TimingReportOf(const v1::RankStep& step,
                                absl::Span<const double> task_seconds,
                                double sync_seconds);

}  // namespace dcp

#endif  // DCP_PROTO_TIMING_REPORT_H_
