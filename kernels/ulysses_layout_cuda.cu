// The CUDA kernels of ulysses_layout_cuda.h.
//
// Every buffer is rows of head vectors (head_dim elements), and each of the
// layout changes moves whole head vectors: one thread group per vector of
// the buffer it walks, which computes where that vector comes from (or that
// it is zero padding) and copies it in words of 16 bytes where alignment
// allows. The walked buffer is the one written, except in UnpackQkv, which
// walks the received buffer and writes to three outputs; both sides of
// every copy are contiguous vectors, so reads and writes coalesce.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/cuda_status.h"
#include "common/status_macros.h"
#include "kernels/ulysses_layout.h"
#include "kernels/ulysses_layout_cuda.h"

namespace dcp::kernels::cuda {
namespace {

// Where one head vector goes, and where from (nullptr: zeros).
struct Move {
  char* dst;
  const char* src;
};

// Copies or zeroes the head vector `map(i)` of every i < count, `words`
// words of type Word each: threadIdx.x walks the words, threadIdx.y and the
// blocks the vectors.
template <typename Word, typename Map>
__global__ void MoveHeadVectors(Map map, uint32_t count, int words) {
  const uint32_t i = blockIdx.x * blockDim.y + threadIdx.y;
  if (i >= count) return;
  const Move move = map(i);
  Word* dst = reinterpret_cast<Word*>(move.dst);
  const Word* src = reinterpret_cast<const Word*>(move.src);
  for (int w = threadIdx.x; w < words; w += blockDim.x) {
    dst[w] = src != nullptr ? src[w] : Word{};
  }
}

// Send vector i = ((j * shard_tokens + t) * (h + 2e) + c).
struct PackQkvMap {
  char* send;
  const char* q;
  const char* k;
  const char* v;
  int64_t q_row, k_row, v_row, head_bytes;  // bytes
  uint32_t shard_tokens, real_rows, h, e, rep;

  __device__ Move operator()(uint32_t i) const {
    const uint32_t heads = h + 2 * e;
    const uint32_t row = i / heads, c = i - row * heads;
    const uint32_t j = row / shard_tokens, t = row - j * shard_tokens;
    Move move{send + i * head_bytes, nullptr};
    if (t < real_rows) {
      if (c < h) {
        move.src = q + t * q_row + (j * h + c) * head_bytes;
      } else if (c < h + e) {
        move.src = k + t * k_row + ((j * e + c - h) / rep) * head_bytes;
      } else {
        move.src = v + t * v_row + ((j * e + c - h - e) / rep) * head_bytes;
      }
    }
    return move;
  }
};

// Received vector i = (g * (h + 2e) + c), g the global token.
struct UnpackQkvMap {
  const char* recv;
  char* q;
  char* k;
  char* v;
  int64_t head_bytes;
  uint32_t total_tokens, h, e;

  __device__ Move operator()(uint32_t i) const {
    const uint32_t heads = h + 2 * e;
    const uint32_t g = i / heads, c = i - g * heads;
    char* dst = c < h       ? q + (int64_t{g} * h + c) * head_bytes
                : c < h + e ? k + (int64_t{g} * e + c - h) * head_bytes
                            : v + (int64_t{g} * e + c - h - e) * head_bytes;
    return {dst, g < total_tokens ? recv + i * head_bytes : nullptr};
  }
};

// Output vector i = (t * heads + j * h + c).
struct UnpackOutputMap {
  const char* recv;
  char* out;
  int64_t head_bytes, shard_tokens;
  uint32_t real_rows, heads, h;

  __device__ Move operator()(uint32_t i) const {
    const uint32_t t = i / heads, head = i - t * heads;
    const uint32_t j = head / h, c = head - j * h;
    const char* src = t < real_rows
                          ? recv + ((j * shard_tokens + t) * h + c) * head_bytes
                          : nullptr;
    return {out + i * head_bytes, src};
  }
};

// The widest word (16, 8, 4 or 2 bytes, at least an element) that divides
// every one of `values`: addresses, row strides in bytes and the vector size.
int WordBytes(const UlyssesLayout& layout,
              std::initializer_list<uintptr_t> values) {
  int word = 16;
  const int element = ElementBytes(layout.dtype);
  for (uintptr_t value : values) {
    while (word > element && value % word != 0) word /= 2;
  }
  return word;
}

template <typename Word, typename Map>
absl::Status LaunchWords(const Map& map, uint32_t count, int64_t head_bytes,
                         cudaStream_t stream) {
  const int words = static_cast<int>(head_bytes / sizeof(Word));
  // A power-of-two group of up to a warp per vector, 256 threads a block.
  int lanes = 1;
  while (lanes < words && lanes < 32) lanes *= 2;
  const dim3 block(lanes, 256 / lanes);
  const dim3 grid((count + block.y - 1) / block.y);
  MoveHeadVectors<Word><<<grid, block, 0, stream>>>(map, count, words);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

// Runs `map` over `count` head vectors in words of `word_bytes`.
template <typename Map>
absl::Status Launch(const char* what, const Map& map, int64_t count,
                    int64_t head_bytes, int word_bytes, cudaStream_t stream) {
  if (count == 0) return absl::OkStatus();
  if (count > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", count,
        " head vectors are more than one launch moves (2^31 - 1)"));
  }
  const uint32_t n = static_cast<uint32_t>(count);
  switch (word_bytes) {
    case 16:
      return LaunchWords<uint4>(map, n, head_bytes, stream);
    case 8:
      return LaunchWords<uint2>(map, n, head_bytes, stream);
    case 4:
      return LaunchWords<uint32_t>(map, n, head_bytes, stream);
    default:
      return LaunchWords<uint16_t>(map, n, head_bytes, stream);
  }
}

int64_t HeadBytes(const UlyssesLayout& layout) {
  return int64_t{layout.head_dim} * ElementBytes(layout.dtype);
}

uintptr_t Address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

}  // namespace

