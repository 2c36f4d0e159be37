// The CPU reference against the layout train/transformer_layers.cc
// `Attention()` and train/ulysses.cc build with libtorch ops: the same ops,
// written out here for a whole group (the all-to-all as the swap of blocks
// it is), must give the same bytes on every real row.
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ulysses_layout.h"
#include "kernels/ulysses_layout_cpu.h"
#include "kernels/ulysses_layout_testing.h"

namespace dcp::kernels::cpu {
namespace {

using testing_layout::CaseName;
using testing_layout::LayoutOf;
using testing_layout::Shape;

// The shared uneven shapes, and a larger one.
std::vector<Shape> TestedShapes() {
  return testing_layout::UnevenShapes({{4, 32, 8, 1, 16, 9, 33}});
}

// rank r receives block r of every rank's send, in rank order.
std::vector<at::Tensor> AllToAll(const std::vector<at::Tensor>& send) {
  std::vector<at::Tensor> recv;
  for (size_t r = 0; r < send.size(); ++r) {
    std::vector<at::Tensor> blocks;
    for (const at::Tensor& s : send) blocks.push_back(s[r]);
    recv.push_back(at::stack(blocks));
  }
  return recv;
}

// Whether the first `rows` rows of a and b hold the same bytes.
bool SameRows(const at::Tensor& a, const at::Tensor& b, int64_t rows) {
  return at::equal(a.narrow(0, 0, rows), b.narrow(0, 0, rows));
}

void CheckShape(const Shape& s, at::ScalarType scalar, DType dtype) {
  SCOPED_TRACE(CaseName(s, dtype));
  const int64_t p = s.p, st = s.shard_tokens, d = s.head_dim;
  const UlyssesLayout any = LayoutOf(s, 0, dtype);
  const int64_t h = any.local_heads(), e = any.local_kv_heads();
  const int64_t T = s.total_tokens;
  const auto options = at::TensorOptions().dtype(scalar);
  at::manual_seed(7);

  // Attention(): per rank, its replicated kv heads, then per destination
  // its query heads and kv heads, then SequenceToHeads' reshape + permute.
  std::vector<at::Tensor> q, torch_send, ours_send;
  for (int r = 0; r < p; ++r) {
    const UlyssesLayout l = LayoutOf(s, r, dtype);
    q.push_back(at::randn({st, s.heads, d}).to(scalar));
    at::Tensor k = at::randn({st, s.kv_heads, d}).to(scalar);
    at::Tensor v = at::randn({st, s.kv_heads, d}).to(scalar);
    at::Tensor kr = k.repeat_interleave(s.kv_replication, 1);
    at::Tensor vr = v.repeat_interleave(s.kv_replication, 1);
    at::Tensor qkv =
        at::cat({q[r].reshape({st, p, h, d}), kr.reshape({st, p, e, d}),
                 vr.reshape({st, p, e, d})},
                2)
            .reshape({st, p * (h + 2 * e), d});
    torch_send.push_back(
        qkv.reshape({st, p, h + 2 * e, d}).permute({1, 0, 2, 3}).contiguous());

    ours_send.push_back(at::full({p, st, h + 2 * e, d}, 3.0, options));
    ASSERT_TRUE(PackQkv(l, {q[r].data_ptr(), k.data_ptr(), v.data_ptr()},
                        ours_send[r].data_ptr())
                    .ok());
    const int64_t real = l.real_rows();
    for (int j = 0; j < p; ++j) {
      EXPECT_TRUE(SameRows(ours_send[r][j], torch_send[r][j], real))
          << "rank " << r << " block " << j;
      EXPECT_TRUE(at::equal(ours_send[r][j].narrow(0, real, st - real),
                            at::zeros({st - real, h + 2 * e, d}, options)));
    }
  }

  // After the exchange: `full` [S, h + 2e, d] and its three narrows.
  const std::vector<at::Tensor> torch_recv = AllToAll(torch_send);
  const std::vector<at::Tensor> ours_recv = AllToAll(ours_send);
  std::vector<at::Tensor> torch_out_send, ours_out_send;
  for (int r = 0; r < p; ++r) {
    const UlyssesLayout l = LayoutOf(s, r, dtype);
    const at::Tensor full = torch_recv[r].reshape({p * st, h + 2 * e, d});
    at::Tensor qh = at::empty({T, h, d}, options);
    at::Tensor kh = at::empty({T, e, d}, options);
    at::Tensor vh = at::empty({T, e, d}, options);
    ASSERT_TRUE(UnpackQkv(l, ours_recv[r].data_ptr(), Rows::kReal,
                          {qh.data_ptr(), kh.data_ptr(), vh.data_ptr()})
                    .ok());
    EXPECT_TRUE(SameRows(qh, full.narrow(1, 0, h), T)) << "rank " << r;
    EXPECT_TRUE(SameRows(kh, full.narrow(1, h, e), T)) << "rank " << r;
    EXPECT_TRUE(SameRows(vh, full.narrow(1, h + e, e), T)) << "rank " << r;

    // The output path, with q's heads standing in for attention's output:
    // HeadsToSequence sends x [S, h, d] as [p, S/p, h, d].
    const at::Tensor attn = full.narrow(1, 0, h).contiguous();
    torch_out_send.push_back(attn.reshape({p, st, h, d}));
    ours_out_send.push_back(at::full({p, st, h, d}, 3.0, options));
    ASSERT_TRUE(
        PackOutput(l, qh.data_ptr(), Rows::kReal, ours_out_send[r].data_ptr())
            .ok());
    EXPECT_TRUE(SameRows(ours_out_send[r].reshape({p * st, h, d}),
                         torch_out_send[r].reshape({p * st, h, d}), T));
  }
  const std::vector<at::Tensor> torch_out_recv = AllToAll(torch_out_send);
  const std::vector<at::Tensor> ours_out_recv = AllToAll(ours_out_send);
  for (int r = 0; r < p; ++r) {
    const UlyssesLayout l = LayoutOf(s, r, dtype);
    // HeadsToSequence: [p, S/p, h, d] -> [S/p, p h, d], then Attention()'s
    // [s/p, heads, d]: every rank's q back where it started.
    const at::Tensor torch_out =
        torch_out_recv[r].permute({1, 0, 2, 3}).reshape({st, p * h, d});
    at::Tensor out = at::full({st, s.heads, d}, 3.0, options);
    ASSERT_TRUE(UnpackOutput(l, ours_out_recv[r].data_ptr(), Rows::kPadded,
                             out.data_ptr())
                    .ok());
    EXPECT_TRUE(SameRows(out, torch_out, l.real_rows())) << "rank " << r;
    EXPECT_TRUE(SameRows(out, q[r], l.real_rows())) << "rank " << r;
  }
}

TEST(UlyssesLayoutTorchTest, CpuReferenceIsTheTrainersLayout) {
  for (const Shape& s : TestedShapes()) {
    CheckShape(s, at::kFloat, DType::kFloat32);
    CheckShape(s, at::kBFloat16, DType::kBFloat16);
  }
}

}  // namespace
}  // namespace dcp::kernels::cpu
