#include "tests/execution_log.h"

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

}  // namespace dcp::testing_process
