#include "comm/split_plan.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dcp {
namespace {

// Steps are tagged modulo this (floats are exact up to 2^24); the tag only
// has to tell ranks at different nearby steps apart.
constexpr int64_t kTagModulus = int64_t{1} << 23;

float StepTag(int64_t step) {
  return static_cast<float>(step % kTagModulus + 1);
}

std::string Ranks(const std::vector<int>& ranks) {
  return absl::StrCat("[", absl::StrJoin(ranks, ","), "]");
}

}  // namespace

absl::StatusOr<std::vector<std::vector<int>>> ToWorldIndices(
    const std::vector<std::vector<int>>& groups,
    const std::vector<int>& members) {
  std::vector<std::vector<int>> indices;
  indices.reserve(groups.size());
  for (const std::vector<int>& group : groups) {
    std::vector<int>& out = indices.emplace_back();
    for (int rank : group) {
      auto it = std::lower_bound(members.begin(), members.end(), rank);
      if (it == members.end() || *it != rank) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the group ", Ranks(group), " holds rank ", rank,
            ", which is not in the epoch's world ", Ranks(members)));
      }
      out.push_back(static_cast<int>(it - members.begin()));
    }
  }
  return indices;
}

std::vector<int> ToGlobalRanks(const std::vector<int>& indices,
                               const std::vector<int>& members) {
  std::vector<int> ranks;
  ranks.reserve(indices.size());
  for (int index : indices) ranks.push_back(members[index]);
  return ranks;
}

std::vector<float> SplitHeader(int world, int rank, int64_t step,
                               int new_groups) {
  std::vector<float> header(2 * world, 0.0f);
  header[rank] = static_cast<float>(new_groups);
  header[world + rank] = StepTag(step);
  return header;
}

absl::StatusOr<std::vector<int>> ReadSplitHeader(absl::Span<const float> summed,
                                                 int world, int64_t step) {
  if (summed.size() != static_cast<size_t>(2 * world)) {
    return absl::InvalidArgumentError(
        absl::StrCat("split header has ", summed.size(), " floats, expected ",
                     2 * world));
  }
  const float tag = StepTag(step);
  std::vector<int> counts(world);
  for (int r = 0; r < world; ++r) {
    if (summed[world + r] != tag) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", r, " is not at step ", step,
          " (step tag ", summed[world + r], ", expected ", tag,
          "): the ranks do not run the same plan, so no group can be split"));
    }
    counts[r] = static_cast<int>(summed[r]);
  }
  return counts;
}

std::vector<float> SplitTable(int world, int rank,
                              const std::vector<int>& counts,
                              const std::vector<std::vector<int>>& mine) {
  int total = 0;
  int offset = 0;
  for (int r = 0; r < world; ++r) {
    if (r == rank) offset = total;
    total += counts[r];
  }
  std::vector<float> table(static_cast<size_t>(total) * world, 0.0f);
  for (size_t g = 0; g < mine.size(); ++g) {
    for (int member : mine[g]) {
      table[(offset + g) * world + member] = 1.0f;
    }
  }
  return table;
}

absl::StatusOr<std::vector<std::vector<int>>> ReadSplitTable(
    absl::Span<const float> summed, int world,
    const std::vector<int>& counts) {
  // group -> the ranks that listed it.
  std::map<std::vector<int>, std::vector<int>> listed;
  size_t row = 0;
  for (int r = 0; r < world; ++r) {
    for (int g = 0; g < counts[r]; ++g, ++row) {
      if ((row + 1) * world > summed.size()) {
        return absl::InvalidArgumentError("split table is too short");
      }
      std::vector<int> group;
      for (int c = 0; c < world; ++c) {
        if (summed[row * world + c] != 0.0f) group.push_back(c);
      }
      if (!std::binary_search(group.begin(), group.end(), r)) {
        return absl::FailedPreconditionError(
            absl::StrCat("rank ", r, " listed the group ", Ranks(group),
                         " to split without being in it"));
      }
      listed[group].push_back(r);
    }
  }
  std::vector<std::vector<int>> groups;
  for (const auto& [group, by] : listed) {
    if (by != group) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the ranks disagree about the group ", Ranks(group), ": ",
          Ranks(by),
          " listed it as new, and every member must, once (do all ranks run "
          "the same plan?)"));
    }
    groups.push_back(group);
  }
  return groups;
}

std::vector<std::vector<std::vector<int>>> SplitRounds(
    const std::vector<std::vector<int>>& groups) {
  std::vector<std::vector<std::vector<int>>> rounds;
  std::vector<std::vector<bool>> used;  // round -> rank taken
  for (const std::vector<int>& group : groups) {
    size_t round = 0;
    for (; round < rounds.size(); ++round) {
      const bool fits = std::none_of(group.begin(), group.end(), [&](int r) {
        return r < static_cast<int>(used[round].size()) && used[round][r];
      });
      if (fits) break;
    }
    if (round == rounds.size()) {
      rounds.emplace_back();
      used.emplace_back();
    }
    rounds[round].push_back(group);
    for (int r : group) {
      if (r >= static_cast<int>(used[round].size())) used[round].resize(r + 1);
      used[round][r] = true;
    }
  }
  return rounds;
}

int SplitColor(const std::vector<std::vector<int>>& round, int rank) {
  for (size_t i = 0; i < round.size(); ++i) {
    if (std::binary_search(round[i].begin(), round[i].end(), rank)) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

}  // namespace dcp
