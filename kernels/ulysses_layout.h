#ifndef DCP_KERNELS_ULYSSES_LAYOUT_H_
#define DCP_KERNELS_ULYSSES_LAYOUT_H_

#include <cstdint>

#include "absl/status/status.h"

namespace dcp::kernels {

/// The element types the layout functions move. They copy bytes and never
/// compute, so results are bit-for-bit copies (NaN payloads included).
enum class DType {
  kFloat32,
  kBFloat16,
};

/// 4 for kFloat32, 2 for kBFloat16.
int ElementBytes(DType dtype);

/// "float32", "bfloat16" (torch's names).
const char* DTypeName(DType dtype);

/// Which rows a token-indexed buffer holds.
enum class Rows {
  /// Only real tokens: T rows of a head-sharded buffer (the varlen layout a
  /// flash-attention varlen kernel reads, indexed by the pack's cu_seqlens),
  /// real_rows() of a sequence-sharded one.
  kReal,
  /// Padding too: S = padded_tokens() rows of a head-sharded buffer,
  /// shard_tokens of a sequence-sharded one. Padding rows written are zero.
  kPadded,
};

/// One rank's side of the two Ulysses all-to-alls of one packed task, the
/// layout of train/transformer_layers.cc `Attention()`:
///
/// A task packs T real tokens back to back, padded at the end to
/// S = shard_tokens * group_size; rank r holds tokens
/// [r * shard_tokens, (r + 1) * shard_tokens), of which the first
/// real_rows() are real. Heads divide over the p ranks: rank j gets query
/// heads [j h, (j + 1) h) and replicated kv heads [j e, (j + 1) e), where
/// h = heads / p, e = kv_heads * kv_replication / p and kv head i is sent as
/// kv_replication adjacent copies (replicated head i reads kv head
/// i / kv_replication), as train/sequence_layout.h `HeadLayout` chooses.
///
/// The buffers, rows outermost, head_dim innermost, all dense:
///
///   qkv send/recv  [p, shard_tokens, h + 2e, head_dim]: send[j] goes to
///                  rank j and holds, per token, its heads for j: h query
///                  heads, then e key heads, then e value heads; recv[j]
///                  came from rank j, so recv is [S, h + 2e, head_dim] in
///                  global token order.
///   out send/recv  [p, shard_tokens, h, head_dim]: send[j] holds this
///                  rank's attention output for rank j's tokens; recv[j]
///                  holds heads [j h, (j + 1) h) of this rank's tokens.
///
/// Padding rows are never read, and every padding row written is zero, so
/// what the exchange sends is the same whatever the padding held.
///
/// A plain value, filled from train's PackLayout and HeadLayout (or by
/// hand) and checked with Validate(). Thread-compatible.
///
///   UlyssesLayout layout;
///   layout.group_size = 8;  layout.rank = 3;
///   layout.shard_tokens = pack.shard_tokens();
///   layout.total_tokens = pack.total_tokens();
///   layout.heads = 32;  layout.kv_heads = 8;  layout.kv_replication = 1;
///   layout.head_dim = 128;  layout.dtype = DType::kBFloat16;
///   RETURN_IF_ERROR(layout.Validate());
struct UlyssesLayout {
  /// p: ranks of the sequence-parallel group.
  int group_size = 1;
  /// This rank, in [0, group_size).
  int rank = 0;
  /// S / p: tokens each rank holds, padding included.
  int64_t shard_tokens = 0;
  /// T: real tokens of the pack, at most S.
  int64_t total_tokens = 0;
  /// Query heads of the model (all ranks together).
  int heads = 0;
  /// Key/value heads of the model, before replication.
  int kv_heads = 0;
  /// Copies of each kv head sent (HeadLayout::kv_replication).
  int kv_replication = 1;
  int head_dim = 0;
  DType dtype = DType::kFloat32;

  /// INVALID_ARGUMENT naming the first field that is out of range: sizes
  /// must be positive, rank in [0, group_size), total_tokens in [0, S],
  /// group_size must divide heads and kv_heads * kv_replication, and every
  /// buffer's size in bytes must fit in int64.
  absl::Status Validate() const;

  /// h: query heads per rank after the exchange.
  int local_heads() const { return heads / group_size; }
  /// e: key (and value) heads per rank after the exchange.
  int local_kv_heads() const { return kv_heads * kv_replication / group_size; }
  /// h + 2e: heads per token in the qkv exchange.
  int exchanged_heads() const { return local_heads() + 2 * local_kv_heads(); }
  /// S.
  int64_t padded_tokens() const { return shard_tokens * group_size; }
  /// Real tokens of this rank's shard: its first ones.
  int64_t real_rows() const;
  /// Rows of a head-sharded buffer: T or S.
  int64_t head_sharded_rows(Rows rows) const {
    return rows == Rows::kReal ? total_tokens : padded_tokens();
  }
  /// Rows of a sequence-sharded buffer: real_rows() or shard_tokens.
  int64_t shard_rows(Rows rows) const {
    return rows == Rows::kReal ? real_rows() : shard_tokens;
  }
  /// Elements of the qkv send (and recv) buffer.
  int64_t qkv_exchange_elements() const {
    return padded_tokens() * exchanged_heads() * head_dim;
  }
  /// Elements of the output send (and recv) buffer.
  int64_t out_exchange_elements() const {
    return padded_tokens() * local_heads() * head_dim;
  }
};

/// This rank's projections before the qkv exchange: real_rows() tokens
/// (rows past them are not read, so a padded shard may be passed as is).
struct QkvShard {
  const void* q = nullptr;  ///< [real_rows, heads, head_dim]
  const void* k = nullptr;  ///< [real_rows, kv_heads, head_dim]
  const void* v = nullptr;  ///< [real_rows, kv_heads, head_dim]
  /// Elements from one token's row to the next; 0 means dense
  /// (heads * head_dim for q, kv_heads * head_dim for k and v). Lets q, k
  /// and v be views of one fused projection
  /// [rows, (heads + 2 kv_heads) * head_dim] without a copy.
  int64_t q_row_stride = 0;
  int64_t k_row_stride = 0;
  int64_t v_row_stride = 0;
};

/// This rank's heads over the whole sequence after the qkv exchange, each
/// dense, `Rows` deciding their row count (T or S).
struct HeadShardedQkv {
  void* q = nullptr;  ///< [rows, h, head_dim]
  void* k = nullptr;  ///< [rows, e, head_dim]
  void* v = nullptr;  ///< [rows, e, head_dim]
};

/// The argument checks every implementation of the four layout changes
/// (ulysses_layout_cpu.h, ulysses_layout_cuda.h) runs first, so that they
/// fail alike: layout.Validate(), then INVALID_ARGUMENT naming the argument
/// when a buffer with elements is null or not aligned to the element size,
/// or a row stride is negative or shorter than a row. Buffers must not
/// overlap; that is not checked.
absl::Status ValidatePackQkv(const UlyssesLayout& layout, const QkvShard& shard,
                             const void* send);
absl::Status ValidateUnpackQkv(const UlyssesLayout& layout, const void* recv,
                               Rows rows, const HeadShardedQkv& out);
absl::Status ValidatePackOutput(const UlyssesLayout& layout, const void* attn,
                                Rows rows, const void* send);
absl::Status ValidateUnpackOutput(const UlyssesLayout& layout, const void* recv,
                                  Rows rows, const void* out);

}  // namespace dcp::kernels

#endif  // DCP_KERNELS_ULYSSES_LAYOUT_H_
