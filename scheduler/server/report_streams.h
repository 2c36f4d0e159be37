#ifndef DCP_SCHEDULER_SERVER_REPORT_STREAMS_H_
#define DCP_SCHEDULER_SERVER_REPORT_STREAMS_H_

// The StreamReports and StreamNodeReports reactors of SchedulerService
// (internal to scheduler_service).

#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "proto/scheduler_service.grpc.pb.h"
#include "scheduler/control/control_plane.h"

namespace dcp {

/// The most ranks one StreamNodePlans call subscribes for, and the most
/// reports one TimingReportBatch carries.
inline constexpr int kMaxRanksPerCall = 4096;

/// Told, for metrics, the method ("StreamReports", "StreamNodeReports") and
/// status code of each report a stream answered, and ("StreamPlans",
/// "StreamNodePlans") the status each plan-stream call ended with.
using OnStreamRpc =
    std::function<void(absl::string_view method, absl::StatusCode)>;

/// A report-stream reactor as `SchedulerService::Shutdown` reaches it.
class EndableStream {
 public:
  /// Ends the call with UNAVAILABLE once the write in flight, if any, is
  /// done (the scheduler is shutting down). Any thread.
  virtual void End() = 0;

 protected:
  ~EndableStream() = default;
};

/// The open StreamReports and StreamNodeReports calls, so that
/// `SchedulerService::Shutdown` can end them (gRPC's own shutdown would wait
/// for them until its deadline).
struct ReportStreams {
  absl::Mutex mu;
  absl::flat_hash_set<EndableStream*> reactors ABSL_GUARDED_BY(mu);
  bool shut_down ABSL_GUARDED_BY(mu) = false;
};

/// A StreamReports / StreamNodeReports call's reactor, registered with
/// `open` until it is done; gRPC owns it.
grpc::ServerBidiReactor<v1::TimingReport, v1::ReportResult>* NewReportStream(
    ControlPlane* control_plane, const OnStreamRpc* on_report,
    ReportStreams* open);
grpc::ServerBidiReactor<v1::TimingReportBatch, v1::ReportResultBatch>*
NewNodeReportStream(ControlPlane* control_plane,
                    const OnStreamRpc* on_report, ReportStreams* open);

}  // namespace dcp

#endif  // DCP_SCHEDULER_SERVER_REPORT_STREAMS_H_
