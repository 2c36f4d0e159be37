#include "tests/job_inputs.h"

#include "absl/strings/str_cat.h"

namespace dcp {
namespace testing_process {

std::string TinyModelJson(const std::string& name) {
  return absl::StrCat(
      R"({"name": ")", name, R"(", "layers": 1, "hidden": 256,)",
      R"( "heads": 8, "kv_heads": 8, "ffn": 512, "vocab": 1000,)",
      R"( "causal": true})");
}

std::string LcgTrace(int n, uint64_t seed, int range,
                     const std::function<int64_t(int)>& length) {
  std::string out;
  uint64_t x = seed;
  for (int i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    const int d = static_cast<int>((x >> 33) % static_cast<uint64_t>(range));
    absl::StrAppend(&out, length(d), "\n");
  }
  return out;
}

}  // namespace testing_process
}  // namespace dcp
