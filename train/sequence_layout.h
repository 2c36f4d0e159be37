#ifndef DCP_TRAIN_SEQUENCE_LAYOUT_H_
#define DCP_TRAIN_SEQUENCE_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace dcp::train {

/// Where the tokens of one packed task lie over a sequence-parallel group.
///
/// A task packs samples back to back; `cu_seqlens` holds their global
/// boundaries (sample i is tokens [cu[i], cu[i+1]) of the pack). The pack of
/// T real tokens is padded at its end to S = shard_tokens * p tokens and rank
/// r holds the contiguous shard [r * shard_tokens, (r + 1) * shard_tokens).
/// Tokens at index >= T are padding: they attend to nothing, nothing attends
/// to them and they carry no loss.
///
/// Hybrid groups (u-way Ulysses inside a c-way ring, p = u * c, c > 1) lay
/// the pack out zig-zag instead (ring_spec.md): with k = ceil(T / (2 c u))
/// the pack is padded to P = 2 c u k tokens and cut into 2c chunks of
/// C = u k tokens; ring position j holds chunk j then chunk 2c-1-j (its ring
/// shard), and member m = j u + i holds tokens [2 i k, 2 (i + 1) k) of it,
/// so shard_tokens = 2k. A member's tokens still ascend in the pack, so its
/// real tokens are its first ones. With c == 1 the layout is the contiguous
/// one above, unchanged.
///
/// Plain value type, thread-compatible, torch-free so planners and loaders
/// can use it.
///
///   ASSIGN_OR_RETURN(PackLayout layout, PackLayout::Create({0, 9, 20}, 4));
///   layout.shard_tokens();           // 5: 20 tokens padded to 20
///   layout.RealTokensInShard(3);     // 5
class PackLayout {
 public:
  /// `shard_tokens` == 0 pads minimally (ceil(T / p), or 2 ceil(T / 2cu)
  /// with a ring); a larger value pads further (e.g. to a kernel's
  /// alignment). `ring_size` is c (1: no ring). INVALID_ARGUMENT unless
  /// cu_seqlens starts at 0 and strictly increases, group_size >= 1,
  /// ring_size >= 1 divides group_size, shard_tokens * group_size >= T and,
  /// with a ring, shard_tokens is even; the message names the numbers.
  static absl::StatusOr<PackLayout> Create(std::vector<int64_t> cu_seqlens,
                                           int group_size,
                                           int64_t shard_tokens = 0,
                                           int ring_size = 1);

  /// p = u * c.
  int group_size() const { return group_size_; }
  /// c: the ring length (1 without a ring).
  int ring_size() const { return ring_size_; }
  /// u = p / c: the Ulysses degree.
  int ulysses() const { return group_size_ / ring_size_; }
  int num_samples() const { return static_cast<int>(cu_seqlens_.size()) - 1; }
  const std::vector<int64_t>& cu_seqlens() const { return cu_seqlens_; }
  /// T: real tokens of the pack.
  int64_t total_tokens() const { return cu_seqlens_.back(); }
  /// S: tokens of the padded pack, a multiple of group_size.
  int64_t padded_tokens() const { return shard_tokens_ * group_size_; }
  /// S / p: tokens each rank holds.
  int64_t shard_tokens() const { return shard_tokens_; }
  int64_t SampleLength(int sample) const {
    return cu_seqlens_[sample + 1] - cu_seqlens_[sample];
  }
  /// Global index of the first token of `rank`'s shard (without a ring its
  /// shard is [ShardBegin, ShardBegin + shard_tokens)).
  int64_t ShardBegin(int rank) const;
  /// Global pack position of each token of group member `rank`'s shard
  /// (shard_tokens entries, ascending; >= T for padding).
  std::vector<int64_t> ShardGlobalPositions(int rank) const;
  /// Global pack position of each token of ring position `ring_position`'s
  /// ring shard (2C = u * shard_tokens entries: chunk j, then chunk 2c-1-j;
  /// without a ring, the whole padded pack). Its members' shards, in member
  /// order, are this ring shard.
  std::vector<int64_t> RingShardPositions(int ring_position) const;
  /// Sample holding global pack position `position`; -1 for padding.
  int SampleAt(int64_t position) const;
  /// Real tokens of `rank`'s shard; they are its first ones (padding is last).
  int64_t RealTokensInShard(int rank) const;
  /// Sample of each real token of `rank`'s shard (RealTokensInShard entries).
  std::vector<int> ShardSampleIds(int rank) const;
  /// Position within its sample of each token of `rank`'s shard
  /// (shard_tokens entries; 0 for padding). Positions restart per sample.
  std::vector<int64_t> ShardPositions(int rank) const;

 private:
  PackLayout(std::vector<int64_t> cu_seqlens, int group_size,
             int64_t shard_tokens, int ring_size)
      : cu_seqlens_(std::move(cu_seqlens)),
        group_size_(group_size),
        shard_tokens_(shard_tokens),
        ring_size_(ring_size) {}

  std::vector<int64_t> cu_seqlens_;
  int group_size_;
  int64_t shard_tokens_;
  int ring_size_;
};

/// How attention heads divide over a Ulysses group of p ranks.
///
/// After the all-to-all each rank holds heads / p query heads over the whole
/// sequence and the key/value heads those queries read. When kv_heads does
/// not divide evenly over p (e.g. p > kv_heads) every key/value head is sent
/// as `kv_replication` adjacent copies, the smallest count for which the
/// replicated heads divide over p and each rank's query heads read only its
/// own replicated kv heads. Plain value type.
struct HeadLayout {
  /// INVALID_ARGUMENT (naming p and heads) unless p divides heads; also
  /// unless kv_heads divides heads.
  static absl::StatusOr<HeadLayout> Create(int heads, int kv_heads,
                                           int group_size);

  int heads = 0;
  int kv_heads = 0;
  int group_size = 1;
  int kv_replication = 1;

  /// Key/value heads after replication, before the exchange.
  int replicated_kv_heads() const { return kv_heads * kv_replication; }
  /// Query heads per rank after the exchange.
  int local_heads() const { return heads / group_size; }
  /// Key/value heads per rank after the exchange.
  int local_kv_heads() const { return replicated_kv_heads() / group_size; }
};

}  // namespace dcp::train

#endif  // DCP_TRAIN_SEQUENCE_LAYOUT_H_
