#include "kernels/ulysses_layout_testing.h"

#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/ulysses_layout.h"

namespace dcp::kernels {
namespace testing_layout {

std::vector<Shape> UnevenShapes(std::initializer_list<Shape> extra) {
  std::vector<Shape> shapes = {
      {1, 4, 2, 1, 8, 5, 5},   // no exchange
      {2, 4, 2, 1, 4, 4, 7},   // T = 7 over 2 ranks
      {2, 6, 3, 2, 3, 5, 9},   // kv 3 over 2 ranks: each sent twice
      {4, 8, 2, 2, 3, 3, 10},  // kv < p, odd head_dim
      {8, 8, 1, 8, 5, 2, 13},  // one kv head for 8 ranks; rank 7 all padding
      {4, 12, 4, 1, 6, 1, 1},  // one real token
      {3, 6, 3, 1, 7, 5, 9},   // shards of 5 where 3 would do
  };
  shapes.insert(shapes.end(), extra.begin(), extra.end());
  return shapes;
}

std::string ShapeName(const Shape& s) {
  return absl::StrCat("p", s.p, "_heads", s.heads, "_kv", s.kv_heads, "x",
                      s.kv_replication, "_d", s.head_dim, "_shard",
                      s.shard_tokens, "_T", s.total_tokens);
}

std::string CaseName(const Shape& s, DType dtype) {
  return absl::StrCat(ShapeName(s), "_", DTypeName(dtype));
}

void PrintTo(const Shape& s, std::ostream* os) { *os << ShapeName(s); }

UlyssesLayout LayoutOf(const Shape& s, int rank, DType dtype) {
  UlyssesLayout layout;
  layout.group_size = s.p;
  layout.rank = rank;
  layout.shard_tokens = s.shard_tokens;
  layout.total_tokens = s.total_tokens;
  layout.heads = s.heads;
  layout.kv_heads = s.kv_heads;
  layout.kv_replication = s.kv_replication;
  layout.head_dim = s.head_dim;
  layout.dtype = dtype;
  return layout;
}

}  // namespace testing_layout
}  // namespace dcp::kernels
