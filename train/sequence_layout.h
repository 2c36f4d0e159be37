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
/// Plain value type, thread-compatible, torch-free so planners and loaders
/// can use it.
///
///   ASSIGN_OR_RETURN(PackLayout layout, PackLayout::Create({0, 9, 20}, 4));
///   layout.shard_tokens();           // 5: 20 tokens padded to 20
///   layout.RealTokensInShard(3);     // 5
class PackLayout {
 public:
  /// `shard_tokens` == 0 pads minimally (ceil(T / p)); a larger value pads
  /// further (e.g. to a kernel's alignment). INVALID_ARGUMENT unless
  /// cu_seqlens starts at 0 and strictly increases, group_size >= 1 and
  /// shard_tokens * group_size >= T.
  static absl::StatusOr<PackLayout> Create(std::vector<int64_t> cu_seqlens,
                                           int group_size,
                                           int64_t shard_tokens = 0);

  int group_size() const { return group_size_; }
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
  /// Global index of the first token of `rank`'s shard.
  int64_t ShardBegin(int rank) const { return rank * shard_tokens_; }
  /// Real tokens of `rank`'s shard; they are its first ones (padding is last).
  int64_t RealTokensInShard(int rank) const;
  /// Sample of each real token of `rank`'s shard (RealTokensInShard entries).
  std::vector<int> ShardSampleIds(int rank) const;
  /// Position within its sample of each token of `rank`'s shard
  /// (shard_tokens entries; 0 for padding). Positions restart per sample.
  std::vector<int64_t> ShardPositions(int rank) const;

 private:
  PackLayout(std::vector<int64_t> cu_seqlens, int group_size,
             int64_t shard_tokens)
      : cu_seqlens_(std::move(cu_seqlens)),
        group_size_(group_size),
        shard_tokens_(shard_tokens) {}

  std::vector<int64_t> cu_seqlens_;
  int group_size_;
  int64_t shard_tokens_;
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
