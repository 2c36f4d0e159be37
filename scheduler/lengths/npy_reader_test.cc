#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/lengths/length_reader.h"
#include "scheduler/lengths/length_reader_testing.h"

namespace dcp {
namespace {

using ::dcp::testing_lengths::Bytes;
using ::dcp::testing_lengths::ExpectError;
using ::dcp::testing_lengths::ReadAll;
using ::dcp::testing_lengths::ReadInBatches;
using ::dcp::testing_lengths::Scalar;
using ::dcp::testing_lengths::Source;
using ::dcp::testing_lengths::WriteFile;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::IsEmpty;

// A minimal .npy writer: `shape` is the Python tuple text, e.g. "(3,)".
std::string NpyBytes(absl::string_view descr, absl::string_view shape,
                     absl::string_view data, int major = 1,
                     bool fortran_order = false) {
  std::string header =
      absl::StrCat("{'descr': '", descr,
                   "', 'fortran_order': ", fortran_order ? "True" : "False",
                   ", 'shape': ", shape, ", }");
  const size_t prefix = 8 + (major == 1 ? 2 : 4);
  const size_t unpadded = prefix + header.size() + 1;
  header.append((unpadded + 63) / 64 * 64 - unpadded, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  if (major == 1) {
    out += Scalar<uint16_t>(header.size());
  } else {
    out += Scalar<uint32_t>(header.size());
  }
  return absl::StrCat(out, header, data);
}

// The data offset of an `NpyBytes` file: its header is padded to 64 bytes
// whenever it fits.
constexpr size_t kNpyDataOffset = 128;

TEST(NpyLengthTest, ReadsEveryDtypeAndVersion) {
  const std::vector<int> values = {1, 300, 65535, 4096};
  for (int major : {1, 2, 3}) {
    for (const std::string descr : {"<i4", "<i8", "<u4", "<u2"}) {
      std::string data;
      if (descr == "<i4")
        data = Bytes(std::vector<int32_t>(values.begin(), values.end()));
      if (descr == "<i8")
        data = Bytes(std::vector<int64_t>(values.begin(), values.end()));
      if (descr == "<u4")
        data = Bytes(std::vector<uint32_t>(values.begin(), values.end()));
      if (descr == "<u2")
        data = Bytes(std::vector<uint16_t>(values.begin(), values.end()));
      const std::string path =
          WriteFile(absl::StrCat("v", major, "_", descr.substr(1), ".npy"),
                    NpyBytes(descr, "(4,)", data, major));
      SCOPED_TRACE(path);
      absl::StatusOr<std::unique_ptr<LengthReader>> reader =
          LengthReader::Open(Source(path, LengthFormat::kNpy));
      ASSERT_TRUE(reader.ok()) << reader.status();
      EXPECT_EQ((*reader)->SizeHint(), 4);
      auto lengths = ReadAll(path, LengthFormat::kNpy);
      ASSERT_TRUE(lengths.ok()) << lengths.status();
      EXPECT_THAT(*lengths, ElementsAreArray(values));
    }
  }
}

TEST(NpyLengthTest, AcceptsFortranOrderAndEmptyArrays) {
  auto fortran = ReadAll(
      WriteFile("fortran.npy",
                NpyBytes("<i8", "(2,)", Bytes(std::vector<int64_t>{8, 9}), 1,
                         /*fortran_order=*/true)),
      LengthFormat::kNpy);
  ASSERT_TRUE(fortran.ok()) << fortran.status();
  EXPECT_THAT(*fortran, ElementsAre(8, 9));

  auto empty = ReadAll(WriteFile("empty.npy", NpyBytes("<i4", "(0,)", "")),
                       LengthFormat::kNpy);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_THAT(*empty, IsEmpty());
}

TEST(NpyLengthTest, StreamsInBatches) {
  std::vector<int32_t> values;
  for (int i = 1; i <= 10; ++i) values.push_back(i * 10);
  absl::StatusOr<std::unique_ptr<LengthReader>> reader = LengthReader::Open(
      Source(WriteFile("stream.npy", NpyBytes("<i4", "(10,)", Bytes(values))),
             LengthFormat::kNpy));
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->SizeHint(), 10);
  std::vector<size_t> sizes;
  const std::vector<int64_t> all = ReadInBatches(**reader, 3, &sizes);
  EXPECT_THAT(sizes, ElementsAre(3, 3, 3, 1, 0));
  EXPECT_THAT(all, ElementsAre(10, 20, 30, 40, 50, 60, 70, 80, 90, 100));
}

TEST(NpyLengthTest, BadFilesNameTheByteOffset) {
  const std::string ints = Bytes(std::vector<int32_t>{1, 2, 3});
  ExpectError(
      ReadAll(WriteFile("magic.npy", "NOTNUMPY" + ints), LengthFormat::kNpy),
      {"magic.npy: byte offset 0: bad magic"});
  ExpectError(ReadAll(WriteFile("tiny.npy", "\x93NU"), LengthFormat::kNpy),
              {"tiny.npy: byte offset 0: bad magic"});
  std::string version = NpyBytes("<i4", "(3,)", ints);
  version[6] = 4;
  ExpectError(ReadAll(WriteFile("version.npy", version), LengthFormat::kNpy),
              {"version.npy: byte offset 6: unsupported .npy format version "
               "4.0"});

  // The header declares 10 values; only 3 are there.
  const std::string truncated = NpyBytes("<i4", "(10,)", ints);
  ExpectError(
      ReadAll(WriteFile("truncated.npy", truncated), LengthFormat::kNpy),
      {absl::StrCat("truncated.npy: byte offset ", truncated.size(),
                    ": truncated data"),
       absl::StrCat("from byte offset ", kNpyDataOffset)});
  const std::string cut_header = NpyBytes("<i4", "(3,)", ints).substr(0, 40);
  ExpectError(
      ReadAll(WriteFile("cut_header.npy", cut_header), LengthFormat::kNpy),
      {"cut_header.npy: byte offset 40: truncated header"});

  ExpectError(ReadAll(WriteFile("float.npy", NpyBytes("<f4", "(3,)", ints)),
                      LengthFormat::kNpy),
              {"float.npy: byte offset", "unsupported dtype \"<f4\""});
  ExpectError(ReadAll(WriteFile("big.npy", NpyBytes(">i4", "(3,)", ints)),
                      LengthFormat::kNpy),
              {"big.npy: byte offset", "big-endian dtype '>i4'"});
  ExpectError(
      ReadAll(WriteFile("two_d.npy", NpyBytes("<i4", "(1, 3)", ints)),
              LengthFormat::kNpy),
      {"two_d.npy: byte offset 10: expected a 1-D array, got shape (1, 3)"});
  ExpectError(ReadAll(WriteFile("scalar.npy", NpyBytes("<i4", "()", ints)),
                      LengthFormat::kNpy),
              {"scalar.npy", "expected a 1-D array, got shape ()"});
  ExpectError(ReadAll(WriteFile("garbled.npy", NpyBytes("<i4", "[3]", ints)),
                      LengthFormat::kNpy),
              {"garbled.npy: byte offset", "malformed .npy header"});
}

TEST(NpyLengthTest, BadValuesNameTheByteOffset) {
  ExpectError(ReadAll(WriteFile("zero.npy",
                                NpyBytes("<i8", "(3,)",
                                         Bytes(std::vector<int64_t>{5, 6, 0}))),
                      LengthFormat::kNpy),
              {absl::StrCat("zero.npy: byte offset ", kNpyDataOffset + 16,
                            ": element 2: length must be positive, got 0")});
  ExpectError(
      ReadAll(WriteFile("huge.npy",
                        NpyBytes("<u4", "(2,)",
                                 Bytes(std::vector<uint32_t>{1, 3000000000u}))),
              LengthFormat::kNpy),
      {absl::StrCat("huge.npy: byte offset ", kNpyDataOffset + 4,
                    ": element 1: length 3000000000 is larger than the int32 "
                    "maximum")});
}

}  // namespace
}  // namespace dcp
