// dcp-train end to end: the real binary trains the same steps in one process
// (--mode=single) and as a dcp job on this host (--mode=dcp --local_world=4:
// a scheduler in its process, four rank processes on real Gloo groups), in
// float64, and both loss logs agree step by step; with a model of 2 heads
// the job also runs sequences over all 4 ranks as Ulysses inside a ring;
// bad flags are refused with a message naming the flag; its default data
// files are found from any working directory; and the training loops
// docs/TRAINING.md quotes are the ones examples/dcp_train_main.cc runs.

#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;
using testing_process::Binary;
using testing_process::Child;

constexpr int kSteps = 8;
constexpr double kLossTolerance = 1e-7;  // Relative, float64.

struct LogLine {
  int64_t step = 0;
  double loss = 0;
  double grad_norm = 0;
  int64_t tokens = 0;
};

std::vector<LogLine> ReadLossLog(const std::string& path) {
  std::vector<LogLine> out;
  for (absl::string_view line : absl::StrSplit(testing_process::ReadFile(path),
                                               '\n', absl::SkipEmpty())) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_TRUE(j.is_object()) << path << ": " << line;
    if (!j.is_object()) return out;
    out.push_back({j.at("step").get<int64_t>(), j.at("loss").get<double>(),
                   j.at("grad_norm").get<double>(),
                   j.at("tokens").get<int64_t>()});
  }
  return out;
}

// The job's trace, model and batch shape.
struct Job {
  std::string lengths = "data/lengths/wikipedia.txt";
  std::string model_config = "data/models/cpu-tiny.json";
  int64_t window = 128;
  int64_t tokens_per_step = 512;
};

// dcp-train on `job` (the bundled trace and CPU model by default), `flags`
// last.
std::vector<std::string> TrainArgv(const std::vector<std::string>& flags,
                                   const Job& job = Job()) {
  std::vector<std::string> argv = {
      Binary("examples/dcp-train"),
      "--lengths=" + Binary(job.lengths),
      "--model_config=" + Binary(job.model_config),
      absl::StrCat("--window=", job.window),
      absl::StrCat("--tokens_per_step=", job.tokens_per_step),
      absl::StrCat("--steps=", kSteps),
      "--seed=3",
      "--dtype=float64"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return argv;
}

// Runs `job` in one process (`single_flags` added) and as a dcp job of 4
// ranks (`dcp_flags` added), both at once to keep the test short, and
// expects both to exit 0; the runs, the dcp one second.
std::vector<Child> RunBothWays(const Job& job,
                               const std::vector<std::string>& single_flags,
                               const std::vector<std::string>& dcp_flags) {
  std::vector<std::string> single = {"--mode=single"};
  single.insert(single.end(), single_flags.begin(), single_flags.end());
  std::vector<std::string> dcp = {"--mode=dcp", "--local_world=4"};
  dcp.insert(dcp.end(), dcp_flags.begin(), dcp_flags.end());
  std::vector<Child> runs;
  {
    // Kills what still runs when the wait gives up.
    testing_process::ChildReaper reaper({&runs});
    runs.push_back(testing_process::Spawn("single", TrainArgv(single, job)));
    runs.push_back(testing_process::Spawn("dcp", TrainArgv(dcp, job)));
    EXPECT_TRUE(testing_process::ExpectAllExit(
        runs, absl::Now() + absl::Minutes(4), "dcp-train"));
  }
  for (const Child& run : runs) {
    EXPECT_EQ(run.exit_code, 0) << testing_process::Describe(runs);
  }
  return runs;
}

// The two loss logs hold kSteps steps of the same batches, and the same
// losses and gradient norms within kLossTolerance.
void ExpectTheSameLosses(const std::string& single_log,
                         const std::string& dcp_log) {
  const std::vector<LogLine> want = ReadLossLog(single_log);
  const std::vector<LogLine> got = ReadLossLog(dcp_log);
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("step ", i));
    EXPECT_EQ(got[i].step, static_cast<int64_t>(i));
    EXPECT_EQ(want[i].step, static_cast<int64_t>(i));
    // The same batch: the same tokens, and then the same loss and gradient.
    EXPECT_EQ(got[i].tokens, want[i].tokens);
    EXPECT_GT(want[i].tokens, 0);
    EXPECT_LE(std::fabs(got[i].loss - want[i].loss),
              kLossTolerance * std::fabs(want[i].loss))
        << got[i].loss << " vs " << want[i].loss;
    EXPECT_LE(std::fabs(got[i].grad_norm - want[i].grad_norm),
              kLossTolerance * std::fabs(want[i].grad_norm))
        << got[i].grad_norm << " vs " << want[i].grad_norm;
  }
}

