#include "scheduler/eval/plan_io.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dcp {
namespace {

using ::testing::HasSubstr;

StepPlan SamplePlan() {
  StepPlan plan;
  plan.step = 7;
  plan.samples = {99999999999, 4, 12, 0};
  TaskPlan a;
  a.ranks = {0, 1, 2, 3};
  a.samples = {99999999999, 0};
  a.recompute = 1.0 / 3.0;
  a.loss_weights = {0.1, 2.0 / 7.0};
  a.ulysses = 2;  // two Ulysses pairs in a ring of two
  TaskPlan b;
  b.ranks = {5};
  b.samples = {12, 4};
  b.recompute = 0.25;
  plan.tasks = {a, b};
  plan.predicted_makespan_s = 1.2345678901234567;
  return plan;
}

void ExpectSamePlan(const StepPlan& a, const StepPlan& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_EQ(a.predicted_makespan_s, b.predicted_makespan_s);
  ASSERT_EQ(a.tasks.size(), b.tasks.size());
  for (size_t t = 0; t < a.tasks.size(); ++t) {
    EXPECT_EQ(a.tasks[t].ranks, b.tasks[t].ranks) << "task " << t;
    EXPECT_EQ(a.tasks[t].samples, b.tasks[t].samples) << "task " << t;
    // Exact: the text must read back to the very same doubles.
    EXPECT_EQ(a.tasks[t].recompute, b.tasks[t].recompute) << "task " << t;
    EXPECT_EQ(a.tasks[t].loss_weights, b.tasks[t].loss_weights) << "task " << t;
    EXPECT_EQ(a.tasks[t].ulysses, b.tasks[t].ulysses) << "task " << t;
  }
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/" + name;
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good());
}

TEST(StepPlanJsonTest, WritesTheDocumentedFormat) {
  StepPlan plan;
  plan.step = 3;
  plan.samples = {5, 2};
  plan.tasks.push_back({{0, 1}, {5, 2}, {}, 0.25});
  EXPECT_EQ(StepPlanToJsonLine(plan),
            R"({"step":3,"samples":[5,2],"tasks":[{"ranks":[0,1],)"
            R"("samples":[5,2],"recompute":0.25}]})");
  plan.tasks[0].loss_weights = {0.1, 0.5};
  plan.tasks[0].recompute = 0;
  plan.predicted_makespan_s = 2.5;
  EXPECT_EQ(StepPlanToJsonLine(plan),
            R"({"step":3,"samples":[5,2],"tasks":[{"ranks":[0,1],)"
            R"("samples":[5,2],"recompute":0,"loss_weights":[0.1,0.5]}],)"
            R"("predicted_makespan_s":2.5})");
  // A hybrid task names its Ulysses degree; a plain one leaves it out.
  plan.tasks[0].ulysses = 1;
  plan.tasks[0].loss_weights.clear();
  plan.predicted_makespan_s = 0;
  EXPECT_EQ(StepPlanToJsonLine(plan),
            R"({"step":3,"samples":[5,2],"tasks":[{"ranks":[0,1],)"
            R"("samples":[5,2],"recompute":0,"ulysses":1}]})");
}

TEST(StepPlanJsonTest, IsValidJsonForAnyParser) {
  const std::string line = StepPlanToJsonLine(SamplePlan());
  EXPECT_EQ(line.find('\n'), std::string::npos);
  nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["step"], 7);
  EXPECT_EQ(j["tasks"][1]["ranks"][0], 5);
  EXPECT_EQ(j["tasks"][0]["samples"][0].get<int64_t>(), 99999999999);
}

TEST(StepPlanJsonTest, RoundTripsExactly) {
  const StepPlan plan = SamplePlan();
  absl::StatusOr<StepPlan> back =
      ParseStepPlanJsonLine(StepPlanToJsonLine(plan));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSamePlan(plan, *back);

  // Awkward doubles: each must come back bit for bit.
  StepPlan odd;
  odd.samples = {1};
  odd.tasks.push_back({{0}, {1}, {}, 0.0});
  for (double v : {0.1, 1.0 / 3.0, 5e-324, 1.7976931348623157e308,
                   0.30000000000000004, 1e-7, 123456789.123456789}) {
    odd.tasks[0].loss_weights = {v};
    odd.tasks[0].recompute = v < 1 ? v : 1.0;
    auto parsed = ParseStepPlanJsonLine(StepPlanToJsonLine(odd));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->tasks[0].loss_weights[0], v);
    EXPECT_EQ(parsed->tasks[0].recompute, odd.tasks[0].recompute);
  }
}

