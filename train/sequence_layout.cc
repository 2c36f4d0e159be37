#include "train/sequence_layout.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dcp::train {

absl::StatusOr<PackLayout> PackLayout::Create(std::vector<int64_t> cu_seqlens,
                                              int group_size,
                                              int64_t shard_tokens,
                                              int ring_size) {
  if (group_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence-parallel group size must be >= 1, got ", group_size));
  }
  if (ring_size < 1 || group_size % ring_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ring of c = ", ring_size, " does not divide the group of p = ",
        group_size, " (the Ulysses degree u = p / c must be a whole number)"));
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
  // With a ring each member holds 2k tokens, k = ceil(T / 2p).
  const int64_t minimal =
      ring_size == 1 ? (total + group_size - 1) / group_size
                     : 2 * ((total + 2 * group_size - 1) / (2 * group_size));
  if (shard_tokens == 0) shard_tokens = minimal;
  if (shard_tokens < minimal) {
    return absl::InvalidArgumentError(
        absl::StrCat("shards of ", shard_tokens, " tokens over ", group_size,
                     " ranks cannot hold a pack of ", total, " tokens"));
  }
  if (ring_size > 1 && shard_tokens % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "with a ring of c = ", ring_size,
        " every shard holds two halves, so shard_tokens must be even, not ",
        shard_tokens));
  }
  return PackLayout(std::move(cu_seqlens), group_size, shard_tokens, ring_size);
}

int64_t PackLayout::ShardBegin(int rank) const {
  if (ring_size_ == 1) return rank * shard_tokens_;
  return ShardGlobalPositions(rank).front();
}

std::vector<int64_t> PackLayout::RingShardPositions(int ring_position) const {
  const int64_t c = ring_size_;
  if (c == 1) {
    std::vector<int64_t> all(padded_tokens());
    for (size_t t = 0; t < all.size(); ++t) all[t] = static_cast<int64_t>(t);
    return all;
  }
  const int64_t chunk = shard_tokens_ / 2 * ulysses();
  std::vector<int64_t> positions;
  positions.reserve(2 * chunk);
  for (int64_t part : {int64_t{ring_position}, 2 * c - 1 - ring_position}) {
    for (int64_t t = 0; t < chunk; ++t) positions.push_back(part * chunk + t);
  }
  return positions;
}

std::vector<int64_t> PackLayout::ShardGlobalPositions(int rank) const {
  std::vector<int64_t> positions(shard_tokens_);
  if (ring_size_ == 1) {
    for (int64_t t = 0; t < shard_tokens_; ++t) {
      positions[t] = rank * shard_tokens_ + t;
    }
    return positions;
  }
  const int u = ulysses();
  const std::vector<int64_t> ring_shard = RingShardPositions(rank / u);
  const int64_t begin = (rank % u) * shard_tokens_;
  for (int64_t t = 0; t < shard_tokens_; ++t) {
    positions[t] = ring_shard[begin + t];
  }
  return positions;
}

int PackLayout::SampleAt(int64_t position) const {
  if (position < 0 || position >= total_tokens()) return -1;
  return static_cast<int>(
      std::upper_bound(cu_seqlens_.begin(), cu_seqlens_.end(), position) -
      cu_seqlens_.begin() - 1);
}

int64_t PackLayout::RealTokensInShard(int rank) const {
  if (ring_size_ == 1) {
    return std::clamp<int64_t>(total_tokens() - ShardBegin(rank), 0,
                               shard_tokens_);
  }
  const std::vector<int64_t> positions = ShardGlobalPositions(rank);
  return std::lower_bound(positions.begin(), positions.end(), total_tokens()) -
         positions.begin();
}

std::vector<int> PackLayout::ShardSampleIds(int rank) const {
  if (ring_size_ > 1) {
    const std::vector<int64_t> positions = ShardGlobalPositions(rank);
    std::vector<int> ids(RealTokensInShard(rank));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = SampleAt(positions[i]);
    return ids;
  }
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
  if (ring_size_ > 1) {
    const std::vector<int64_t> global = ShardGlobalPositions(rank);
    const std::vector<int> ids = ShardSampleIds(rank);
    std::vector<int64_t> positions(shard_tokens_, 0);
    for (size_t i = 0; i < ids.size(); ++i) {
      positions[i] = global[i] - cu_seqlens_[ids[i]];
    }
    return positions;
  }
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
