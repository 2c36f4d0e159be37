// Fuzzes the scheduler's control plane the way its RPC handlers drive it.
// The input is a serialized dcp.fuzz.Session (control_plane_fuzz.proto): a
// small world (4 ranks, 2 a node) and up to 128 calls, each with the decoded
// request an agent or a stranger sent (RegisterRequest, TimingReport,
// ProfileReport, StoreSetRequest, ...), applied to a live in-process
// ControlPlane whose planning the fuzzer runs itself (no threads) on a fake
// clock. Besides no crash or sanitizer report, after every call:
//   - every error is a clean status: a code the call documents, a message;
//   - nothing accepted is lost: each accepted timing report counts once,
//     completed steps are exactly the steps every rank's report was accepted
//     for (so they never decrease), each rank's last reported step is its
//     highest accepted one, registrations stay, and the rendezvous store
//     holds exactly what was set (and not purged), byte for byte;
//   - a rank's plan stream sends strictly increasing planned steps from its
//     from_step on, the drain marker once, and then only its end;
//   - planning never fails and never passes the look-ahead or max_steps,
//     and the cost model's coefficients stay finite, whatever was reported;
//   - a call whose metadata (job id, bearer token) the guard refuses
//     (CallAuthenticator, what SchedulerService checks first) is
//     refused with UNAUTHENTICATED / PERMISSION_DENIED / INVALID_ARGUMENT
//     exactly when a correct client's would not be, and reaches nothing;
//   - with World.durable, a restart from the durable state keeps every
//     kept step's plan byte for byte, the planned and completed steps, the
//     store, and every accepted report (one sent again is ALREADY_EXISTS).
//
// The world and its oracle: control_plane_world.h; the run of one input:
// control_plane_session.h.

#include <cstddef>
#include <cstdint>

#include "fuzz/control_plane_fuzz.pb.h"
#include "fuzz/control_plane_session.h"
#include "fuzz/control_plane_world.h"
#include "google/protobuf/stubs/logging.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // An input whose strings are not UTF-8 does not parse, as gRPC would not
  // deliver it; protobuf need not say so every time.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dcp::fuzz::Session session;
  if (!session.ParseFromArray(data, static_cast<int>(size))) return 0;
  dcp::fuzz::SessionRun run(session.world());
  int applied = 0;
  for (const dcp::fuzz::Action& action : session.actions()) {
    if (++applied > dcp::fuzz::kMaxActions) break;
    run.Apply(action);
    run.CheckInvariants();
  }
  run.Finish();
  return 0;
}