TEST(DcpTrainCliTest, OneProcessAndADcpJobLogTheSameLosses) {
  const std::string single_log = testing_process::TmpPath("single.jsonl");
  const std::string dcp_log = testing_process::TmpPath("dcp.jsonl");
  const std::vector<Child> runs = RunBothWays(
      Job(), {"--loss_log=" + single_log}, {"--loss_log=" + dcp_log});
  if (::testing::Test::HasFailure()) return;
  ExpectTheSameLosses(single_log, dcp_log);
  // The job ran tasks over sequence-parallel groups, not only data
  // parallelism (the launcher's last line counts the steps that had any).
  const std::string dcp_err = testing_process::ReadFile(runs[1].err_path);
  std::smatch match;
  ASSERT_TRUE(std::regex_search(
      dcp_err, match,
      std::regex("4 ranks trained 8 steps .*\\(([0-9]+) of 8 steps used "
                 "sequence-parallel groups\\)")))
      << dcp_err;
  EXPECT_GT(std::stoi(match[1].str()), 0) << match[0];
}

// A model of 2 heads on 4 ranks, over the long-context trace at 1,024 tokens
// a step (a step is mostly one sequence): llama3-8b's costs with those heads
// spread a sequence over all 4 ranks, more ranks than heads, so the task
// runs 2-way Ulysses inside a ring of 2 (or, for a short one, a ring of 4),
// and the losses are still those of one process. The one process plans for
// 4 ranks as well (--world_size): with 2 kv heads of 2, llama3-8b's weights
// and optimizer state would not fit one GPU, and its planner refuses a world
// of 1. The plan changes how a step is packed, not which samples it holds.
TEST(DcpTrainCliTest, SequencesSpreadPastTheHeadsRunUlyssesInsideRings) {
  constexpr int kWorld = 4;
  Job job;
  job.lengths = "data/lengths/longctx_wlb.txt";
  job.model_config = "data/models/cpu-tiny-2-heads.json";
  job.window = 1024;
  job.tokens_per_step = 1024;
  const nlohmann::json model = nlohmann::json::parse(
      testing_process::ReadFile(Binary(job.model_config)), nullptr, false);
  ASSERT_TRUE(model.is_object()) << job.model_config;
  const int heads = model.at("heads").get<int>();
  // A group of the whole world is then a ring of Ulysses groups of `heads`.
  ASSERT_LT(heads, kWorld);
  ASSERT_EQ(kWorld % heads, 0);

  const std::string single_log = testing_process::TmpPath("single2.jsonl");
  const std::string dcp_log = testing_process::TmpPath("dcp2.jsonl");
  const std::string plan_log = testing_process::TmpPath("plans2.jsonl");
  const std::vector<Child> runs = RunBothWays(
      job, {absl::StrCat("--world_size=", kWorld), "--loss_log=" + single_log},
      {"--loss_log=" + dcp_log, "--plan_log=" + plan_log});
  if (::testing::Test::HasFailure()) return;
  ExpectTheSameLosses(single_log, dcp_log);

  // Tasks by (group size, Ulysses degree), from the scheduler's plans.
  const std::string plans = testing_process::ReadFile(plan_log);
  std::map<std::pair<int, int>, int> shapes;
  int64_t steps = 0;
  for (absl::string_view line :
       absl::StrSplit(plans, '\n', absl::SkipEmpty())) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object()) << line;
    EXPECT_EQ(j.at("step").get<int64_t>(), steps) << line;
    ++steps;
    for (const nlohmann::json& task : j.at("tasks")) {
      const int p = task.at("group_size").get<int>();
      const int u = task.at("ulysses").get<int>();
      ASSERT_GT(u, 0) << line;
      EXPECT_EQ(heads % u, 0) << line;
      EXPECT_EQ(p % u, 0) << line;
      ++shapes[{p, u}];
    }
  }
  EXPECT_EQ(steps, kSteps) << plans;
  const int hybrid = shapes[{kWorld, heads}];
  EXPECT_GT(hybrid, 0) << "no task of " << kWorld << " ranks with u = " << heads
                       << ":\n"
                       << plans;
  // The launcher's last line counts them too.
  const std::string dcp_err = testing_process::ReadFile(runs[1].err_path);
  std::smatch match;
  ASSERT_TRUE(std::regex_search(
      dcp_err, match,
      std::regex(absl::StrCat("planned tasks by group: .*", kWorld,
                              " ranks \\(u=", heads, ", ring of ",
                              kWorld / heads, "\\): ([0-9]+)"))))
      << dcp_err;
  EXPECT_EQ(std::stoi(match[1].str()), hybrid) << match[0];
}

