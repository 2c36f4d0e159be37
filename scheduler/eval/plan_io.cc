#include "scheduler/eval/plan_io.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_depth.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace dcp {
namespace {

using Json = nlohmann::json;

// The shortest of %.15g, %.16g, %.17g that reads back to `value`.
void AppendDouble(std::string* out, double value) {
  if (!std::isfinite(value)) {
    out->append("null");
    return;
  }
  char buffer[32];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (precision == 17 || std::strtod(buffer, nullptr) == value) break;
  }
  out->append(buffer);
}

template <typename T>
void AppendIntArray(std::string* out, const std::vector<T>& values) {
  out->push_back('[');
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out->push_back(',');
    absl::StrAppend(out, values[i]);
  }
  out->push_back(']');
}

// A short rendering of a JSON value for error messages.
std::string Show(const Json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

absl::Status Invalid(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, what));
}

// Reads `object[key]` as an array of non-negative integers of type T.
template <typename T>
absl::Status ReadIndexArray(const Json& object, const char* key,
                            absl::string_view where, std::vector<T>* out) {
  auto it = object.find(key);
  if (it == object.end()) {
    return Invalid(where, absl::StrCat("missing \"", key, "\""));
  }
  if (!it->is_array()) {
    return Invalid(
        where, absl::StrCat("\"", key, "\" must be an array, got ", Show(*it)));
  }
  out->clear();
  out->reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& v = (*it)[i];
    bool ok = false;
    if (v.is_number_unsigned()) {
      ok = v.get<uint64_t>() <=
           static_cast<uint64_t>(std::numeric_limits<T>::max());
    } else if (v.is_number_integer()) {
      ok = v.get<int64_t>() >= 0 &&
           v.get<int64_t>() <=
               static_cast<int64_t>(std::numeric_limits<T>::max());
    }
    if (!ok) {
      return Invalid(
          where,
          absl::StrCat("\"", key, "\"[", i,
                       "] must be a non-negative integer, got ", Show(v)));
    }
    out->push_back(static_cast<T>(v.get<int64_t>()));
  }
  return absl::OkStatus();
}

absl::Status ReadNumber(const Json& value, absl::string_view where,
                        absl::string_view name, double* out) {
  if (!value.is_number()) {
    return Invalid(where,
                   absl::StrCat(name, " must be a number, got ", Show(value)));
  }
  *out = value.get<double>();
  return absl::OkStatus();
}

