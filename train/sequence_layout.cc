#include "train/sequence_layout.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dcp::train {

absl::StatusOr<PackLayout> PackLayout::Create(std::vector<int64_t> cu_seqlens,
                                              int group_size,
                                              int64_t shard_tokens) {
  if (group_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence-parallel group size must be >= 1, got ", group_size));
  }
  if (cu_seqlens.size() < 2 || cu_seqlens.front() != 0) {
    return absl::InvalidArgumentError(
        "cu_seqlens must start at 0 and name at least one sample");
  }
  for (size_t i = 1; i < cu_seqlens.size(); ++i) {
    if (cu_seqlens[i] <= cu_seqlens[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cu_seqlens must strictly increase; sample ", i - 1, " spans [",
          cu_seqlens[i - 1], ", ", cu_seqlens[i], ")"));
    }
  }
  const int64_t total = cu_seqlens.back();
  const int64_t minimal = (total + group_size - 1) / group_size;
  if (shard_tokens == 0) shard_tokens = minimal;
  if (shard_tokens < minimal) {
    return absl::InvalidArgumentError(
        absl::StrCat("shards of ", shard_tokens, " tokens over ", group_size,
                     " ranks cannot hold a pack of ", total, " tokens"));
  }
  return PackLayout(std::move(cu_seqlens), group_size, shard_tokens);
}

int64_t PackLayout::RealTokensInShard(int rank) const {
  return std::clamp<int64_t>(total_tokens() - ShardBegin(rank), 0,
                             shard_tokens_);
}

std::vector<int> PackLayout::ShardSampleIds(int rank) const {
  const int64_t begin = ShardBegin(rank);
  const int64_t real = RealTokensInShard(rank);
  std::vector<int> ids(real);
  // The sample holding the shard's first token, then walk forward.
  int sample = static_cast<int>(
      std::upper_bound(cu_seqlens_.begin(), cu_seqlens_.end(), begin) -
      cu_seqlens_.begin() - 1);
  for (int64_t i = 0; i < real; ++i) {
    while (begin + i >= cu_seqlens_[sample + 1]) ++sample;
    ids[i] = sample;
  }
  return ids;
}

std::vector<int64_t> PackLayout::ShardPositions(int rank) const {
  const int64_t begin = ShardBegin(rank);
  const std::vector<int> ids = ShardSampleIds(rank);
  std::vector<int64_t> positions(shard_tokens_, 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    positions[i] = begin + static_cast<int64_t>(i) - cu_seqlens_[ids[i]];
  }
  return positions;
}

absl::StatusOr<HeadLayout> HeadLayout::Create(int heads, int kv_heads,
                                              int group_size) {
  if (heads < 1 || kv_heads < 1 || heads % kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv_heads (", kv_heads, ") must divide heads (", heads, ")"));
  }
  if (group_size < 1 || heads % group_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Ulysses sequence parallelism needs the group size p to divide the "
        "attention heads: p = ",
        group_size, ", heads = ", heads));
  }
  HeadLayout layout;
  layout.heads = heads;
  layout.kv_heads = kv_heads;
  layout.group_size = group_size;
  // f = heads / kv_heads always works (one kv copy per query head), so the
  // loop ends; smaller f sends less.
  for (int f = 1; f <= heads / kv_heads; ++f) {
    const int replicated = kv_heads * f;
    if (replicated % group_size == 0 && heads % replicated == 0) {
      layout.kv_replication = f;
      break;
    }
  }
  return layout;
}

}  // namespace dcp::train
