#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/lengths/length_reader.h"
#include "scheduler/lengths/length_reader_testing.h"

namespace dcp {
namespace {

using ::dcp::testing_lengths::Bytes;
using ::dcp::testing_lengths::ExpectError;
using ::dcp::testing_lengths::ReadAll;
using ::dcp::testing_lengths::Scalar;
using ::dcp::testing_lengths::Source;
using ::dcp::testing_lengths::WriteFile;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// A minimal Megatron-LM MMIDIDX writer, one document per sequence.
std::string IdxBytes(const std::vector<int32_t>& lengths, uint64_t version = 1,
                     uint8_t dtype_code = 8) {
  std::string out("MMIDIDX\0\0", 9);
  out += Scalar<uint64_t>(version);
  out += Scalar<uint8_t>(dtype_code);
  out += Scalar<uint64_t>(lengths.size());
  out += Scalar<uint64_t>(lengths.size() + 1);
  out += Bytes(lengths);
  std::vector<int64_t> pointers;
  int64_t pointer = 0;
  for (int32_t length : lengths) {
    pointers.push_back(pointer);
    pointer += int64_t{length} * 2;
  }
  out += Bytes(pointers);
  std::vector<int64_t> documents;
  for (size_t i = 0; i <= lengths.size(); ++i) documents.push_back(i);
  out += Bytes(documents);
  return out;
}

TEST(MegatronIdxTest, ReadsSequenceLengths) {
  const std::string path = WriteFile("basic.idx", IdxBytes({5, 1024, 3, 77}));
  absl::StatusOr<std::unique_ptr<LengthReader>> reader =
      LengthReader::Open(Source(path, LengthFormat::kMegatronIdx));
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->SizeHint(), 4);
  auto lengths = ReadAll(path, LengthFormat::kMegatronIdx);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_THAT(*lengths, ElementsAre(5, 1024, 3, 77));

  auto empty =
      ReadAll(WriteFile("empty.idx", IdxBytes({})), LengthFormat::kMegatronIdx);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_THAT(*empty, IsEmpty());
}

TEST(MegatronIdxTest, BadFilesNameTheByteOffset) {
  std::string magic = IdxBytes({1, 2});
  magic[0] = 'X';
  ExpectError(
      ReadAll(WriteFile("magic.idx", magic), LengthFormat::kMegatronIdx),
      {"magic.idx: byte offset 0: bad magic"});
  ExpectError(ReadAll(WriteFile("version.idx", IdxBytes({1, 2}, 2)),
                      LengthFormat::kMegatronIdx),
              {"version.idx: byte offset 9: unsupported version 2"});
  ExpectError(ReadAll(WriteFile("dtype.idx", IdxBytes({1, 2}, 1, 42)),
                      LengthFormat::kMegatronIdx),
              {"dtype.idx: byte offset 17: unknown dtype code 42"});
  ExpectError(ReadAll(WriteFile("header.idx", IdxBytes({1, 2}).substr(0, 20)),
                      LengthFormat::kMegatronIdx),
              {"header.idx: byte offset 20: truncated header"});
  // Two int32 lengths need bytes [34, 42); cut inside them.
  ExpectError(ReadAll(WriteFile("lengths.idx", IdxBytes({1, 2}).substr(0, 40)),
                      LengthFormat::kMegatronIdx),
              {"lengths.idx: byte offset 40: truncated sequence lengths",
               "from byte offset 34"});
  // Cut inside the pointers that follow the lengths.
  ExpectError(ReadAll(WriteFile("pointers.idx", IdxBytes({1, 2}).substr(0, 50)),
                      LengthFormat::kMegatronIdx),
              {"pointers.idx: byte offset 50: truncated sequence pointers",
               "from byte offset 42"});
  ExpectError(ReadAll(WriteFile("zero.idx", IdxBytes({4, 0})),
                      LengthFormat::kMegatronIdx),
              {"zero.idx: byte offset 38: element 1: length must be positive"});
}

}  // namespace
}  // namespace dcp
