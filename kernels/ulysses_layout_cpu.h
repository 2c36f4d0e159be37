#ifndef DCP_KERNELS_ULYSSES_LAYOUT_CPU_H_
#define DCP_KERNELS_ULYSSES_LAYOUT_CPU_H_

#include "absl/status/status.h"
#include "kernels/ulysses_layout.h"

/// The four layout changes around Ulysses' two all-to-alls on host memory:
/// the reference the CUDA kernels of ulysses_layout_cuda.h are tested
/// against bit for bit, written as the plain loops over the buffers of
/// UlyssesLayout's definition. Same arguments and the same argument errors
/// as the CUDA functions (ulysses_layout.h's Validate*), no stream.
/// Synchronous; thread-safe for distinct output buffers.
///
///   // Before the qkv all-to-all, on every rank:
///   RETURN_IF_ERROR(cpu::PackQkv(layout, {q, k, v}, send));
///   // ... alltoall(send -> recv) ...
///   RETURN_IF_ERROR(cpu::UnpackQkv(layout, recv, Rows::kReal, {qh, kh, vh}));
///   // ... varlen attention over qh, kh, vh -> attn ...
///   RETURN_IF_ERROR(cpu::PackOutput(layout, attn, Rows::kReal, out_send));
///   // ... alltoall(out_send -> out_recv) ...
///   RETURN_IF_ERROR(cpu::UnpackOutput(layout, out_recv, Rows::kPadded, out));
namespace dcp::kernels::cpu {

/// Fills the qkv send buffer [p, shard_tokens, h + 2e, head_dim] from this
/// rank's shard: send[j][t] = q heads [j h, (j + 1) h) of token t, then the
/// replicated k heads [j e, (j + 1) e), then the v heads; zero for
/// t >= real_rows().
absl::Status PackQkv(const UlyssesLayout& layout, const QkvShard& shard,
                     void* send);

/// Splits the received qkv buffer ([S, h + 2e, head_dim] in global token
/// order) into dense head-sharded q [rows, h, d], k and v [rows, e, d], with
/// rows T (Rows::kReal) or S (Rows::kPadded, padding rows zero).
absl::Status UnpackQkv(const UlyssesLayout& layout, const void* recv, Rows rows,
                       const HeadShardedQkv& out);

/// Fills the output send buffer [p, shard_tokens, h, head_dim] (that is
/// [S, h, head_dim] in global token order) from this rank's attention
/// output `attn` [rows, h, head_dim], rows T or S; padding rows zero.
absl::Status PackOutput(const UlyssesLayout& layout, const void* attn,
                        Rows rows, void* send);

/// Gathers the received output buffer into this rank's tokens with all
/// heads, `out` [rows, heads, head_dim], rows real_rows() (Rows::kReal) or
/// shard_tokens (Rows::kPadded, padding rows zero):
/// out[t][j h + c] = recv[j][t][c].
absl::Status UnpackOutput(const UlyssesLayout& layout, const void* recv,
                          Rows rows, void* out);

}  // namespace dcp::kernels::cpu

#endif  // DCP_KERNELS_ULYSSES_LAYOUT_CPU_H_
