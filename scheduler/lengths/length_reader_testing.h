#ifndef DCP_SCHEDULER_LENGTHS_LENGTH_READER_TESTING_H_
#define DCP_SCHEDULER_LENGTHS_LENGTH_READER_TESTING_H_

// What the per-format tests of scheduler/lengths share: writing input files,
// reading them back, and checking errors.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/lengths/length_reader.h"

namespace dcp {
namespace testing_lengths {

/// Writes `contents` to a fresh file under the test's temporary directory
/// and returns its path.
std::string WriteFile(absl::string_view name, absl::string_view contents);

/// The little-endian bytes of `values` (the host is little-endian).
template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) memcpy(&out[0], values.data(), out.size());
  return out;
}

template <typename T>
std::string Scalar(T value) {
  return Bytes(std::vector<T>{value});
}

/// Options for reading `path` as `format`, the rest left at their defaults.
LengthSourceOptions Source(const std::string& path, LengthFormat format);

/// Reads a whole source with `ReadAllLengths`.
absl::StatusOr<std::vector<int32_t>> ReadAll(const std::string& path,
                                             LengthFormat format);

/// Reads `reader` to the end, `batch_size` lengths a call, checking that
/// each call fills its output (cleared first) with as many as it says.
/// Appends each call's count to `sizes`, the final 0 included.
std::vector<int64_t> ReadInBatches(LengthReader& reader, size_t batch_size,
                                   std::vector<size_t>* sizes);

/// Expects `result` to fail with `code` and a message containing every one
/// of `parts`.
template <typename T>
void ExpectError(const absl::StatusOr<T>& result,
                 const std::vector<std::string>& parts,
                 absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  ASSERT_FALSE(result.ok()) << "expected an error containing " << parts[0];
  EXPECT_EQ(result.status().code(), code) << result.status();
  for (const std::string& part : parts) {
    EXPECT_THAT(std::string(result.status().message()),
                ::testing::HasSubstr(part));
  }
}

}  // namespace testing_lengths
}  // namespace dcp

#endif  // DCP_SCHEDULER_LENGTHS_LENGTH_READER_TESTING_H_