TEST(StepPlanJsonTest, ShortestDigits) {
  StepPlan plan;
  plan.tasks.push_back({{0}, {1}, {0.1}, 0.1});
  plan.samples = {1};
  EXPECT_THAT(StepPlanToJsonLine(plan), HasSubstr("\"recompute\":0.1,"));
  EXPECT_THAT(StepPlanToJsonLine(plan), HasSubstr("[0.1]"));
}

TEST(StepPlanJsonTest, IgnoresUnknownFieldsAndAcceptsIntegersAsNumbers) {
  absl::StatusOr<StepPlan> plan = ParseStepPlanJsonLine(
      R"({"step": 2, "epoch": 9, "samples": [3, 1], "tasks": [)"
      R"({"ranks": [4, 5], "group_id": 1, "samples": [1, 3], "recompute": 1,)"
      R"( "micro_steps": [0, 0]}]})");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->step, 2);
  EXPECT_EQ(plan->samples, (std::vector<int64_t>{3, 1}));
  ASSERT_EQ(plan->tasks.size(), 1u);
  EXPECT_EQ(plan->tasks[0].ranks, (std::vector<int>{4, 5}));
  EXPECT_EQ(plan->tasks[0].samples, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(plan->tasks[0].recompute, 1.0);
  EXPECT_TRUE(plan->tasks[0].loss_weights.empty());
  EXPECT_EQ(plan->predicted_makespan_s, 0.0);
}

TEST(StepPlanJsonTest, RejectsBadLinesSayingWhatIsWrong) {
  struct Case {
    std::string line;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {R"({"step": 1, "samples": [1], "tasks": [)", "malformed JSON"},
      {"", "malformed JSON"},
      {R"([1, 2])", "must be a JSON object"},
      {R"({"samples": [], "tasks": []})", "missing \"step\""},
      {R"({"step": "1", "samples": [], "tasks": []})",
       "\"step\" must be a non-negative integer"},
      {R"({"step": -1, "samples": [], "tasks": []})",
       "\"step\" must be a non-negative integer"},
      {R"({"step": 1.5, "samples": [], "tasks": []})",
       "\"step\" must be a non-negative integer"},
      {R"({"step": 1, "tasks": []})", "step 1: missing \"samples\""},
      {R"({"step": 1, "samples": 4, "tasks": []})",
       "\"samples\" must be an array, got 4"},
      {R"({"step": 1, "samples": [1, -2], "tasks": []})",
       "\"samples\"[1] must be a non-negative integer, got -2"},
      {R"({"step": 1, "samples": [1, 2.0], "tasks": []})",
       "\"samples\"[1] must be a non-negative integer"},
      {R"({"step": 1, "samples": [18446744073709551615], "tasks": []})",
       "\"samples\"[0] must be a non-negative integer"},
      {R"({"step": 1, "samples": [1]})", "missing \"tasks\""},
      {R"({"step": 1, "samples": [1], "tasks": {}})",
       "\"tasks\" must be an array"},
      {R"({"step": 1, "samples": [1], "tasks": [3]})",
       "task 0: must be a JSON object"},
      {R"({"step": 1, "samples": [1], "tasks": [{"samples": [1],)"
       R"( "recompute": 0}]})",
       "task 0: missing \"ranks\""},
      {R"({"step": 1, "samples": [1], "tasks": [{"ranks": [0, "x"],)"
       R"( "samples": [1], "recompute": 0}]})",
       "task 0: \"ranks\"[1] must be a non-negative integer, got \"x\""},
      {R"({"step": 1, "samples": [1], "tasks": [{"ranks": [4294967296],)"
       R"( "samples": [1], "recompute": 0}]})",
       "\"ranks\"[0] must be a non-negative integer"},
      {R"({"step": 1, "samples": [1], "tasks": [{"ranks": [0],)"
       R"( "samples": [1]}]})",
       "task 0: missing \"recompute\""},
      {R"({"step": 1, "samples": [1], "tasks": [{"ranks": [0],)"
       R"( "samples": [1], "recompute": "half"}]})",
       "\"recompute\" must be a number, got \"half\""},
      {R"({"step": 1, "samples": [1], "tasks": [{"ranks": [0],)"
       R"( "samples": [1], "recompute": null}]})",
       "\"recompute\" must be a number, got null"},
      {R"({"step": 1, "samples": [1], "tasks": [{"ranks": [0, 1],)"
       R"( "samples": [1], "recompute": 0, "ulysses": 1.5}]})",
       "task 0: \"ulysses\" must be an integer >= 0, got 1.5"},
      {R"({"step": 1, "samples": [1], "tasks": [{"ranks": [0, 1],)"
       R"( "samples": [1], "recompute": 0, "ulysses": -1}]})",
       "\"ulysses\" must be an integer >= 0, got -1"},
      {R"({"step": 1, "samples": [1, 2], "tasks": [{"ranks": [0],)"
       R"( "samples": [1, 2], "recompute": 0, "loss_weights": [0.5]}]})",
       "\"loss_weights\" has 1 entries for 2 samples"},
      {R"({"step": 1, "samples": [1], "tasks": [{"ranks": [0],)"
       R"( "samples": [1], "recompute": 0, "loss_weights": ["a"]}]})",
       "\"loss_weights\"[0] must be a number"},
      {R"({"step": 1, "samples": [1], "tasks": [{"ranks": [0],)"
       R"( "samples": [1], "recompute": 0}], "predicted_makespan_s": "1"})",
       "\"predicted_makespan_s\" must be a number"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<StepPlan> plan = ParseStepPlanJsonLine(c.line);
    ASSERT_FALSE(plan.ok()) << c.line;
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(plan.status().message(), HasSubstr(c.expected)) << c.line;
  }
}

// Found by //fuzz:plan_file_fuzzer: quoting a value this deep in the error
// message overflowed the stack.
TEST(StepPlanJsonTest, RejectsDeeplyNestedLines) {
  const int depth = 100000;
  absl::StatusOr<StepPlan> plan = ParseStepPlanJsonLine(
      R"({"step": )" + std::string(depth, '[') + std::string(depth, ']') + "}");
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(),
              HasSubstr("malformed JSON: nested more than 512 levels deep"));
}

