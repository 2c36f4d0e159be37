#include "common/fnv1a.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace dcp {
namespace {

// The published FNV-1a-64 vectors (the reference code's test suite at
// isthe.com/chongo/tech/comp/fnv): no bytes give the offset basis.
TEST(Fnv1a64Test, MatchesThePublishedVectors) {
  EXPECT_EQ(Fnv1a64Of(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a64Of("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Fnv1a64Of("foobar"), 0x85944171f73967e8ull);
}

TEST(Fnv1a64Test, OneByteIsXorThenMultiplyByThePrime) {
  // The definition's step for the byte 0xff, which a signed char would
  // sign-extend into the high bits.
  const uint64_t expected = (Fnv1a64::kOffsetBasis ^ 0xffu) * Fnv1a64::kPrime;
  EXPECT_EQ(Fnv1a64Of(std::string(1, '\xff')), expected);
}

TEST(Fnv1a64Test, FeedingInPiecesEqualsFeedingAtOnce) {
  Fnv1a64 hash;
  hash.Update("foo");
  hash.Update("");
  hash.Update("bar");
  EXPECT_EQ(hash.digest(), Fnv1a64Of("foobar"));
}

}  // namespace
}  // namespace dcp
