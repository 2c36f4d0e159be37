#include "kernels/ulysses_layout.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace dcp::kernels {
namespace {

absl::Status FieldError(const char* field, int64_t value,
                        absl::string_view rule) {
  return absl::InvalidArgumentError(
      absl::StrCat("UlyssesLayout.", field, " = ", value, ": ", rule));
}

// Whether the product of `factors` (all >= 0) fits in int64.
bool ProductFits(std::initializer_list<int64_t> factors) {
  int64_t product = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(product, f, &product)) return false;
  }
  return true;
}

// `what` is a buffer of `elements` elements at `ptr`: it must exist when it
// holds any, and be aligned to the element size.
absl::Status CheckBuffer(const UlyssesLayout& layout, const char* what,
                         const void* ptr, int64_t elements) {
  if (elements == 0) return absl::OkStatus();
  if (ptr == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is null but holds ", elements, " elements"));
  }
  const int bytes = ElementBytes(layout.dtype);
  if (reinterpret_cast<uintptr_t>(ptr) % bytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not aligned to its ", bytes, "-byte elements"));
  }
  return absl::OkStatus();
}

// One of QkvShard's inputs: `rows` rows of `heads` heads, `stride` apart.
absl::Status CheckShardInput(const UlyssesLayout& layout, const char* what,
                             const char* stride_name, const void* ptr,
                             int64_t stride, int heads) {
  const int64_t dense = static_cast<int64_t>(heads) * layout.head_dim;
  if (stride != 0 && stride < dense) {
    return absl::InvalidArgumentError(
        absl::StrCat("QkvShard.", stride_name, " = ", stride,
                     ": must be 0 (dense) or at least a row of ", heads,
                     " heads * ", layout.head_dim, " = ", dense, " elements"));
  }
  const int64_t rows = layout.real_rows();
  return CheckBuffer(
      layout, what, ptr,
      rows == 0 ? 0 : (rows - 1) * (stride ? stride : dense) + dense);
}

}  // namespace

int ElementBytes(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

const char* DTypeName(DType dtype) {
  return dtype == DType::kFloat32 ? "float32" : "bfloat16";
}

int64_t UlyssesLayout::real_rows() const {
  return std::clamp<int64_t>(total_tokens - rank * shard_tokens, 0,
                             shard_tokens);
}

absl::Status UlyssesLayout::Validate() const {
  if (group_size < 1)
    return FieldError("group_size", group_size, "must be >= 1");
  if (rank < 0 || rank >= group_size) {
    return FieldError(
        "rank", rank,
        absl::StrCat("must lie in [0, group_size = ", group_size, ")"));
  }
  if (shard_tokens < 1) {
    return FieldError("shard_tokens", shard_tokens, "must be >= 1");
  }
  if (!ProductFits({shard_tokens, group_size})) {
    return FieldError("shard_tokens", shard_tokens,
                      "times group_size overflows int64");
  }
  if (total_tokens < 0 || total_tokens > padded_tokens()) {
    return FieldError(
        "total_tokens", total_tokens,
        absl::StrCat("must lie in [0, shard_tokens * group_size = ",
                     padded_tokens(), "]"));
  }
  if (heads < 1) return FieldError("heads", heads, "must be >= 1");
  if (heads % group_size != 0) {
    return FieldError(
        "heads", heads,
        absl::StrCat("must be a multiple of group_size = ", group_size));
  }
  if (kv_heads < 1) return FieldError("kv_heads", kv_heads, "must be >= 1");
  if (kv_replication < 1) {
    return FieldError("kv_replication", kv_replication, "must be >= 1");
  }
  const int64_t replicated = static_cast<int64_t>(kv_heads) * kv_replication;
  if (replicated > INT_MAX / 2 - heads) {
    return FieldError(
        "kv_replication", kv_replication,
        absl::StrCat("times kv_heads = ", kv_heads, " is too large"));
  }
  if (replicated % group_size != 0) {
    return FieldError(
        "kv_replication", kv_replication,
        absl::StrCat("times kv_heads = ", kv_heads,
                     " must be a multiple of group_size = ", group_size,
                     " (HeadLayout::Create chooses it)"));
  }
  if (head_dim < 1) return FieldError("head_dim", head_dim, "must be >= 1");
  if (dtype != DType::kFloat32 && dtype != DType::kBFloat16) {
    return FieldError("dtype", static_cast<int>(dtype),
                      "must be kFloat32 or kBFloat16");
  }
  // The largest buffers: the qkv exchange, and a shard's q.
  const int64_t bytes = ElementBytes(dtype);
  if (!ProductFits({padded_tokens(), exchanged_heads(), head_dim, bytes}) ||
      !ProductFits({shard_tokens, heads, head_dim, bytes})) {
    return FieldError("head_dim", head_dim,
                      "makes a buffer's size in bytes overflow int64");
  }
  return absl::OkStatus();
}

absl::Status ValidatePackQkv(const UlyssesLayout& layout, const QkvShard& shard,
                             const void* send) {
  RETURN_IF_ERROR(layout.Validate());
  RETURN_IF_ERROR(CheckShardInput(layout, "QkvShard.q", "q_row_stride", shard.q,
                                  shard.q_row_stride, layout.heads));
  RETURN_IF_ERROR(CheckShardInput(layout, "QkvShard.k", "k_row_stride", shard.k,
                                  shard.k_row_stride, layout.kv_heads));
  RETURN_IF_ERROR(CheckShardInput(layout, "QkvShard.v", "v_row_stride", shard.v,
                                  shard.v_row_stride, layout.kv_heads));
  return CheckBuffer(layout, "send", send, layout.qkv_exchange_elements());
}

absl::Status ValidateUnpackQkv(const UlyssesLayout& layout, const void* recv,
                               Rows rows, const HeadShardedQkv& out) {
  RETURN_IF_ERROR(layout.Validate());
  RETURN_IF_ERROR(
      CheckBuffer(layout, "recv", recv, layout.qkv_exchange_elements()));
  const int64_t n = layout.head_sharded_rows(rows) * layout.head_dim;
  RETURN_IF_ERROR(
      CheckBuffer(layout, "HeadShardedQkv.q", out.q, n * layout.local_heads()));
  RETURN_IF_ERROR(CheckBuffer(layout, "HeadShardedQkv.k", out.k,
                              n * layout.local_kv_heads()));
  return CheckBuffer(layout, "HeadShardedQkv.v", out.v,
                     n * layout.local_kv_heads());
}

absl::Status ValidatePackOutput(const UlyssesLayout& layout, const void* attn,
                                Rows rows, const void* send) {
  RETURN_IF_ERROR(layout.Validate());
  RETURN_IF_ERROR(CheckBuffer(
      layout, "attn", attn,
      layout.head_sharded_rows(rows) * layout.local_heads() * layout.head_dim));
  return CheckBuffer(layout, "send", send, layout.out_exchange_elements());
}

absl::Status ValidateUnpackOutput(const UlyssesLayout& layout, const void* recv,
                                  Rows rows, const void* out) {
  RETURN_IF_ERROR(layout.Validate());
  RETURN_IF_ERROR(
      CheckBuffer(layout, "recv", recv, layout.out_exchange_elements()));
  return CheckBuffer(layout, "out", out,
                     layout.shard_rows(rows) * layout.heads * layout.head_dim);
}

}  // namespace dcp::kernels
