#ifndef DCP_FUZZ_CONTROL_PLANE_SESSION_H_
#define DCP_FUZZ_CONTROL_PLANE_SESSION_H_

// The control plane fuzzer's run of one input (control_plane_fuzzer.cc
// says what it checks): the calls and the invariants here and in
// control_plane_session.cc, the decoding of the fuzz proto's actions in
// control_plane_actions.cc, the guard and the restart in
// control_plane_restart.cc.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/clock.h"
#include "fuzz/control_plane_fuzz.pb.h"
#include "fuzz/control_plane_world.h"
#include "proto/plan.pb.h"
#include "proto/scheduler_service.pb.h"
#include "scheduler/control/control_plane.h"
#include "scheduler/control/state_store.h"

namespace dcp {
namespace fuzz {

/// One input's run: a live ControlPlane of the World, and the Oracle of
/// what it accepted, checked against it after every call. The checks fail
/// (fuzz_support.h: the process aborts) on any broken contract. Not
/// thread-safe: the fuzzer calls it from one thread and plans itself.
///
///   SessionRun run(session.world());
///   for (const Action& action : session.actions()) {
///     run.Apply(action);
///     run.CheckInvariants();
///   }
///   run.Finish();
class SessionRun {
 public:
  explicit SessionRun(const World& world);

  /// Applies `action` if the guard admits its credentials
  /// (control_plane_actions.cc).
  void Apply(const Action& action);
  /// Checks the control plane's status against the oracle.
  void CheckInvariants();
  /// Shuts the control plane down: every stream ends, nothing is lost.
  void Finish();

 private:
  struct Stream {
    int64_t id = 0;
    int rank = 0;
    int64_t from_step = 0;
    int64_t last_step = -1;
    bool drained = false;
    bool ended = false;
  };

  void StartControlPlane();

  // The restart and the guard (control_plane_restart.cc).
  // Whether the guard admits `credentials` (checked against the oracle).
  bool Admit(const Credentials& credentials);
  void Restart();
  // The kept steps' plans, serialized, from the first kept one on.
  std::vector<std::string> KeptPlans();

  // Actions decoded into calls (control_plane_actions.cc).
  void Dispatch(const Action& action);
  void RegisterAll();
  void PollSome(const PollStream& poll);
  void Close(const fuzz::CloseStream& close);
  void StoreSetAction(const fuzz::StoreSet& set);
  void StoreGetAction(const fuzz::StoreGet& get);
  void PlannedReport(const fuzz::PlannedReport& planned);

  // The calls, each checked (control_plane_session.cc).
  void Register(const v1::RegisterRequest& request);
  void OpenStream(const fuzz::OpenStream& open);
  void Profile(const v1::ProfileReport& report);
  void PurgeStore(int64_t epoch);
  void Drain(const v1::DrainRequest& drain);
  void CheckPlannedStep(int64_t step);
  void Poll(Stream& stream, int times);
  void Report(const v1::TimingReport& report);
  void StoreSet(absl::string_view session, const std::string& key,
                absl::string_view value);
  void StoreGet(absl::string_view session,
                const std::vector<std::string>& keys);
  void Plan();

  int64_t Planned() const { return cp_->Status().planned_steps(); }

  const World world_;
  std::unique_ptr<FakeClock> clock_;
  // The durable state (World.durable), or null.
  std::unique_ptr<FakeStateStore> durable_;
  std::unique_ptr<ControlPlane> cp_;
  std::vector<Stream> streams_;
  Oracle oracle_;
  bool draining_ = false;
  v1::StatusResponse last_;
};

}  // namespace fuzz
}  // namespace dcp

#endif  // DCP_FUZZ_CONTROL_PLANE_SESSION_H_