// Runs dcp-train with `flags` to its end; its exit code and stderr.
std::pair<int, std::string> RunToExit(const std::string& name,
                                      const std::vector<std::string>& flags) {
  std::vector<Child> run = {testing_process::Spawn(name, TrainArgv(flags))};
  if (!testing_process::ExpectAllExit(run, absl::Now() + absl::Seconds(60),
                                      name)) {
    return {-1, ""};
  }
  return {run[0].exit_code, testing_process::ReadFile(run[0].err_path)};
}

TEST(DcpTrainCliTest, BadFlagsAreNamed) {
  const struct {
    std::vector<std::string> flags;
    std::string named;
  } cases[] = {
      {{"--mode=bogus"}, "--mode=bogus"},
      {{"--mode=single", "--lengths=/nonexistent/trace.txt"},
       "--lengths=/nonexistent/trace.txt"},
      {{"--mode=single", "--dtype=float16"}, "--dtype=float16"},
      {{"--mode=single", "--text=/nonexistent/text"},
       "--text=/nonexistent/text"},
      {{"--mode=dcp", "--local_world=4", "--model_config=/nonexistent.json"},
       "--model_config=/nonexistent.json"},
      {{"--mode=dcp"}, "--scheduler"},
      {{"--mode=single", "--plan_log=/tmp/plans.jsonl"}, "--plan_log"},
      {{"--mode=dcp", "--local_world=4", "--plan_log=/nonexistent/plans.jsonl"},
       "--plan_log=/nonexistent/plans.jsonl"},
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    SCOPED_TRACE(absl::StrJoin(cases[i].flags, " "));
    const auto [code, err] = RunToExit(absl::StrCat("bad", i), cases[i].flags);
    EXPECT_EQ(code, 1) << err;
    EXPECT_THAT(err, HasSubstr(cases[i].named));
  }
}

TEST(DcpTrainCliTest, ItsDefaultsWorkFromAnyDirectory) {
  // No --lengths, no --model_config, run from a folder with no data/ and
  // outside Bazel's environment: the binary finds the bundled files itself.
  const std::string away = testing_process::TmpPath("away");
  std::vector<Child> run = {testing_process::Spawn(
      "away",
      {"/usr/bin/env", "-u", "RUNFILES_DIR", "-u", "BUILD_WORKING_DIRECTORY",
       "/bin/sh", "-c", "mkdir -p \"$1\" && cd \"$1\" && exec \"$2\" --steps=2",
       "sh", away, Binary("examples/dcp-train")})};
  ASSERT_TRUE(testing_process::ExpectAllExit(
      run, absl::Now() + absl::Seconds(60), "away"));
  const std::string err = testing_process::ReadFile(run[0].err_path);
  EXPECT_EQ(run[0].exit_code, 0) << err;
  EXPECT_THAT(err, HasSubstr("one process: 2 steps"));
}

// The lines of a ```diff block on the side `side` ('-' old, '+' new): its
// context lines and those marked `side`, without their marks.
std::string DiffSide(const std::vector<absl::string_view>& diff, char side) {
  std::vector<std::string> lines;
  for (absl::string_view line : diff) {
    if (line.empty() || line[0] == ' ' || line[0] == side) {
      lines.emplace_back(line.empty() ? line : line.substr(1));
    }
  }
  return absl::StrCat(absl::StrJoin(lines, "\n"), "\n");
}

TEST(DcpTrainCliTest, ReadmeQuotesTheTrainingLoopsOfTheBinary) {
  const std::string readme =
      testing_process::ReadFile(Binary("docs/TRAINING.md"));
  const std::string source =
      testing_process::ReadFile(Binary("examples/dcp_train_main.cc"));
  ASSERT_FALSE(source.empty());
  const size_t begin = readme.find("```diff\n");
  ASSERT_NE(begin, std::string::npos)
      << "docs/TRAINING.md has no ```diff block";
  const size_t end = readme.find("\n```", begin + 8);
  ASSERT_NE(end, std::string::npos);
  const std::vector<absl::string_view> diff = absl::StrSplit(
      absl::string_view(readme).substr(begin + 8, end - begin - 8), '\n');
  // Each side is a run of lines the binary holds as they are.
  EXPECT_THAT(source, HasSubstr(DiffSide(diff, '-')));
  EXPECT_THAT(source, HasSubstr(DiffSide(diff, '+')));
  EXPECT_THAT(DiffSide(diff, '-'), HasSubstr("trainer->ReferenceStep(plan)"));
  EXPECT_THAT(DiffSide(diff, '+'), HasSubstr("client->NextStep()"));
}

}  // namespace
}  // namespace dcp