TEST(PlanFileTest, WriterAndReaderRoundTrip) {
  const std::string path = TempPath("round_trip.jsonl");
  std::vector<StepPlan> plans;
  for (int s = 0; s < 3; ++s) {
    StepPlan plan;
    plan.step = s;
    plan.samples = {10 * s + 1, 10 * s + 2};
    plan.tasks.push_back({{0, 1}, {10 * s + 2}, {}, 0.125 * s});
    plan.tasks.push_back({{2}, {10 * s + 1}, {0.5}, 1.0});
    plans.push_back(plan);
  }
  {
    absl::StatusOr<PlanFileWriter> writer = PlanFileWriter::Open(path);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (const StepPlan& plan : plans) {
      ASSERT_TRUE(writer->Write(plan).ok());
    }
    ASSERT_TRUE(writer->Close().ok());
    EXPECT_EQ(writer->Close().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(writer->Write(plans[0]).code(),
              absl::StatusCode::kFailedPrecondition);
  }
  absl::StatusOr<std::vector<StepPlan>> read = ReadPlanFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), plans.size());
  for (size_t i = 0; i < plans.size(); ++i)
    ExpectSamePlan(plans[i], (*read)[i]);

  // One line a step, newline-terminated.
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);
  EXPECT_EQ(text.back(), '\n');
}

TEST(PlanFileTest, MovedWriterKeepsWriting) {
  const std::string path = TempPath("moved.jsonl");
  absl::StatusOr<PlanFileWriter> opened = PlanFileWriter::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  PlanFileWriter writer = std::move(opened).value();
  StepPlan plan;
  plan.samples = {1};
  plan.tasks.push_back({{0}, {1}, {}, 0.0});
  ASSERT_TRUE(writer.Write(plan).ok());
  PlanFileWriter other = std::move(writer);
  plan.step = 1;
  plan.samples = {2};
  plan.tasks[0].samples = {2};
  ASSERT_TRUE(other.Write(plan).ok());
  ASSERT_TRUE(other.Close().ok());
  auto read = ReadPlanFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->size(), 2u);
}

TEST(PlanFileTest, ReaderSkipsBlankLinesAndCarriageReturns) {
  const std::string path = TempPath("blank.jsonl");
  WriteText(path,
            "{\"step\":0,\"samples\":[1],\"tasks\":[{\"ranks\":[0],"
            "\"samples\":[1],\"recompute\":0}]}\r\n"
            "\n   \n"
            "{\"step\":1,\"samples\":[2],\"tasks\":[{\"ranks\":[0],"
            "\"samples\":[2],\"recompute\":0}]}");  // no final newline
  auto read = ReadPlanFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[1].samples, std::vector<int64_t>{2});

  WriteText(path, "");
  auto empty = ReadPlanFile(path);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
}

