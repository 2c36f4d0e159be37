#include "kernels/ulysses_layout_cpu.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "kernels/ulysses_layout.h"
#include "kernels/ulysses_layout_testing.h"

namespace dcp::kernels::cpu {
namespace {

using testing_layout::CaseName;
using testing_layout::LayoutOf;
using testing_layout::Shape;
using testing_layout::ShapeName;

// The shared uneven shapes, and an empty pack.
std::vector<Shape> TestedShapes() {
  return testing_layout::UnevenShapes({{4, 16, 4, 1, 2, 6, 0}});
}

// A dense [rows, heads, dim] tensor of 2- or 4-byte elements held as
// uint32_t values, with a guard after it that no function may write.
class Tensor {
 public:
  static constexpr uint32_t kGarbage = 0xA5A5A5A5;
  static constexpr int64_t kGuard = 7;

  Tensor(DType dtype, int64_t rows, int64_t heads, int64_t dim)
      : element_(ElementBytes(dtype)),
        rows_(rows),
        heads_(heads),
        dim_(dim),
        bytes_((rows * heads * dim + kGuard) * element_, 0xA5) {}

  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  int64_t size() const { return rows_ * heads_ * dim_; }

  uint32_t Get(int64_t row, int64_t head, int64_t x) const {
    uint32_t value = 0;
    std::memcpy(&value, &bytes_[Offset(row, head, x)], element_);
    return value;
  }
  void Set(int64_t row, int64_t head, int64_t x, uint32_t value) {
    std::memcpy(&bytes_[Offset(row, head, x)], &value, element_);
  }
  // Every element zero, the guard left as it is (the expected padding).
  void Zero() { std::memset(bytes_.data(), 0, size() * element_); }
  bool operator==(const Tensor& other) const { return bytes_ == other.bytes_; }

 private:
  size_t Offset(int64_t row, int64_t head, int64_t x) const {
    return ((row * heads_ + head) * dim_ + x) * element_;
  }