absl::Status CheckFinite(const StepPlan& plan) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", plan.step, ": ", what,
                     " is not finite; a plan file cannot "
                     "hold it"));
  };
  if (!std::isfinite(plan.predicted_makespan_s)) {
    return bad("predicted_makespan_s");
  }
  for (size_t t = 0; t < plan.tasks.size(); ++t) {
    const TaskPlan& task = plan.tasks[t];
    if (!std::isfinite(task.recompute)) {
      return bad(absl::StrCat("task ", t, ": recompute"));
    }
    for (double w : task.loss_weights) {
      if (!std::isfinite(w))
        return bad(absl::StrCat("task ", t, ": a loss weight"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string StepPlanToJsonLine(const StepPlan& plan) {
  std::string out;
  // Ids take about 8 characters each.
  size_t ids = plan.samples.size();
  for (const TaskPlan& task : plan.tasks) {
    ids += task.samples.size() + task.ranks.size() + task.loss_weights.size();
  }
  out.reserve(64 + 8 * ids + 48 * plan.tasks.size());
  absl::StrAppend(&out, "{\"step\":", plan.step, ",\"samples\":");
  AppendIntArray(&out, plan.samples);
  out.append(",\"tasks\":[");
  for (size_t t = 0; t < plan.tasks.size(); ++t) {
    const TaskPlan& task = plan.tasks[t];
    if (t > 0) out.push_back(',');
    out.append("{\"ranks\":");
    AppendIntArray(&out, task.ranks);
    out.append(",\"samples\":");
    AppendIntArray(&out, task.samples);
    out.append(",\"recompute\":");
    AppendDouble(&out, task.recompute);
    if (task.ulysses != 0) absl::StrAppend(&out, ",\"ulysses\":", task.ulysses);
    if (!task.loss_weights.empty()) {
      out.append(",\"loss_weights\":[");
      for (size_t i = 0; i < task.loss_weights.size(); ++i) {
        if (i > 0) out.push_back(',');
        AppendDouble(&out, task.loss_weights[i]);
      }
      out.push_back(']');
    }
    out.push_back('}');
  }
  out.push_back(']');
  if (plan.predicted_makespan_s != 0.0) {
    out.append(",\"predicted_makespan_s\":");
    AppendDouble(&out, plan.predicted_makespan_s);
  }
  out.push_back('}');
  return out;
}

// One element of a plan line's "tasks"; `where` prefixes error messages.
absl::Status ParseTask(const Json& object, const std::string& where,
                       TaskPlan* task) {
  if (!object.is_object()) {
    return Invalid(where,
                   absl::StrCat("must be a JSON object, got ", Show(object)));
  }
  RETURN_IF_ERROR(ReadIndexArray(object, "ranks", where, &task->ranks));
  RETURN_IF_ERROR(ReadIndexArray(object, "samples", where, &task->samples));
  auto recompute = object.find("recompute");
  if (recompute == object.end()) {
    return Invalid(where, "missing \"recompute\"");
  }
  RETURN_IF_ERROR(
      ReadNumber(*recompute, where, "\"recompute\"", &task->recompute));
  // Without "ulysses" the whole group is Ulysses (docs/COST_MODEL.md).
  auto ulysses = object.find("ulysses");
  if (ulysses != object.end()) {
    if (!ulysses->is_number_integer() || ulysses->get<int64_t>() < 0 ||
        ulysses->get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return Invalid(where,
                     absl::StrCat("\"ulysses\" must be an integer >= 0, got ",
                                  Show(*ulysses)));
    }
    task->ulysses = static_cast<int>(ulysses->get<int64_t>());
  }
  auto weights = object.find("loss_weights");
  if (weights != object.end()) {
    if (!weights->is_array()) {
      return Invalid(where,
                     absl::StrCat("\"loss_weights\" must be an array, got ",
                                  Show(*weights)));
    }
    if (weights->size() != task->samples.size()) {
      return Invalid(where, absl::StrCat("\"loss_weights\" has ",
                                         weights->size(), " entries for ",
                                         task->samples.size(), " samples"));
    }
    task->loss_weights.resize(weights->size());
    for (size_t i = 0; i < weights->size(); ++i) {
      RETURN_IF_ERROR(ReadNumber((*weights)[i], where,
                                 absl::StrCat("\"loss_weights\"[", i, "]"),
                                 &task->loss_weights[i]));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StepPlan> ParseStepPlanJsonLine(absl::string_view line) {
  if (absl::Status depth = CheckJsonDepth(line); !depth.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed JSON: ", depth.message()));
  }
  Json root;
  try {
    root = Json::parse(line.begin(), line.end());
  } catch (const Json::exception& e) {
    // Drop nlohmann's "[json.exception.parse_error.101] " prefix.
    absl::string_view what = e.what();
    const size_t bracket = what.find("] ");
    if (bracket != absl::string_view::npos) what.remove_prefix(bracket + 2);
    return absl::InvalidArgumentError(absl::StrCat("malformed JSON: ", what));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a plan line must be a JSON object, got ", Show(root)));
  }

  StepPlan plan;
  auto step = root.find("step");
  if (step == root.end()) return Invalid("", "missing \"step\"");
  if (!step->is_number_integer() ||
      (!step->is_number_unsigned() && step->get<int64_t>() < 0) ||
      (step->is_number_unsigned() &&
       step->get<uint64_t>() >
           static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
    return Invalid("", absl::StrCat("\"step\" must be a non-negative integer, "
                                    "got ",
                                    Show(*step)));
  }
  plan.step = step->get<int64_t>();
  const std::string where_step = absl::StrCat("step ", plan.step, ": ");
  RETURN_IF_ERROR(ReadIndexArray(root, "samples", where_step, &plan.samples));
  auto predicted = root.find("predicted_makespan_s");
  if (predicted != root.end()) {
    RETURN_IF_ERROR(ReadNumber(*predicted, where_step,
                               "\"predicted_makespan_s\"",
                               &plan.predicted_makespan_s));
  }

  auto tasks = root.find("tasks");
  if (tasks == root.end()) return Invalid(where_step, "missing \"tasks\"");
  if (!tasks->is_array()) {
    return Invalid(where_step, absl::StrCat("\"tasks\" must be an array, got ",
                                            Show(*tasks)));
  }
  plan.tasks.resize(tasks->size());
  for (size_t t = 0; t < tasks->size(); ++t) {
    const Json& object = (*tasks)[t];
    TaskPlan& task = plan.tasks[t];
    const std::string where = absl::StrCat(where_step, "task ", t, ": ");
    RETURN_IF_ERROR(ParseTask(object, where, &task));
  }
  return plan;
}

PlanFileWriter::PlanFileWriter(PlanFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      file_(std::exchange(other.file_, nullptr)),
      error_(std::move(other.error_)) {}

PlanFileWriter& PlanFileWriter::operator=(PlanFileWriter&& other) noexcept {
  if (this != &other) {
    if (file_ != nullptr) std::fclose(file_);
    path_ = std::move(other.path_);
    file_ = std::exchange(other.file_, nullptr);
    error_ = std::move(other.error_);
  }
  return *this;
}

PlanFileWriter::~PlanFileWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::StatusOr<PlanFileWriter> PlanFileWriter::Open(const std::string& path) {
  errno = 0;
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return absl::ErrnoToStatus(
        errno != 0 ? errno : EIO,
        absl::StrCat("cannot open plan file '", path, "' for writing"));
  }
  return PlanFileWriter(path, file);
}

absl::Status PlanFileWriter::Write(const StepPlan& plan) {
  if (!error_.ok()) return error_;
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("plan file '", path_, "' is already closed"));
  }
  if (absl::Status s = CheckFinite(plan); !s.ok()) return s;
  std::string line = StepPlanToJsonLine(plan);
  line.push_back('\n');
  errno = 0;
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size()) {
    error_ = absl::ErrnoToStatus(errno != 0 ? errno : EIO,
                                 absl::StrCat("cannot write step ", plan.step,
                                              " to plan file '", path_, "'"));
  }
  return error_;
}

absl::Status PlanFileWriter::Close() {
  if (file_ == nullptr) {
    return error_.ok() ? absl::FailedPreconditionError(absl::StrCat(
                             "plan file '", path_, "' is already closed"))
                       : error_;
  }
  std::FILE* file = std::exchange(file_, nullptr);
  const bool had_error = std::ferror(file) != 0;
  errno = 0;
  const int closed = std::fclose(file);
  if (error_.ok() && (closed != 0 || had_error)) {
    error_ = absl::ErrnoToStatus(
        errno != 0 ? errno : EIO,
        absl::StrCat("cannot finish writing plan file '", path_, "'"));
  }
  return error_;
}

absl::StatusOr<std::vector<StepPlan>> ReadPlanFile(const std::string& path) {
  errno = 0;
  std::ifstream in(path);
  if (!in.is_open()) {
    return absl::ErrnoToStatus(
        errno != 0 ? errno : EIO,
        absl::StrCat("cannot open plan file '", path, "'"));
  }
  struct Seen {
    int64_t step;
    int64_t line;
  };
  absl::flat_hash_map<int64_t, Seen> seen;
  std::vector<StepPlan> plans;
  std::string line;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = absl::StrCat(path, ":", line_number, ": ");
    absl::StatusOr<StepPlan> plan = ParseStepPlanJsonLine(line);
    if (!plan.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, plan.status().message()));
    }
    for (int64_t id : plan->samples) {
      auto [it, inserted] = seen.try_emplace(id, Seen{plan->step, line_number});
      if (inserted) continue;
      if (it->second.line == line_number) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, "sample ", id, " is listed twice in step ", plan->step));
      }
      return absl::InvalidArgumentError(
          absl::StrCat(where, "sample ", id, " of step ", plan->step,
                       " already appears in step ", it->second.step, " (line ",
                       it->second.line, "); no sample may be in two steps"));
    }
    plans.push_back(*std::move(plan));
  }
  if (in.bad()) {
    return absl::DataLossError(absl::StrCat(
        path, ":", line_number + 1, ": read error: ", std::strerror(errno)));
  }
  return plans;
}

}  // namespace dcp
