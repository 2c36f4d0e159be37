#include "kernels/ulysses_layout.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp::kernels {
namespace {

using ::testing::HasSubstr;

// 10 real tokens over 4 ranks of 3: rank 3 holds 1 real token and 2 of
// padding. 8 query heads, 2 kv heads sent twice each (p > kv_heads).
UlyssesLayout Uneven() {
  UlyssesLayout layout;
  layout.group_size = 4;
  layout.rank = 3;
  layout.shard_tokens = 3;
  layout.total_tokens = 10;
  layout.heads = 8;
  layout.kv_heads = 2;
  layout.kv_replication = 2;
  layout.head_dim = 5;
  layout.dtype = DType::kBFloat16;
  return layout;
}

void ExpectInvalid(const absl::Status& status, const std::string& field) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(field));
}

TEST(UlyssesLayoutTest, DerivedSizesFollowTheDefinition) {
  UlyssesLayout layout = Uneven();
  ASSERT_TRUE(layout.Validate().ok());
  EXPECT_EQ(layout.local_heads(), 2);
  EXPECT_EQ(layout.local_kv_heads(), 1);
  EXPECT_EQ(layout.exchanged_heads(), 4);
  EXPECT_EQ(layout.padded_tokens(), 12);
  EXPECT_EQ(layout.real_rows(), 1);
  EXPECT_EQ(layout.head_sharded_rows(Rows::kReal), 10);
  EXPECT_EQ(layout.head_sharded_rows(Rows::kPadded), 12);
  EXPECT_EQ(layout.shard_rows(Rows::kReal), 1);
  EXPECT_EQ(layout.shard_rows(Rows::kPadded), 3);
  EXPECT_EQ(layout.qkv_exchange_elements(), 12 * 4 * 5);
  EXPECT_EQ(layout.out_exchange_elements(), 12 * 2 * 5);
  EXPECT_EQ(ElementBytes(DType::kBFloat16), 2);
  EXPECT_EQ(ElementBytes(DType::kFloat32), 4);
  EXPECT_STREQ(DTypeName(DType::kBFloat16), "bfloat16");

  int64_t real = 0;
  for (layout.rank = 0; layout.rank < 4; ++layout.rank) {
    real += layout.real_rows();
  }
  EXPECT_EQ(real, 10);
  layout.total_tokens = 2;  // ranks past the first hold only padding
  layout.rank = 1;
  EXPECT_EQ(layout.real_rows(), 0);
}

TEST(UlyssesLayoutTest, ValidateNamesTheBadField) {
  struct Bad {
    const char* field;
    void (*edit)(UlyssesLayout&);
  };
  const Bad cases[] = {
      {"group_size", [](UlyssesLayout& l) { l.group_size = 0; }},
      {"rank", [](UlyssesLayout& l) { l.rank = 4; }},
      {"rank", [](UlyssesLayout& l) { l.rank = -1; }},
      {"shard_tokens", [](UlyssesLayout& l) { l.shard_tokens = 0; }},
      {"shard_tokens",
       [](UlyssesLayout& l) {
         l.shard_tokens = std::numeric_limits<int64_t>::max() / 2;
       }},
      {"total_tokens", [](UlyssesLayout& l) { l.total_tokens = 13; }},
      {"total_tokens", [](UlyssesLayout& l) { l.total_tokens = -1; }},
      {"heads", [](UlyssesLayout& l) { l.heads = 6; }},
      {"heads", [](UlyssesLayout& l) { l.heads = 0; }},
      {"kv_heads", [](UlyssesLayout& l) { l.kv_heads = 0; }},
      {"kv_replication", [](UlyssesLayout& l) { l.kv_replication = 0; }},
      {"kv_replication", [](UlyssesLayout& l) { l.kv_replication = 1; }},
      {"kv_replication",
       [](UlyssesLayout& l) {
         l.kv_replication = std::numeric_limits<int>::max();
       }},
      {"head_dim", [](UlyssesLayout& l) { l.head_dim = 0; }},
      {"head_dim",
       [](UlyssesLayout& l) {
         l.head_dim = std::numeric_limits<int>::max();
         l.shard_tokens = int64_t{1} << 40;
         l.total_tokens = 0;
       }},
      {"dtype", [](UlyssesLayout& l) { l.dtype = static_cast<DType>(7); }},
  };
  for (const Bad& bad : cases) {
    UlyssesLayout layout = Uneven();
    bad.edit(layout);
    SCOPED_TRACE(bad.field);
    ExpectInvalid(layout.Validate(), std::string("UlyssesLayout.") + bad.field);
  }
}

