#include "tests/job_inputs.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "scheduler/planner/plan.h"
#include "scheduler/planner/step_builder.h"
#include "tests/child_process.h"

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

int64_t SkewedLength(int d) {
  if (d < 80) return 64 + 25 * d;
  if (d < 96) return 2000 + 875 * (d - 80);
  return 16000 + 10000 * (d - 96);
}

std::vector<int32_t> ParseTrace(const std::string& text) {
  std::vector<int32_t> lengths;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    int32_t length = 0;
    if (absl::SimpleAtoi(line, &length)) {
      lengths.push_back(length);
    } else {
      ADD_FAILURE() << "not a length: " << line;
    }
  }
  return lengths;
}

std::vector<std::string> JobFlags(const std::string& trace_path,
                                  const std::string& model_path,
                                  const JobShape& shape) {
  std::vector<std::string> flags = {
      "--lengths=" + trace_path,
      "--model_config=" + model_path,
      absl::StrCat("--world_size=", shape.world_size),
      absl::StrCat("--gpus_per_node=", shape.gpus_per_node),
      absl::StrCat("--window=", shape.window),
      absl::StrCat("--tokens_per_step=", shape.tokens_per_step)};
  if (shape.max_steps > 0) {
    flags.push_back(absl::StrCat("--max_steps=", shape.max_steps));
  }
  if (shape.seed != 0) flags.push_back(absl::StrCat("--seed=", shape.seed));
  if (shape.lookahead_steps > 0) {
    flags.push_back(absl::StrCat("--lookahead_steps=", shape.lookahead_steps));
  }
  return flags;
}

std::vector<std::string> WriteJob(const std::string& name,
                                  const std::string& trace,
                                  const std::string& model_name,
                                  const JobShape& shape) {
  const std::string trace_path = TmpPath(name + "-trace.txt");
  const std::string model_path = TmpPath(name + "-model.json");
  EXPECT_TRUE(WriteFile(trace_path, trace)) << trace_path;
  EXPECT_TRUE(WriteFile(model_path, TinyModelJson(model_name))) << model_path;
  return JobFlags(trace_path, model_path, shape);
}

std::vector<std::multiset<int64_t>> BuilderSteps(const std::string& trace,
                                                 const JobShape& shape) {
  StepBuilderOptions options;
  options.tokens_per_step = shape.tokens_per_step;
  if (shape.seed != 0) options.seed = shape.seed;
  const std::vector<int32_t> lengths = ParseTrace(trace);
  absl::StatusOr<std::vector<std::vector<int64_t>>> steps =
      BuildSteps(LengthView(lengths, shape.window), options, shape.max_steps);
  EXPECT_TRUE(steps.ok()) << steps.status();
  std::vector<std::multiset<int64_t>> out;
  if (!steps.ok()) return out;
  for (const auto& s : *steps) out.emplace_back(s.begin(), s.end());
  return out;
}

std::vector<std::string> RankArgs(const std::string& binary,
                                  const std::string& address, int rank,
                                  int world_size, const std::string& log_file) {
  std::vector<std::string> argv = {binary, "--scheduler=" + address,
                                   absl::StrCat("--rank=", rank)};
  if (world_size != 0) {
    argv.push_back(absl::StrCat("--world_size=", world_size));
  }
  if (!log_file.empty()) argv.push_back("--log_file=" + log_file);
  return argv;
}

std::vector<std::string> AgentArgs(const std::string& address, int rank,
                                   int world_size,
                                   const std::string& log_file) {
  return RankArgs(Binary("worker_agent/dcp-agent"), address, rank, world_size,
                  log_file);
}

ServingAgents StartServingAgents(const std::string& name,
                                 const std::string& address, int world,
                                 const std::vector<std::string>& extra_flags) {
  ServingAgents out;
  char dir[] = "/tmp/dcp-serve-XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    ADD_FAILURE() << "mkdtemp failed";
    return out;
  }
  out.dir = dir;
  for (int r = 0; r < world; ++r) {
    out.sockets.push_back(absl::StrCat(out.dir, "/agent-", r, ".sock"));
    std::vector<std::string> argv =
        AgentArgs(address, r, world, /*log_file=*/"");
    argv.insert(argv.end(),
                {"--mode=serve", "--socket=" + out.sockets.back()});
    argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
    out.agents.push_back(Spawn(absl::StrCat(name, "-agent-", r), argv));
    out.argv.push_back(std::move(argv));
  }
  return out;
}

}  // namespace testing_process
}  // namespace dcp
