#ifndef DCP_TESTS_JOB_INPUTS_H_
#define DCP_TESTS_JOB_INPUTS_H_

// The files a cross-process test writes for the binaries it runs (a model
// config and a trace of sample lengths), the flags that point the
// binaries at them, the steps the scheduler draws from them, and the
// command lines of the ranks' processes (testonly).

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "tests/child_process.h"

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

/// The size of a test job, as dcp-scheduler's flags say it.
struct JobShape {
  int world_size = 1;
  int gpus_per_node = 1;
  int64_t window = 4096;
  int64_t tokens_per_step = 8192;
  /// 0: no --max_steps (the scheduler plans on until it is stopped).
  int64_t max_steps = 0;
  /// The step builder's --seed; 0: no flag (the scheduler's default).
  uint64_t seed = 0;
  /// --lookahead_steps; 0: no flag (the scheduler's default).
  int lookahead_steps = 0;
};

/// dcp-scheduler's flags for a job of `shape` over the trace at
/// `trace_path` and the model config at `model_path`: --lengths,
/// --model_config, --world_size, --gpus_per_node, --window,
/// --tokens_per_step, and --max_steps, --seed and --lookahead_steps where
/// `shape` sets them. The test appends the rest.
std::vector<std::string> JobFlags(const std::string& trace_path,
                                  const std::string& model_path,
                                  const JobShape& shape);

/// Writes `trace` and `TinyModelJson(model_name)` to "<name>-trace.txt" and
/// "<name>-model.json" under TEST_TMPDIR (a test failure when it cannot)
/// and returns `JobFlags` over them.
///
///   std::vector<std::string> flags = WriteJob(
///       "outage", LcgTrace(400, 11, 100, SkewedLength), "outage-tiny",
///       {/*world_size=*/1, /*gpus_per_node=*/1, /*window=*/4096,
///        /*tokens_per_step=*/8192, /*max_steps=*/6});
std::vector<std::string> WriteJob(const std::string& name,
                                  const std::string& trace,
                                  const std::string& model_name,
                                  const JobShape& shape);

/// The samples of the first `shape.max_steps` steps the scheduler's step
/// builder draws from `trace` (LcgTrace's text) for a job of `shape`, in
/// order: what a job that loses no sample trains (a test failure and no
/// step when the builder fails).
std::vector<std::multiset<int64_t>> BuilderSteps(const std::string& trace,
                                                 const JobShape& shape);

/// The start of the command line of a rank's process, `binary` (a path from
/// the runfiles, `Binary`), for rank `rank` of a world of `world_size`
/// served by the scheduler at `address`, logging its steps to `log_file`:
/// the binary, --scheduler, --rank, --world_size and --log_file, the flags
/// dcp-agent and the client_lib trainers (tests/shrink_trainer) share. The
/// test appends the rest.
///
/// `world_size` 0: no --world_size (the rank learns it when it registers;
/// what a test of a rank that must fail before it registers passes).
/// `log_file` empty: no --log_file (a rank whose steps the test does not
/// read, such as a serve-mode agent's or one that must fail).
std::vector<std::string> RankArgs(const std::string& binary,
                                  const std::string& address, int rank,
                                  int world_size, const std::string& log_file);

/// `RankArgs` of dcp-agent. The test appends the mode and its flags.
///
///   // A rank that must be refused before it registers.
///   AgentArgs("192.0.2.1:50051", /*rank=*/0, /*world_size=*/0, "");
std::vector<std::string> AgentArgs(const std::string& address, int rank,
                                   int world_size, const std::string& log_file);

/// dcp-agent processes in serve mode, one a rank, and the Unix sockets they
/// serve their trainers on.
struct ServingAgents {
  /// The directory of the sockets; the caller removes it once the agents
  /// are gone. Empty when it could not be made.
  std::string dir;
  /// Per rank, the socket's path.
  std::vector<std::string> sockets;
  std::vector<Child> agents;
  /// Per rank, the command line it was started with (to start it again).
  std::vector<std::vector<std::string>> argv;
};

/// Starts `dcp-agent --mode=serve` for ranks 0..world-1 of the scheduler at
/// `address` (`AgentArgs`, no --log_file) on Gloo groups, named
/// "<name>-agent-<rank>", with `extra_flags` last. Socket paths are short
/// (108 bytes), so the sockets are not under TEST_TMPDIR but in a directory
/// of this run's own under /tmp (sandboxes share /tmp and pids); no agent
/// and a test failure when it cannot be made.
ServingAgents StartServingAgents(const std::string& name,
                                 const std::string& address, int world,
                                 const std::vector<std::string>& extra_flags);

}  // namespace testing_process
}  // namespace dcp

#endif  // DCP_TESTS_JOB_INPUTS_H_