  int element_;
  int64_t rows_, heads_, dim_;
  std::vector<uint8_t> bytes_;
};

// The value of element x of head `head` of global token g of tensor
// `which`: never zero, so that zero padding shows, and distinct for distinct
// arguments (also in 16 bits) while g < 32, head < 32 and x < 8, so that a
// misplaced element shows; TagsAreDistinct holds TestedShapes() to those
// bounds.
uint32_t Tag(DType dtype, int which, int64_t g, int64_t head, int64_t x) {
  const uint32_t tag =
      static_cast<uint32_t>(((which * 32 + g) * 32 + head) * 8 + x + 1);
  return dtype == DType::kBFloat16 ? tag & 0xFFFF : tag;
}
enum { kQ, kK, kV };

// One rank's q, k, v shard (real rows only), tagged by global token.
struct ShardInputs {
  Tensor q, k, v;
  explicit ShardInputs(const UlyssesLayout& l)
      : q(l.dtype, l.real_rows(), l.heads, l.head_dim),
        k(l.dtype, l.real_rows(), l.kv_heads, l.head_dim),
        v(l.dtype, l.real_rows(), l.kv_heads, l.head_dim) {
    const int64_t begin = l.rank * l.shard_tokens;
    for (int64_t t = 0; t < l.real_rows(); ++t) {
      for (int x = 0; x < l.head_dim; ++x) {
        for (int n = 0; n < l.heads; ++n) {
          q.Set(t, n, x, Tag(l.dtype, kQ, begin + t, n, x));
        }
        for (int m = 0; m < l.kv_heads; ++m) {
          k.Set(t, m, x, Tag(l.dtype, kK, begin + t, m, x));
          v.Set(t, m, x, Tag(l.dtype, kV, begin + t, m, x));
        }
      }
    }
  }
  QkvShard View() const { return {q.data(), k.data(), v.data()}; }
};

TEST(UlyssesLayoutCpuShapesTest, TagsAreDistinct) {
  for (const Shape& s : TestedShapes()) {
    EXPECT_LT(s.shard_tokens * s.p, 32) << ShapeName(s);
    EXPECT_LT(s.heads + 2 * s.kv_heads * s.kv_replication, 32) << ShapeName(s);
    EXPECT_LE(s.head_dim, 8) << ShapeName(s);
  }
  EXPECT_LT(Tag(DType::kFloat32, kV, 31, 31, 7), 1u << 16);
}

class UlyssesLayoutCpuTest
    : public ::testing::TestWithParam<std::tuple<Shape, DType>> {
 protected:
  const Shape& shape() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }
  UlyssesLayout Layout(int rank) const {
    return LayoutOf(shape(), rank, dtype());
  }
};

// Expected send buffers are built by scattering every source element to
// where the definition sends it (the functions gather per destination).
TEST_P(UlyssesLayoutCpuTest, PackQkvSendsEachRankItsHeads) {
  for (int r = 0; r < shape().p; ++r) {
    const UlyssesLayout l = Layout(r);
    const int h = l.local_heads(), e = l.local_kv_heads();
    const ShardInputs in(l);
    Tensor send(l.dtype, l.padded_tokens(), h + 2 * e, l.head_dim);
    ASSERT_TRUE(PackQkv(l, in.View(), send.data()).ok());

    Tensor expected(l.dtype, l.padded_tokens(), h + 2 * e, l.head_dim);
    expected.Zero();
    for (int64_t t = 0; t < l.real_rows(); ++t) {
      for (int x = 0; x < l.head_dim; ++x) {
        for (int n = 0; n < l.heads; ++n) {  // query head n goes to n / h
          expected.Set((n / h) * l.shard_tokens + t, n % h, x,
                       in.q.Get(t, n, x));
        }
        for (int m = 0; m < l.kv_heads; ++m) {
          // kv head m is replicated heads [m rep, (m + 1) rep).
          for (int i = m * l.kv_replication; i < (m + 1) * l.kv_replication;
               ++i) {
            const int64_t row = (i / e) * l.shard_tokens + t;
            expected.Set(row, h + i % e, x, in.k.Get(t, m, x));
            expected.Set(row, h + e + i % e, x, in.v.Get(t, m, x));
          }
        }
      }
    }
    EXPECT_TRUE(send == expected) << "rank " << r;
  }
}

TEST_P(UlyssesLayoutCpuTest, PackQkvReadsFusedProjectionViews) {
  for (int r = 0; r < shape().p; ++r) {
    const UlyssesLayout l = Layout(r);
    const ShardInputs in(l);
    // [rows, heads + 2 kv_heads, dim]: q heads, then k, then v.
    const int fused_heads = l.heads + 2 * l.kv_heads;
    Tensor fused(l.dtype, l.real_rows(), fused_heads, l.head_dim);
    for (int64_t t = 0; t < l.real_rows(); ++t) {
      for (int x = 0; x < l.head_dim; ++x) {
        for (int n = 0; n < l.heads; ++n) fused.Set(t, n, x, in.q.Get(t, n, x));
        for (int m = 0; m < l.kv_heads; ++m) {
          fused.Set(t, l.heads + m, x, in.k.Get(t, m, x));
          fused.Set(t, l.heads + l.kv_heads + m, x, in.v.Get(t, m, x));
        }
      }
    }
    const int64_t element = ElementBytes(l.dtype);
    const char* base = static_cast<const char*>(fused.data());
    QkvShard views;
    views.q = base;
    views.k = base + l.heads * l.head_dim * element;
    views.v = base + (l.heads + l.kv_heads) * l.head_dim * element;
    views.q_row_stride = views.k_row_stride = views.v_row_stride =
        fused_heads * l.head_dim;

    const int64_t n = l.qkv_exchange_elements();
    Tensor dense(l.dtype, n, 1, 1), strided(l.dtype, n, 1, 1);
    ASSERT_TRUE(PackQkv(l, in.View(), dense.data()).ok());
    ASSERT_TRUE(PackQkv(l, views, strided.data()).ok());
    EXPECT_TRUE(strided == dense) << "rank " << r;
  }
}

TEST_P(UlyssesLayoutCpuTest, UnpackQkvSplitsHeadsInTokenOrder) {
  const UlyssesLayout l = Layout(shape().p - 1);
  const int h = l.local_heads(), e = l.local_kv_heads();
  Tensor recv(l.dtype, l.padded_tokens(), h + 2 * e, l.head_dim);
  for (int64_t g = 0; g < l.padded_tokens(); ++g) {
    for (int c = 0; c < h + 2 * e; ++c) {
      for (int x = 0; x < l.head_dim; ++x) {
        recv.Set(g, c, x, Tag(l.dtype, kQ, g, c, x));  // padding too: unread
      }
    }
  }
  for (Rows rows : {Rows::kReal, Rows::kPadded}) {
    const int64_t n = l.head_sharded_rows(rows);
    Tensor q(l.dtype, n, h, l.head_dim), k(l.dtype, n, e, l.head_dim),
        v(l.dtype, n, e, l.head_dim);
    ASSERT_TRUE(
        UnpackQkv(l, recv.data(), rows, {q.data(), k.data(), v.data()}).ok());
    Tensor eq(l.dtype, n, h, l.head_dim), ek(l.dtype, n, e, l.head_dim),
        ev(l.dtype, n, e, l.head_dim);
    eq.Zero();
    ek.Zero();
    ev.Zero();
    for (int64_t g = 0; g < l.total_tokens; ++g) {
      for (int x = 0; x < l.head_dim; ++x) {
        for (int c = 0; c < h; ++c) eq.Set(g, c, x, recv.Get(g, c, x));
        for (int c = 0; c < e; ++c) {
          ek.Set(g, c, x, recv.Get(g, h + c, x));
          ev.Set(g, c, x, recv.Get(g, h + e + c, x));
        }
      }
    }
    EXPECT_TRUE(q == eq);
    EXPECT_TRUE(k == ek);
    EXPECT_TRUE(v == ev);
  }
}

TEST_P(UlyssesLayoutCpuTest, PackOutputCopiesRealRowsAndZeroesPadding) {
  const UlyssesLayout l = Layout(0);
  const int h = l.local_heads();
  for (Rows rows : {Rows::kReal, Rows::kPadded}) {
    const int64_t n = l.head_sharded_rows(rows);
    Tensor attn(l.dtype, n, h, l.head_dim);  // padding rows are garbage
    for (int64_t g = 0; g < l.total_tokens; ++g) {
      for (int c = 0; c < h; ++c) {
        for (int x = 0; x < l.head_dim; ++x) {
          attn.Set(g, c, x, Tag(l.dtype, kV, g, c, x));
        }
      }
    }
    Tensor send(l.dtype, l.padded_tokens(), h, l.head_dim);
    ASSERT_TRUE(PackOutput(l, attn.data(), rows, send.data()).ok());
    Tensor expected(l.dtype, l.padded_tokens(), h, l.head_dim);
    expected.Zero();
    for (int64_t g = 0; g < l.total_tokens; ++g) {
      for (int c = 0; c < h; ++c) {
        for (int x = 0; x < l.head_dim; ++x) {
          expected.Set(g, c, x, attn.Get(g, c, x));
        }
      }
    }
    EXPECT_TRUE(send == expected);
  }
}

TEST_P(UlyssesLayoutCpuTest, UnpackOutputGathersEveryRanksHeads) {
  for (int r = 0; r < shape().p; ++r) {
    const UlyssesLayout l = Layout(r);
    const int h = l.local_heads();
    Tensor recv(l.dtype, l.padded_tokens(), h, l.head_dim);
    for (int64_t row = 0; row < l.padded_tokens(); ++row) {
      for (int c = 0; c < h; ++c) {
        for (int x = 0; x < l.head_dim; ++x) {
          recv.Set(row, c, x, Tag(l.dtype, kK, row, c, x));
        }
      }
    }
    for (Rows rows : {Rows::kReal, Rows::kPadded}) {
      Tensor out(l.dtype, l.shard_rows(rows), l.heads, l.head_dim);
      ASSERT_TRUE(UnpackOutput(l, recv.data(), rows, out.data()).ok());
      Tensor expected(l.dtype, l.shard_rows(rows), l.heads, l.head_dim);
      expected.Zero();
      // recv[j][t] holds heads [j h, (j + 1) h) of token t.
      for (int j = 0; j < l.group_size; ++j) {
        for (int64_t t = 0; t < l.real_rows(); ++t) {
          for (int c = 0; c < h; ++c) {
            for (int x = 0; x < l.head_dim; ++x) {
              expected.Set(t, j * h + c, x,
                           recv.Get(j * l.shard_tokens + t, c, x));
            }
          }
        }
      }
      EXPECT_TRUE(out == expected) << "rank " << r;
    }
  }
}

// The exchange of a group: recv of rank r, block j = send of rank j, block r.
std::vector<Tensor> AllToAll(const std::vector<Tensor>& send, DType dtype,
                             int64_t shard_tokens, int row_heads, int dim) {
  const int p = static_cast<int>(send.size());
  std::vector<Tensor> recv;
  for (int r = 0; r < p; ++r) {
    recv.emplace_back(dtype, p * shard_tokens, row_heads, dim);
    for (int j = 0; j < p; ++j) {
      for (int64_t t = 0; t < shard_tokens; ++t) {
        for (int c = 0; c < row_heads; ++c) {
          for (int x = 0; x < dim; ++x) {
            recv[r].Set(j * shard_tokens + t, c, x,
                        send[j].Get(r * shard_tokens + t, c, x));
          }
        }
      }
    }
  }
  return recv;
}

// Ulysses over the whole group: after the qkv exchange rank r holds its
// heads of every real token; the output path brings the heads it was given
// back, so pack -> exchange -> unpack -> pack -> exchange -> unpack is the
// identity on the real rows of q.
TEST_P(UlyssesLayoutCpuTest, RoundTripOverTheGroup) {
  const int p = shape().p;
  const UlyssesLayout any = Layout(0);
  const int h = any.local_heads(), e = any.local_kv_heads(), d = any.head_dim;
  std::vector<ShardInputs> inputs;
  std::vector<Tensor> send;
  for (int r = 0; r < p; ++r) {
    inputs.emplace_back(Layout(r));
    send.emplace_back(dtype(), any.padded_tokens(), h + 2 * e, d);
    ASSERT_TRUE(PackQkv(Layout(r), inputs[r].View(), send[r].data()).ok());
  }
  const std::vector<Tensor> recv =
      AllToAll(send, dtype(), any.shard_tokens, h + 2 * e, d);

  std::vector<Tensor> out_send;
  for (int r = 0; r < p; ++r) {
    const UlyssesLayout l = Layout(r);
    const int64_t T = l.total_tokens;
    Tensor q(dtype(), T, h, d), k(dtype(), T, e, d), v(dtype(), T, e, d);
    ASSERT_TRUE(UnpackQkv(l, recv[r].data(), Rows::kReal,
                          {q.data(), k.data(), v.data()})
                    .ok());
    for (int64_t g = 0; g < T; ++g) {
      for (int x = 0; x < d; ++x) {
        for (int c = 0; c < h; ++c) {
          ASSERT_EQ(q.Get(g, c, x), Tag(dtype(), kQ, g, r * h + c, x));
        }
        for (int c = 0; c < e; ++c) {
          const int kv_head = (r * e + c) / l.kv_replication;
          ASSERT_EQ(k.Get(g, c, x), Tag(dtype(), kK, g, kv_head, x));
          ASSERT_EQ(v.Get(g, c, x), Tag(dtype(), kV, g, kv_head, x));
        }
      }
    }
    // Attention's output stands in for q: same shape [T, h, d].
    out_send.emplace_back(dtype(), l.padded_tokens(), h, d);
    ASSERT_TRUE(PackOutput(l, q.data(), Rows::kReal, out_send[r].data()).ok());
  }
  const std::vector<Tensor> out_recv =
      AllToAll(out_send, dtype(), any.shard_tokens, h, d);
  for (int r = 0; r < p; ++r) {
    const UlyssesLayout l = Layout(r);
    Tensor out(dtype(), l.real_rows(), l.heads, d);
    ASSERT_TRUE(
        UnpackOutput(l, out_recv[r].data(), Rows::kReal, out.data()).ok());
    EXPECT_TRUE(out == inputs[r].q) << "rank " << r;
  }
}

TEST_P(UlyssesLayoutCpuTest, ArgumentErrorsComeBackAsStatus) {
  UlyssesLayout l = Layout(0);
  l.head_dim = 0;
  Tensor buffer(dtype(), 1, 1, 1);
  EXPECT_EQ(PackQkv(l, {}, buffer.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UnpackQkv(l, buffer.data(), Rows::kReal, {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PackOutput(l, nullptr, Rows::kReal, buffer.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UnpackOutput(l, buffer.data(), Rows::kPadded, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, UlyssesLayoutCpuTest,
    ::testing::Combine(::testing::ValuesIn(TestedShapes()),
                       ::testing::Values(DType::kFloat32, DType::kBFloat16)),
    [](const ::testing::TestParamInfo<UlyssesLayoutCpuTest::ParamType>& info) {
      return CaseName(std::get<0>(info.param), std::get<1>(info.param));
    });

}  // namespace
}  // namespace dcp::kernels::cpu
