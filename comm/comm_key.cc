#include "comm/comm_key.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dcp {

absl::StatusOr<CommKey> CommKey::Make(std::vector<int> ranks, int64_t epoch,
                                      CommPurpose purpose) {
  std::sort(ranks.begin(), ranks.end());
  CommKey key{std::move(ranks), epoch, purpose};
  if (absl::Status status = key.Validate(); !status.ok()) return status;
  return key;
}

absl::Status CommKey::Validate() const {
  if (ranks.empty()) {
    return absl::InvalidArgumentError("group key has no ranks");
  }
  if (epoch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative epoch in group key ", ToString()));
  }
  if (ranks.front() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative rank in group key ", ToString()));
  }
  for (size_t i = 1; i < ranks.size(); ++i) {
    if (ranks[i] <= ranks[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group key ranks must be sorted and distinct: ", ToString()));
    }
  }
  return absl::OkStatus();
}

int CommKey::GroupRank(int global_rank) const {
  auto it = std::lower_bound(ranks.begin(), ranks.end(), global_rank);
  if (it == ranks.end() || *it != global_rank) return -1;
  return static_cast<int>(it - ranks.begin());
}

std::string CommKey::ToString() const {
  return absl::StrCat("[", absl::StrJoin(ranks, ","), "]@", epoch,
                      purpose == CommPurpose::kDataParallel ? "/dp" : "");
}

}  // namespace dcp
