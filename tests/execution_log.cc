#include "tests/execution_log.h"

#include <algorithm>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"

namespace dcp::testing_process {
namespace {

ExecutionLine ParseLine(const nlohmann::json& j) {
  ExecutionLine line;
  line.kind = j["kind"].get<std::string>();
  line.epoch = j.value("epoch", int64_t{0});
  line.step = j.value("step", int64_t{0});
  line.rank = j.value("rank", 0);
  line.tokens = j.value("tokens", int64_t{0});
  if (line.kind == "task") {
    line.task_index = j.value("task_index", 0);
    line.group = j.value("group", std::vector<int>{});
    line.samples = j.value("samples", std::vector<int64_t>{});
  } else {
    line.loss = j.value("loss", 0.0);
    line.weights = j.value("weights", "");
    line.start_weights = j.value("start_weights", "");
  }
  return line;
}

// The first line of the file at `path` that contains `text`; "" if none.
std::string FirstLineContaining(const std::string& path,
                                const std::string& text) {
  for (absl::string_view line : absl::StrSplit(ReadFile(path), '\n')) {
    if (absl::StrContains(line, text)) return std::string(line);
  }
  return "";
}

}  // namespace

std::vector<ExecutionLine> ReadExecutionLog(const std::string& path) {
  std::vector<ExecutionLine> out;
  std::istringstream lines(ReadFile(path));
  for (std::string text; std::getline(lines, text);) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("kind")) continue;
    out.push_back(ParseLine(j));
  }
  return out;
}

std::vector<int64_t> LoggedSteps(const std::string& path) {
  std::vector<int64_t> steps;
  for (const ExecutionLine& line : ReadExecutionLog(path)) {
    if (line.kind == "step") steps.push_back(line.step);
  }
  return steps;
}

std::pair<int64_t, int64_t> AbandonedRange(const std::string& line) {
  std::pair<int64_t, int64_t> range{-1, -1};
  const size_t at = line.find("steps [");
  if (at == std::string::npos) return range;
  const std::string rest = line.substr(at + 7, line.find(')', at) - at - 7);
  std::vector<std::string> bounds = absl::StrSplit(rest, ", ");
  if (bounds.size() != 2 || !absl::SimpleAtoi(bounds[0], &range.first) ||
      !absl::SimpleAtoi(bounds[1], &range.second)) {
    ADD_FAILURE() << "cannot read the abandoned steps of: " << line;
    return {-1, -1};
  }
  return range;
}

std::string AwaitLineContaining(const std::string& path,
                                const std::string& text,
                                const std::string& dir, absl::Time deadline) {
  FileActivity activity({dir});
  for (;;) {
    std::string found = FirstLineContaining(path, text);
    if (!found.empty()) return found;
    if (!activity.Await(deadline)) return FirstLineContaining(path, text);
  }
}

std::map<std::pair<int64_t, int>, LoggedTask> LoggedTasks(
    const std::vector<std::string>& logs, const std::set<int64_t>& skip) {
  std::map<std::pair<int64_t, int>, LoggedTask> tasks;
  for (int r = 0; r < static_cast<int>(logs.size()); ++r) {
    for (const ExecutionLine& l : ReadExecutionLog(logs[r])) {
      if (l.kind != "task" || skip.count(l.step) > 0) continue;
      auto [it, fresh] = tasks.try_emplace({l.step, l.task_index});
      LoggedTask& task = it->second;
      if (fresh) {
        task.group = l.group;
        task.samples = l.samples;
        task.tokens = l.tokens;
      }
      EXPECT_EQ(task.group, l.group) << "step " << l.step << " rank " << r;
      EXPECT_EQ(task.samples, l.samples) << "step " << l.step << " rank " << r;
      ++task.runs[r];
    }
  }
  for (const auto& [key, task] : tasks) {
    std::set<int> ranks;
    for (const auto& [r, runs] : task.runs) ranks.insert(r);
    EXPECT_EQ(std::set<int>(task.group.begin(), task.group.end()), ranks)
        << "step " << key.first << " task " << key.second;
  }
  return tasks;
}

std::map<int64_t, std::multiset<int64_t>> SamplesByStep(
    const std::map<std::pair<int64_t, int>, LoggedTask>& tasks) {
  std::map<int64_t, std::multiset<int64_t>> ran;
  for (const auto& [key, task] : tasks) {
    ran[key.first].insert(task.samples.begin(), task.samples.end());
  }
  return ran;
}

void ExpectEachJobStepOnce(
    const std::map<int64_t, std::multiset<int64_t>>& ran,
    const std::vector<std::multiset<int64_t>>& expected,
    const std::vector<std::pair<int64_t, int64_t>>& abandoned) {
  int64_t skipped = 0;
  for (const auto& [from, to] : abandoned) skipped += to - from;
  const auto is_abandoned = [&](int64_t s) {
    return std::any_of(abandoned.begin(), abandoned.end(), [s](const auto& r) {
      return s >= r.first && s < r.second;
    });
  };
  size_t job_step = 0;
  const int64_t steps = static_cast<int64_t>(expected.size()) + skipped;
  for (int64_t s = 0; s < steps; ++s) {
    if (is_abandoned(s)) continue;
    const auto found = ran.find(s);
    EXPECT_TRUE(found != ran.end() && found->second == expected[job_step])
        << "step " << s << " (job step " << job_step
        << "): a sample skipped or trained twice";
    ++job_step;
  }
  EXPECT_EQ(ran.size(), expected.size()) << "a step ran that was not planned";
}

}  // namespace dcp::testing_process
