#ifndef DCP_COMMON_PROFILE_POINT_H_
#define DCP_COMMON_PROFILE_POINT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/scheduler_service.pb.h"

namespace dcp {

// Which points of a `v1::ProfileRequest`'s grid (length, group size p,
// recompute ratio) are measured: one rule for the agents that measure them
// and for the scheduler, which knows from it which answers to expect.

/// Whether `length` fits groups of `p` ranks at the request's recompute
/// ratio `recompute_index`: at most `max_tokens_per_gpu[recompute_index]`
/// tokens a GPU, or always when the request gives no cap for each ratio.
bool ProfilePointFits(const v1::ProfileRequest& request, int64_t length, int p,
                      int recompute_index);

/// Whether the point (`length`, the request's shape `shape`: its
/// `group_sizes[shape]`, recompute ratio `recompute_index`) is measured: it
/// fits, and its length is at most `all_groups_up_to_length` (when set) or
/// the shape is the first of the request's largest group size.
bool ProfilePointMeasured(const v1::ProfileRequest& request, int64_t length,
                          int shape, int recompute_index);

/// One group shape of a request: `p` ranks as `u`-way Ulysses inside a ring
/// of p / u (u = p: plain Ulysses).
struct ProfileShape {
  int p = 1;
  int u = 1;
};

/// The request's shapes in order: `group_sizes[i]` with `ulysses[i]`, or
/// u = p for each when the request gives no degrees. An error names the
/// shape when `ulysses` is neither empty nor one per size, or a size is not
/// positive, or a degree does not divide both its size and `heads`.
absl::StatusOr<std::vector<ProfileShape>> ProfileShapes(
    const v1::ProfileRequest& request, int heads);

}  // namespace dcp

#endif  // DCP_COMMON_PROFILE_POINT_H_
