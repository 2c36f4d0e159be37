#ifndef DCP_TESTS_JOB_INPUTS_H_
#define DCP_TESTS_JOB_INPUTS_H_

// The files a cross-process test writes for the binaries it runs: a model
// config and a trace of sample lengths (testonly).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dcp {
namespace testing_process {

/// A `--model_config` file's text: a tiny causal transformer named `name`,
/// which is not built in (the agents cannot know its shape from its name).
/// One layer, hidden 256, 8 heads and 8 KV heads (so groups of 1, 2, 4 and
/// 8 ranks), FFN 512, vocabulary 1000.
std::string TinyModelJson(const std::string& name);

/// A `--lengths` file's text: `n` sample lengths, one a line, the same on
/// every platform. The i-th is `length(d)` for the i-th draw `d` in
/// [0, `range`) of a 64-bit LCG (Knuth's MMIX constants) seeded with
/// `seed`; `length` gives the trace its skew.
///
///   // 90% short samples, 10% long ones.
///   LcgTrace(3000, 12345, 100,
///            [](int d) { return d < 90 ? 64 + d * 20 : 4000 + d * 40; });
std::string LcgTrace(int n, uint64_t seed, int range,
                     const std::function<int64_t(int)>& length);

/// A skew for LcgTrace's `range` 100 that stresses a 32K window: 80% short
/// samples (64 to 2,039 tokens), 16% medium (2,000 to 15,125), 4% beyond
/// the window (16,000 to 46,000).
int64_t SkewedLength(int d);

/// The lengths of a trace LcgTrace wrote (a line that is no integer fails
/// the test and is left out).
std::vector<int32_t> ParseTrace(const std::string& text);

}  // namespace testing_process
}  // namespace dcp

#endif  // DCP_TESTS_JOB_INPUTS_H_
