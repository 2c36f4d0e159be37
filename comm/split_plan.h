#ifndef DCP_COMM_SPLIT_PLAN_H_
#define DCP_COMM_SPLIT_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace dcp {

// How the ranks of a world agree, step after step, on the groups to split
// from it (`SplitGroupFormer`). A rank's plan names only the groups it is a
// member of, but a split is a collective of the whole world, so at every
// step the ranks exchange what each needs on two host all-reduces over the
// world; everything here is plain arithmetic on what they exchanged, so
// every rank computes the same groups and the same splits.
//
//   header (2W floats): slot r is the number of new groups rank r lists,
//                       slot W + r its step tag (the step, + 1)
//   table  (T x W):     only when T, the sum of the counts, is > 0; rank r
//                       fills rows [offset_r, offset_r + count_r), a 1 in
//                       column c for each member c of each of its groups
//
// Each cell is written by one rank, so the sums are the rows themselves,
// exactly (floats hold these small integers exactly).

/// `groups` (sorted global ranks) as indices into `members`, the epoch's
/// world (ascending global ranks): what the exchange and the splits are
/// written in, the world numbering its members densely (after a shrink,
/// the world of [0, 2, 3] has ranks 0, 1, 2). FAILED_PRECONDITION, naming
/// the group, when one of its ranks is not a member.
absl::StatusOr<std::vector<std::vector<int>>> ToWorldIndices(
    const std::vector<std::vector<int>>& groups,
    const std::vector<int>& members);

/// The inverse of `ToWorldIndices`: indices into `members` (each in range,
/// as `ReadSplitTable` of a world of `members.size()` gives them) back to
/// global ranks.
std::vector<int> ToGlobalRanks(const std::vector<int>& indices,
                               const std::vector<int>& members);

/// This rank's header, to be summed over the world.
std::vector<float> SplitHeader(int world, int rank, int64_t step,
                               int new_groups);

/// The number of new groups of each rank, from the summed header.
/// FAILED_PRECONDITION when a rank is at another step than `step` (the
/// ranks do not run the same plan: no split can be agreed on);
/// INVALID_ARGUMENT when the header is not 2 * `world` floats.
absl::StatusOr<std::vector<int>> ReadSplitHeader(absl::Span<const float> summed,
                                                 int world, int64_t step);

/// This rank's table: `mine` (its new groups, as sorted world indices) in
/// its rows, given every rank's count.
std::vector<float> SplitTable(int world, int rank,
                              const std::vector<int>& counts,
                              const std::vector<std::vector<int>>& mine);

/// Every new group of the step, sorted and distinct, from the summed table.
/// FAILED_PRECONDITION, naming the group, when a rank listed a group
/// without being in it, or a group was not listed by each of its members
/// exactly once (the ranks disagree about the plan, or about which groups
/// they already hold).
absl::StatusOr<std::vector<std::vector<int>>> ReadSplitTable(
    absl::Span<const float> summed, int world, const std::vector<int>& counts);

/// `groups` in rounds of disjoint groups, each round one split: a group
/// goes to the first round none of whose groups it overlaps, in the order
/// given. Every group is in exactly one round.
std::vector<std::vector<std::vector<int>>> SplitRounds(
    const std::vector<std::vector<int>>& groups);

/// The color of `rank` in a split of `round`: the index of its group, or -1
/// (no color) when it is in none.
int SplitColor(const std::vector<std::vector<int>>& round, int rank);

}  // namespace dcp

#endif  // DCP_COMM_SPLIT_PLAN_H_
