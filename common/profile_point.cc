#include "common/profile_point.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dcp {

bool ProfilePointFits(const v1::ProfileRequest& request, int64_t length, int p,
                      int recompute_index) {
  if (request.max_tokens_per_gpu_size() != request.recompute_size()) {
    return true;
  }
  return length <= request.max_tokens_per_gpu(recompute_index) * p;
}

bool ProfilePointMeasured(const v1::ProfileRequest& request, int64_t length,
                          int shape, int recompute_index) {
  const int p = request.group_sizes(shape);
  if (!ProfilePointFits(request, length, p, recompute_index)) return false;
  const int64_t up_to = request.all_groups_up_to_length();
  if (up_to <= 0 || length <= up_to) return true;
  const auto largest = std::max_element(request.group_sizes().begin(),
                                        request.group_sizes().end());
  return shape == largest - request.group_sizes().begin();
}

absl::StatusOr<std::vector<ProfileShape>> ProfileShapes(
    const v1::ProfileRequest& request, int heads) {
  const int shapes = request.group_sizes_size();
  if (request.ulysses_size() != 0 && request.ulysses_size() != shapes) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile request: ", request.ulysses_size(),
                     " Ulysses degrees for ", shapes, " group sizes"));
  }
  std::vector<ProfileShape> out;
  out.reserve(shapes);
  for (int i = 0; i < shapes; ++i) {
    const int p = request.group_sizes(i);
    const int u = request.ulysses_size() == 0 ? p : request.ulysses(i);
    const std::string where =
        absl::StrCat("profile request, shape ", i, " (group size ", p,
                     ", Ulysses degree ", u, ")");
    if (p < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the group size is not positive"));
    }
    if (u < 1 || p % u != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the degree does not divide the group size"));
    }
    if (heads % u != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": the degree does not divide the ", heads, " heads"));
    }
    out.push_back({p, u});
  }
  return out;
}

}  // namespace dcp