TEST(PlanFileTest, MalformedLineIsReportedWithItsLineNumber) {
  const std::string path = TempPath("malformed.jsonl");
  WriteText(path,
            "{\"step\":0,\"samples\":[1],\"tasks\":[{\"ranks\":[0],"
            "\"samples\":[1],\"recompute\":0}]}\n"
            "\n"
            "{\"step\":1,\"samples\":[2],\"tasks\":[{\"ranks\":[0],\n");
  absl::Status s = ReadPlanFile(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(path + ":3: malformed JSON"));

  WriteText(path,
            "{\"step\":0,\"samples\":[1],\"tasks\":[{\"ranks\":[0],"
            "\"samples\":[1],\"recompute\":0}]}\n"
            "{\"step\":1,\"samples\":[2],\"tasks\":[{\"ranks\":[0.5],"
            "\"samples\":[2],\"recompute\":0}]}\n");
  s = ReadPlanFile(path).status();
  EXPECT_THAT(s.message(),
              HasSubstr(path + ":2: step 1: task 0: \"ranks\"[0] must be a "
                               "non-negative integer, got 0.5"));
}

TEST(PlanFileTest, SampleInTwoStepsIsRejected) {
  const std::string path = TempPath("duplicate.jsonl");
  WriteText(path,
            "{\"step\":0,\"samples\":[1,2],\"tasks\":[{\"ranks\":[0],"
            "\"samples\":[1,2],\"recompute\":0}]}\n"
            "{\"step\":1,\"samples\":[3],\"tasks\":[{\"ranks\":[0],"
            "\"samples\":[3],\"recompute\":0}]}\n"
            "{\"step\":2,\"samples\":[4,2],\"tasks\":[{\"ranks\":[0],"
            "\"samples\":[4,2],\"recompute\":0}]}\n");
  absl::Status s = ReadPlanFile(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(path + ":3: sample 2 of step 2 already "
                                            "appears in step 0 (line 1)"));

  WriteText(path,
            "{\"step\":0,\"samples\":[1,1],\"tasks\":[{\"ranks\":[0],"
            "\"samples\":[1],\"recompute\":0}]}\n");
  s = ReadPlanFile(path).status();
  EXPECT_THAT(s.message(), HasSubstr(path + ":1: sample 1 is listed twice"));
}

TEST(PlanFileTest, OpenErrorsNameThePath) {
  const std::string missing_dir = TempPath("no/such/dir/plan.jsonl");
  absl::Status open = PlanFileWriter::Open(missing_dir).status();
  EXPECT_EQ(open.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(open.message(), HasSubstr(missing_dir));

  const std::string missing = TempPath("does_not_exist.jsonl");
  absl::Status read = ReadPlanFile(missing).status();
  EXPECT_EQ(read.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(read.message(), HasSubstr(missing));
}

TEST(PlanFileTest, WriteErrorsAreReported) {
  // /dev/full accepts the open and fails every write with ENOSPC; buffering
  // delays the failure to Close at the latest.
  absl::StatusOr<PlanFileWriter> writer = PlanFileWriter::Open("/dev/full");
  if (!writer.ok()) GTEST_SKIP() << "no /dev/full: " << writer.status();
  StepPlan plan;
  plan.samples = {1};
  plan.tasks.push_back({{0}, {1}, {}, 0.0});
  absl::Status status;
  for (int i = 0; i < 3 && status.ok(); ++i) status = writer->Write(plan);
  if (status.ok()) status = writer->Close();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr("/dev/full"));
}

TEST(PlanFileTest, NonFiniteValuesAreRefused) {
  const std::string path = TempPath("non_finite.jsonl");
  absl::StatusOr<PlanFileWriter> writer = PlanFileWriter::Open(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  StepPlan plan;
  plan.step = 4;
  plan.samples = {1};
  plan.tasks.push_back({{0}, {1}, {}, std::nan("")});
  absl::Status s = writer->Write(plan);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("step 4: task 0: recompute"));
  plan.tasks[0].recompute = 0;
  plan.tasks[0].loss_weights = {std::numeric_limits<double>::infinity()};
  EXPECT_EQ(writer->Write(plan).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(writer->Close().ok());
  auto read = ReadPlanFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->empty());

  // What StepPlanToJsonLine writes for them does not read back as a plan.
  plan.tasks[0].recompute = std::nan("");
  EXPECT_FALSE(ParseStepPlanJsonLine(StepPlanToJsonLine(plan)).ok());
}

}  // namespace
}  // namespace dcp