TEST(UlyssesLayoutTest, EmptyPackIsValid) {
  UlyssesLayout layout = Uneven();
  layout.total_tokens = 0;
  EXPECT_TRUE(layout.Validate().ok());
  EXPECT_EQ(layout.real_rows(), 0);
}

TEST(UlyssesLayoutTest, ArgumentChecksNameTheArgument) {
  const UlyssesLayout layout = Uneven();  // bf16: 2-byte alignment
  alignas(16) char buffer[4096] = {};
  void* ok = buffer;
  void* odd = buffer + 1;
  const QkvShard shard{ok, ok, ok};
  EXPECT_TRUE(ValidatePackQkv(layout, shard, ok).ok());

  ExpectInvalid(ValidatePackQkv(layout, {nullptr, ok, ok}, ok), "QkvShard.q");
  ExpectInvalid(ValidatePackQkv(layout, {ok, odd, ok}, ok), "QkvShard.k");
  ExpectInvalid(ValidatePackQkv(layout, shard, nullptr), "send");
  QkvShard short_rows = shard;
  short_rows.v_row_stride = layout.kv_heads * layout.head_dim - 1;
  ExpectInvalid(ValidatePackQkv(layout, short_rows, ok), "v_row_stride");
  QkvShard negative = shard;
  negative.q_row_stride = -1;
  ExpectInvalid(ValidatePackQkv(layout, negative, ok), "q_row_stride");
  UlyssesLayout bad = layout;
  bad.heads = 0;
  ExpectInvalid(ValidatePackQkv(bad, shard, ok), "UlyssesLayout.heads");

  EXPECT_TRUE(ValidateUnpackQkv(layout, ok, Rows::kReal, {ok, ok, ok}).ok());
  ExpectInvalid(ValidateUnpackQkv(layout, odd, Rows::kReal, {ok, ok, ok}),
                "recv");
  ExpectInvalid(ValidateUnpackQkv(layout, ok, Rows::kPadded, {ok, ok, nullptr}),
                "HeadShardedQkv.v");
  ExpectInvalid(ValidatePackOutput(layout, nullptr, Rows::kReal, ok), "attn");
  ExpectInvalid(ValidatePackOutput(layout, ok, Rows::kReal, odd), "send");
  ExpectInvalid(ValidateUnpackOutput(layout, ok, Rows::kPadded, nullptr),
                "out");
}

TEST(UlyssesLayoutTest, BuffersWithoutElementsMayBeNull) {
  UlyssesLayout layout = Uneven();
  layout.total_tokens = 2;
  layout.rank = 2;  // no real rows
  alignas(16) char buffer[4096] = {};
  EXPECT_TRUE(ValidatePackQkv(layout, {}, buffer).ok());
  EXPECT_TRUE(ValidateUnpackOutput(layout, buffer, Rows::kReal, nullptr).ok());
  layout.total_tokens = 0;
  EXPECT_TRUE(ValidateUnpackQkv(layout, buffer, Rows::kReal, {}).ok());
  EXPECT_TRUE(ValidatePackOutput(layout, nullptr, Rows::kReal, buffer).ok());
}

}  // namespace
}  // namespace dcp::kernels
