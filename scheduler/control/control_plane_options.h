#ifndef DCP_SCHEDULER_CONTROL_CONTROL_PLANE_OPTIONS_H_
#define DCP_SCHEDULER_CONTROL_CONTROL_PLANE_OPTIONS_H_

// ControlPlane's options checked and split into its parts' options
// (internal to control_plane.cc).

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "scheduler/control/control_plane.h"

namespace dcp::control_plane_internal {

/// The cost model the job starts from: `cost_model`, else the data sheet's.
CostModel InitialModel(const ControlPlaneOptions& options);

/// INVALID_ARGUMENT naming the first option out of range.
absl::Status CheckOptions(const ControlPlaneOptions& o);

/// How often the planner thread looks for failed ranks: a tenth of the
/// shorter timeout in use, 10 ms to 1 s.
absl::Duration LivenessPoll(absl::Duration rank_timeout,
                            absl::Duration step_timeout);

/// The parts' options, each in its struct's field order.
ReportLedgerOptions LedgerOptions(const ControlPlaneOptions& o);
ProfileStageOptions ProfileOptions(const ControlPlaneOptions& o,
                                   const std::string& session_id);
StepWindowOptions WindowOptions(const ControlPlaneOptions& o,
                                const std::string& session_id, Clock* clock);
KvStoreOptions StoreOptions(const ControlPlaneOptions& o,
                            const std::string& session_id);

}  // namespace dcp::control_plane_internal

#endif  // DCP_SCHEDULER_CONTROL_CONTROL_PLANE_OPTIONS_H_
