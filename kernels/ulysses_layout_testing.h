#ifndef DCP_KERNELS_ULYSSES_LAYOUT_TESTING_H_
#define DCP_KERNELS_ULYSSES_LAYOUT_TESTING_H_

// What the tests of the layout implementations (the CPU reference, its
// check against libtorch, the CUDA kernels) share: a group's shape, the
// uneven shapes every one of them runs, the layouts of a shape's ranks and
// the names of the cases.
// No CUDA and no GoogleTest, so that every test can use it in every build.

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/ulysses_layout.h"

namespace dcp::kernels {
namespace testing_layout {

/// A group's shape, the ranks' layouts differing only in `rank`.
struct Shape {
  int p, heads, kv_heads, kv_replication, head_dim;
  int64_t shard_tokens, total_tokens;
};

/// The uneven shapes every layout test runs, then `extra`. Uneven on
/// purpose: T not a multiple of p, ranks with only padding, kv heads fewer
/// than p (replicated), odd head_dim, shards padded further than needed, and
/// the group of one. Small enough for the CPU test's element tags (fewer
/// than 32 tokens and 32 heads, head_dim at most 8; its TagsAreDistinct
/// checks).
std::vector<Shape> UnevenShapes(std::initializer_list<Shape> extra = {});

/// "p2_heads4_kv2x1_d4_shard4_T7": a test name's part.
std::string ShapeName(const Shape& s);

/// "p2_heads4_kv2x1_d4_shard4_T7_bfloat16": a case's name.
std::string CaseName(const Shape& s, DType dtype);

/// How GoogleTest prints a Shape parameter of a failing case.
void PrintTo(const Shape& s, std::ostream* os);

/// Rank `rank`'s layout of a group of shape `s` moving `dtype` elements.
UlyssesLayout LayoutOf(const Shape& s, int rank, DType dtype);

}  // namespace testing_layout
}  // namespace dcp::kernels

#endif  // DCP_KERNELS_ULYSSES_LAYOUT_TESTING_H_
