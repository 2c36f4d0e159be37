#ifndef DCP_KERNELS_ULYSSES_LAYOUT_CUDA_H_
#define DCP_KERNELS_ULYSSES_LAYOUT_CUDA_H_

#include "absl/status/status.h"
#include "kernels/ulysses_layout.h"

// cudaStream_t is a CUstream_st*; declared here so that this header needs
// no CUDA headers.
struct CUstream_st;

/// The four layout changes around Ulysses' two all-to-alls as CUDA kernels:
/// the functions of ulysses_layout_cpu.h with the same arguments, on device
/// buffers, plus the stream they run on (nullptr: the default stream). The
/// results are bit for bit those of the CPU reference.
///
/// Each call checks its arguments on the host (the same errors as the CPU
/// reference) and enqueues one kernel (PackOutput: a copy and a memset) on
/// `stream`, then returns: the buffers must stay alive until the stream has
/// run it. A launch error comes back as the status (common/cuda_status.h);
/// an error while the kernel runs shows at the next synchronization. Every
/// buffer must be on the current device. One launch moves at most 2^31 - 1
/// head vectors (512 GiB of bf16 at head_dim 128); more is
/// INVALID_ARGUMENT. Thread-safe.
///
/// Head vectors move as 16-byte words when head_dim * element size, the
/// row strides and the buffer addresses allow, else as 8, 4 or 2 bytes: an
/// odd bf16 head_dim moves 2 bytes at a time, and so more slowly.
///
///   RETURN_IF_ERROR(cuda::PackQkv(l, {q, k, v}, send, s));  // l: the layout
///   // ncclGroupStart(); p sends of send[j], p receives into recv[j]; ...
///   RETURN_IF_ERROR(cuda::UnpackQkv(l, recv, Rows::kReal, {qh, kh, vh}, s));
///   // flash_attn_varlen(qh, kh, vh, cu_seqlens) -> attn [T, h, d]
///   RETURN_IF_ERROR(cuda::PackOutput(l, attn, Rows::kReal, out_send, s));
///   // ... the output all-to-all ...
///   RETURN_IF_ERROR(cuda::UnpackOutput(l, out_recv, Rows::kPadded, out, s));
namespace dcp::kernels::cuda {

absl::Status PackQkv(const UlyssesLayout& layout, const QkvShard& shard,
                     void* send, CUstream_st* stream);

absl::Status UnpackQkv(const UlyssesLayout& layout, const void* recv, Rows rows,
                       const HeadShardedQkv& out, CUstream_st* stream);

absl::Status PackOutput(const UlyssesLayout& layout, const void* attn,
                        Rows rows, void* send, CUstream_st* stream);

absl::Status UnpackOutput(const UlyssesLayout& layout, const void* recv,
                          Rows rows, void* out, CUstream_st* stream);

}  // namespace dcp::kernels::cuda

#endif  // DCP_KERNELS_ULYSSES_LAYOUT_CUDA_H_
