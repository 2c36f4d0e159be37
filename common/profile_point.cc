#include "common/profile_point.h"

#include <algorithm>

namespace dcp {

bool ProfilePointFits(const v1::ProfileRequest& request, int64_t length, int p,
                      int recompute_index) {
  if (request.max_tokens_per_gpu_size() != request.recompute_size()) {
    return true;
  }
  return length <= request.max_tokens_per_gpu(recompute_index) * p;
}

bool ProfilePointMeasured(const v1::ProfileRequest& request, int64_t length,
                          int p, int recompute_index) {
  if (!ProfilePointFits(request, length, p, recompute_index)) return false;
  const int64_t up_to = request.all_groups_up_to_length();
  if (up_to <= 0 || length <= up_to || request.group_sizes_size() == 0) {
    return true;
  }
  return p == *std::max_element(request.group_sizes().begin(),
                                request.group_sizes().end());
}

}  // namespace dcp
