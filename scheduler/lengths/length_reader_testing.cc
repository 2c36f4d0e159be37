#include "scheduler/lengths/length_reader_testing.h"

#include <fstream>

#include "absl/strings/str_cat.h"

namespace dcp {
namespace testing_lengths {

std::string WriteFile(absl::string_view name, absl::string_view contents) {
  std::string path = absl::StrCat(::testing::TempDir(), "/", name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), contents.size());
  out.close();
  EXPECT_TRUE(out.good()) << path;
  return path;
}

LengthSourceOptions Source(const std::string& path, LengthFormat format) {
  LengthSourceOptions options;
  options.path = path;
  options.format = format;
  return options;
}

absl::StatusOr<std::vector<int32_t>> ReadAll(const std::string& path,
                                             LengthFormat format) {
  return ReadAllLengths(Source(path, format));
}

std::vector<int64_t> ReadInBatches(LengthReader& reader, size_t batch_size,
                                   std::vector<size_t>* sizes) {
  std::vector<int64_t> batch = {99, 98, 97, 96};  // NextBatch clears it.
  std::vector<int64_t> all;
  for (;;) {
    absl::StatusOr<size_t> n = reader.NextBatch(batch_size, &batch);
    EXPECT_TRUE(n.ok()) << n.status();
    if (!n.ok()) break;
    EXPECT_EQ(batch.size(), *n);
    sizes->push_back(*n);
    all.insert(all.end(), batch.begin(), batch.end());
    if (*n == 0) break;
  }
  return all;
}

}  // namespace testing_lengths
}  // namespace dcp
