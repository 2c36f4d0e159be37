#ifndef DCP_FUZZ_CONTROL_PLANE_WORLD_H_
#define DCP_FUZZ_CONTROL_PLANE_WORLD_H_

// The control plane fuzzer's world (control_plane_fuzzer.cc): 4 ranks, 2 a
// node, a tiny model over fixed lengths, the options a dcp.fuzz.World
// picks, and the oracle: what the fuzzer knows the control plane accepted,
// and what follows from it.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "fuzz/control_plane_fuzz.pb.h"
#include "proto/plan.pb.h"
#include "scheduler/control/control_plane.h"

namespace dcp {
namespace fuzz {

inline constexpr int kWorld = 4;
inline constexpr int kGpusPerNode = 2;
inline constexpr char kSession[] = "fz";
inline constexpr int kMaxActions = 128;
inline constexpr char kJob[] = "fuzz-job";
inline constexpr char kToken[] = "fuzz-token-0123456789abcdef";

/// The control plane of `world`, planning only when the fuzzer says so (no
/// planner thread), on `clock` (not owned).
ControlPlaneOptions WorldOptions(const World& world, Clock* clock);

/// Whether `ControlPlane::PurgeStoreBefore(epoch)` removes `key`: it is
/// under "<session>/e<k>/" with k < epoch.
bool Purged(const std::string& key, int64_t epoch);

/// What the control plane accepted, as the fuzzer counted it: the figures
/// its status and answers must agree with. Plain data; not thread-safe.
struct Oracle {
  /// Steps every rank's report was accepted for, from step 0 on.
  int64_t ExpectedCompleted() const;
  /// The first step `rank` has no accepted report for.
  int64_t ExpectedNextStep(int rank, int64_t completed, int64_t planned) const;
  /// The highest step `rank`'s status may show as last reported.
  int64_t HighestReported(int rank) const;

  std::set<int> registered;
  std::map<int64_t, std::set<int>> accepted;  // step -> ranks
  // Accepted reports the status counts: since the last restart, on top of
  // those it counted right after it.
  int64_t accepted_reports = 0;
  // Per rank: the last reported step the status showed right after the
  // last restart (-1 before any), and the highest accepted since.
  std::vector<int64_t> reported_base = std::vector<int64_t>(kWorld, -1);
  std::vector<int64_t> reported_since = std::vector<int64_t>(kWorld, -1);
  std::map<std::string, std::string> store;
};

}  // namespace fuzz
}  // namespace dcp

#endif  // DCP_FUZZ_CONTROL_PLANE_WORLD_H_
