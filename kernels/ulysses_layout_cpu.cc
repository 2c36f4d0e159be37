#include "kernels/ulysses_layout_cpu.h"

#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "kernels/ulysses_layout.h"

namespace dcp::kernels::cpu {
namespace {

// Every buffer is a sequence of rows of head vectors of head_dim elements;
// a head vector is what all four functions copy (or zero).
class HeadVectors {
 public:
  explicit HeadVectors(const UlyssesLayout& layout)
      : element_(ElementBytes(layout.dtype)),
        head_dim_(layout.head_dim),
        bytes_(static_cast<size_t>(head_dim_) * element_) {}

  // Head `head` of row `row` in a buffer whose rows are `row_elements`
  // elements apart.
  const char* At(const void* base, int64_t row, int64_t head,
                 int64_t row_elements) const {
    return static_cast<const char*>(base) +
           (row * row_elements + head * head_dim_) * element_;
  }
  char* At(void* base, int64_t row, int64_t head, int64_t row_elements) const {
    return static_cast<char*>(base) +
           (row * row_elements + head * head_dim_) * element_;
  }
  // Elements of a dense row of `heads` heads.
  int64_t Row(int heads) const {
    return static_cast<int64_t>(heads) * head_dim_;
  }

  void Copy(char* dst, const char* src) const { std::memcpy(dst, src, bytes_); }
  void Zero(char* dst) const { std::memset(dst, 0, bytes_); }

 private:
  int64_t element_;
  int64_t head_dim_;
  size_t bytes_;
};

}  // namespace

absl::Status PackQkv(const UlyssesLayout& layout, const QkvShard& shard,
                     void* send) {
  RETURN_IF_ERROR(ValidatePackQkv(layout, shard, send));
  const HeadVectors v(layout);
  const int p = layout.group_size, h = layout.local_heads(),
            e = layout.local_kv_heads(), rep = layout.kv_replication;
  const int64_t q_row =
      shard.q_row_stride ? shard.q_row_stride : v.Row(layout.heads);
  const int64_t k_row =
      shard.k_row_stride ? shard.k_row_stride : v.Row(layout.kv_heads);
  const int64_t v_row =
      shard.v_row_stride ? shard.v_row_stride : v.Row(layout.kv_heads);
  const int64_t send_row = v.Row(layout.exchanged_heads());
  const int64_t real = layout.real_rows();
  for (int j = 0; j < p; ++j) {
    for (int64_t t = 0; t < layout.shard_tokens; ++t) {
      const int64_t row = j * layout.shard_tokens + t;
      for (int c = 0; c < h + 2 * e; ++c) {
        char* dst = v.At(send, row, c, send_row);
        if (t >= real) {
          v.Zero(dst);
        } else if (c < h) {
          v.Copy(dst, v.At(shard.q, t, j * h + c, q_row));
        } else if (c < h + e) {
          v.Copy(dst, v.At(shard.k, t, (j * e + c - h) / rep, k_row));
        } else {
          v.Copy(dst, v.At(shard.v, t, (j * e + c - h - e) / rep, v_row));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status UnpackQkv(const UlyssesLayout& layout, const void* recv, Rows rows,
                       const HeadShardedQkv& out) {
  RETURN_IF_ERROR(ValidateUnpackQkv(layout, recv, rows, out));
  const HeadVectors v(layout);
  const int h = layout.local_heads(), e = layout.local_kv_heads();
  const int64_t recv_row = v.Row(layout.exchanged_heads());
  for (int64_t g = 0; g < layout.head_sharded_rows(rows); ++g) {
    for (int c = 0; c < h + 2 * e; ++c) {
      char* dst = c < h       ? v.At(out.q, g, c, v.Row(h))
                  : c < h + e ? v.At(out.k, g, c - h, v.Row(e))
                              : v.At(out.v, g, c - h - e, v.Row(e));
      if (g < layout.total_tokens) {
        v.Copy(dst, v.At(recv, g, c, recv_row));
      } else {
        v.Zero(dst);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status PackOutput(const UlyssesLayout& layout, const void* attn,
                        Rows rows, void* send) {
  RETURN_IF_ERROR(ValidatePackOutput(layout, attn, rows, send));
  const HeadVectors v(layout);
  const int h = layout.local_heads();
  for (int64_t g = 0; g < layout.padded_tokens(); ++g) {
    for (int c = 0; c < h; ++c) {
      char* dst = v.At(send, g, c, v.Row(h));
      if (g < layout.total_tokens) {
        v.Copy(dst, v.At(attn, g, c, v.Row(h)));
      } else {
        v.Zero(dst);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status UnpackOutput(const UlyssesLayout& layout, const void* recv,
                          Rows rows, void* out) {
  RETURN_IF_ERROR(ValidateUnpackOutput(layout, recv, rows, out));
  const HeadVectors v(layout);
  const int p = layout.group_size, h = layout.local_heads();
  const int64_t real = layout.real_rows();
  for (int64_t t = 0; t < layout.shard_rows(rows); ++t) {
    for (int j = 0; j < p; ++j) {
      for (int c = 0; c < h; ++c) {
        char* dst = v.At(out, t, j * h + c, v.Row(layout.heads));
        if (t < real) {
          v.Copy(dst, v.At(recv, j * layout.shard_tokens + t, c, v.Row(h)));
        } else {
          v.Zero(dst);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace dcp::kernels::cpu