absl::Status PackQkv(const UlyssesLayout& layout, const QkvShard& shard,
                     void* send, CUstream_st* stream) {
  RETURN_IF_ERROR(ValidatePackQkv(layout, shard, send));
  const int64_t element = ElementBytes(layout.dtype);
  const int64_t head_bytes = HeadBytes(layout);
  PackQkvMap map;
  map.send = static_cast<char*>(send);
  map.q = static_cast<const char*>(shard.q);
  map.k = static_cast<const char*>(shard.k);
  map.v = static_cast<const char*>(shard.v);
  map.q_row = shard.q_row_stride ? shard.q_row_stride * element
                                 : layout.heads * head_bytes;
  map.k_row = shard.k_row_stride ? shard.k_row_stride * element
                                 : layout.kv_heads * head_bytes;
  map.v_row = shard.v_row_stride ? shard.v_row_stride * element
                                 : layout.kv_heads * head_bytes;
  map.head_bytes = head_bytes;
  map.shard_tokens = static_cast<uint32_t>(layout.shard_tokens);
  map.real_rows = static_cast<uint32_t>(layout.real_rows());
  map.h = layout.local_heads();
  map.e = layout.local_kv_heads();
  map.rep = layout.kv_replication;
  const int word = WordBytes(
      layout,
      {Address(send), Address(shard.q), Address(shard.k), Address(shard.v),
       static_cast<uintptr_t>(map.q_row), static_cast<uintptr_t>(map.k_row),
       static_cast<uintptr_t>(map.v_row), static_cast<uintptr_t>(head_bytes)});
  return Launch("PackQkv", map,
                layout.padded_tokens() * layout.exchanged_heads(), head_bytes,
                word, stream);
}

absl::Status UnpackQkv(const UlyssesLayout& layout, const void* recv, Rows rows,
                       const HeadShardedQkv& out, CUstream_st* stream) {
  RETURN_IF_ERROR(ValidateUnpackQkv(layout, recv, rows, out));
  const int64_t head_bytes = HeadBytes(layout);
  UnpackQkvMap map;
  map.recv = static_cast<const char*>(recv);
  map.q = static_cast<char*>(out.q);
  map.k = static_cast<char*>(out.k);
  map.v = static_cast<char*>(out.v);
  map.head_bytes = head_bytes;
  map.total_tokens = static_cast<uint32_t>(layout.total_tokens);
  map.h = layout.local_heads();
  map.e = layout.local_kv_heads();
  const int word =
      WordBytes(layout, {Address(recv), Address(out.q), Address(out.k),
                         Address(out.v), static_cast<uintptr_t>(head_bytes)});
  return Launch("UnpackQkv", map,
                layout.head_sharded_rows(rows) * layout.exchanged_heads(),
                head_bytes, word, stream);
}

// Both sides are [rows, h, head_dim] in global token order: a copy of the
// real rows and zeros after them.
absl::Status PackOutput(const UlyssesLayout& layout, const void* attn,
                        Rows rows, void* send, CUstream_st* stream) {
  RETURN_IF_ERROR(ValidatePackOutput(layout, attn, rows, send));
  const int64_t row_bytes = layout.local_heads() * HeadBytes(layout);
  const int64_t real = layout.total_tokens * row_bytes;
  const int64_t padding =
      (layout.padded_tokens() - layout.total_tokens) * row_bytes;
  if (real > 0) {
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(send, attn, real, cudaMemcpyDeviceToDevice, stream));
  }
  if (padding > 0) {
    CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(static_cast<char*>(send) + real, 0, padding, stream));
  }
  return absl::OkStatus();
}

absl::Status UnpackOutput(const UlyssesLayout& layout, const void* recv,
                          Rows rows, void* out, CUstream_st* stream) {
  RETURN_IF_ERROR(ValidateUnpackOutput(layout, recv, rows, out));
  const int64_t head_bytes = HeadBytes(layout);
  UnpackOutputMap map;
  map.recv = static_cast<const char*>(recv);
  map.out = static_cast<char*>(out);
  map.head_bytes = head_bytes;
  map.shard_tokens = layout.shard_tokens;
  map.real_rows = static_cast<uint32_t>(layout.real_rows());
  map.heads = layout.heads;
  map.h = layout.local_heads();
  const int word = WordBytes(layout, {Address(recv), Address(out),
                                      static_cast<uintptr_t>(head_bytes)});
  return Launch("UnpackOutput", map, layout.shard_rows(rows) * layout.heads,
                head_bytes, word, stream);
}

}  // namespace dcp::kernels::cuda
