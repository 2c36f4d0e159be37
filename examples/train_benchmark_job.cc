#include "examples/train_benchmark_job.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace dcp::train_benchmark {
namespace {

std::string JobPath(const std::string& dir) { return dir + "/job.json"; }

std::string PlanPath(const std::string& dir, PlanKind kind, int step) {
  return absl::StrCat(dir, "/plan.", PlanKindName(kind), ".", step, ".pb");
}

std::string StatsPath(const std::string& dir, int rank) {
  return absl::StrCat(dir, "/stats.rank", rank, ".jsonl");
}

std::string MemoryPath(const std::string& dir) { return dir + "/memory.jsonl"; }

std::string GlooPath(const std::string& dir) { return dir + "/gloo.jsonl"; }

std::string TasksPath(const std::string& dir) { return dir + "/tasks.jsonl"; }

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::Status WriteFile(const std::string& path, const std::string& text,
                       std::ios::openmode mode = std::ios::trunc) {
  std::ofstream out(path, std::ios::binary | std::ios::out | mode);
  out << text;
  out.flush();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// Every line of a JSON Lines file, parsed.
absl::StatusOr<std::vector<nlohmann::json>> ReadJsonLines(
    const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::vector<nlohmann::json> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::DataLossError(absl::StrCat(path, ": not JSON: ", line));
    }
    out.push_back(std::move(j));
  }
  return out;
}

// The records of a JSON Lines file, each line made one by `parse` (which may
// throw nlohmann's exceptions on a missing or mistyped field).
template <typename Record, typename Parse>
absl::StatusOr<std::vector<Record>> ReadRecords(const std::string& path,
                                                Parse parse) {
  ASSIGN_OR_RETURN(std::vector<nlohmann::json> lines, ReadJsonLines(path));
  std::vector<Record> out;
  out.reserve(lines.size());
  try {
    for (const nlohmann::json& j : lines) out.push_back(parse(j));
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(path, ": ", e.what()));
  }
  return out;
}

nlohmann::json ModelJson(const ModelSpec& m) {
  return {{"name", m.name},   {"layers", m.layers},     {"hidden", m.hidden},
          {"heads", m.heads}, {"kv_heads", m.kv_heads}, {"ffn", m.ffn},
          {"vocab", m.vocab}, {"causal", m.causal}};
}

}  // namespace

const char* PlanKindName(PlanKind kind) {
  return kind == PlanKind::kDcp ? "dcp" : "static";
}

absl::Status WriteJob(const std::string& dir, const Job& job) {
  const nlohmann::json j = {{"model", ModelJson(job.model)},
                            {"world_size", job.world_size},
                            {"session", job.session},
                            {"steps", job.steps},
                            {"weight_seed", job.weight_seed},
                            {"memory_length", job.memory_length},
                            {"window", job.window},
                            {"group_timeout_s", job.group_timeout_s}};
  return WriteFile(JobPath(dir), j.dump());
}

absl::StatusOr<Job> ReadJob(const std::string& dir) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(JobPath(dir)));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.contains("model")) {
    return absl::DataLossError(absl::StrCat(JobPath(dir), ": not a job"));
  }
  Job job;
  ASSIGN_OR_RETURN(job.model,
                   ParseModelConfig(j.at("model").dump(), JobPath(dir)));
  try {
    job.world_size = j.at("world_size").get<int>();
    job.session = j.at("session").get<std::string>();
    job.steps = j.at("steps").get<int>();
    job.weight_seed = j.at("weight_seed").get<uint64_t>();
    job.memory_length = j.at("memory_length").get<int64_t>();
    job.window = j.at("window").get<int64_t>();
    job.group_timeout_s = j.at("group_timeout_s").get<double>();
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat(JobPath(dir), ": ", e.what()));
  }
  return job;
}

absl::Status WritePlan(const std::string& dir, PlanKind kind, int step,
                       const v1::StepPlan& plan) {
  return WriteFile(PlanPath(dir, kind, step), plan.SerializeAsString());
}

absl::StatusOr<v1::StepPlan> ReadPlan(const std::string& dir, PlanKind kind,
                                      int step) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(PlanPath(dir, kind, step)));
  v1::StepPlan plan;
  if (!plan.ParseFromString(bytes)) {
    return absl::DataLossError(
        absl::StrCat("cannot parse ", PlanPath(dir, kind, step)));
  }
  return plan;
}

absl::Status AppendStepRecord(const std::string& dir, int rank,
                              const StepRecord& r) {
  const nlohmann::json j = {{"kind", PlanKindName(r.kind)}, {"step", r.step},
                            {"wall_s", r.wall_s},           {"cpu_s", r.cpu_s},
                            {"tokens", r.tokens},           {"loss", r.loss}};
  return WriteFile(StatsPath(dir, rank), j.dump() + "\n", std::ios::app);
}

absl::StatusOr<std::vector<StepRecord>> ReadStepRecords(const std::string& dir,
                                                        int rank) {
  return ReadRecords<StepRecord>(
      StatsPath(dir, rank), [](const nlohmann::json& j) {
        StepRecord r;
        r.kind = j.at("kind").get<std::string>() == "dcp" ? PlanKind::kDcp
                                                          : PlanKind::kStatic;
        r.step = j.at("step").get<int>();
        r.wall_s = j.at("wall_s").get<double>();
        r.cpu_s = j.at("cpu_s").get<double>();
        r.tokens = j.at("tokens").get<int64_t>();
        r.loss = j.at("loss").get<double>();
        return r;
      });
}

absl::Status AppendGlooRecord(const std::string& dir, const GlooRecord& r) {
  const nlohmann::json j = {{"collective", r.collective},
                            {"floats", r.floats},
                            {"seconds", r.seconds}};
  return WriteFile(GlooPath(dir), j.dump() + "\n", std::ios::app);
}

absl::StatusOr<std::vector<GlooRecord>> ReadGlooRecords(
    const std::string& dir) {
  return ReadRecords<GlooRecord>(GlooPath(dir), [](const nlohmann::json& j) {
    GlooRecord r;
    r.collective = j.at("collective").get<std::string>();
    r.floats = j.at("floats").get<int64_t>();
    r.seconds = j.at("seconds").get<double>();
    return r;
  });
}

absl::Status AppendTaskRecord(const std::string& dir,
                              const TaskObservation& r) {
  const nlohmann::json j = {{"group_size", r.group_size},
                            {"ulysses", r.ulysses},
                            {"recompute", r.recompute},
                            {"lengths", r.lengths},
                            {"seconds", r.seconds}};
  return WriteFile(TasksPath(dir), j.dump() + "\n", std::ios::app);
}

absl::StatusOr<std::vector<TaskObservation>> ReadTaskRecords(
    const std::string& dir) {
  return ReadRecords<TaskObservation>(
      TasksPath(dir), [](const nlohmann::json& j) {
        TaskObservation r;
        r.group_size = j.at("group_size").get<int>();
        r.ulysses = j.at("ulysses").get<int>();
        r.recompute = j.at("recompute").get<double>();
        r.lengths = j.at("lengths").get<std::vector<int64_t>>();
        r.seconds = j.at("seconds").get<double>();
        return r;
      });
}

absl::Status AppendMemoryRecord(const std::string& dir, const MemoryRecord& r) {
  const nlohmann::json j = {{"recompute", r.recompute},
                            {"layers_recomputed", r.layers_recomputed},
                            {"baseline_bytes", r.baseline_bytes},
                            {"peak_bytes", r.peak_bytes}};
  return WriteFile(MemoryPath(dir), j.dump() + "\n", std::ios::app);
}

absl::StatusOr<std::vector<MemoryRecord>> ReadMemoryRecords(
    const std::string& dir) {
  return ReadRecords<MemoryRecord>(MemoryPath(dir), [](const nlohmann::json& j) {
    MemoryRecord r;
    r.recompute = j.at("recompute").get<double>();
    r.layers_recomputed = j.at("layers_recomputed").get<int>();
    r.baseline_bytes = j.at("baseline_bytes").get<int64_t>();
    r.peak_bytes = j.at("peak_bytes").get<int64_t>();
    return r;
  });
}

train::RankTrainerOptions TrainerOptions(const Job& job, int world, int rank,
                                         Clock* clock) {
  train::RankTrainerOptions o;
  o.model.model = job.model;
  o.model.dtype = at::kFloat;
  o.model.seed = job.weight_seed;
  o.corpus.vocab = job.model.vocab;
  o.corpus.seed = job.weight_seed + 1;
  o.world_size = world;
  o.rank = rank;
  o.session_id = job.session;
  o.clock = clock;
  return o;
}

v1::StepPlan SingleRankPlan(int64_t step, const std::vector<int64_t>& lengths,
                            double recompute) {
  return EveryRankTaskPlan(step, 1, lengths, recompute);
}

v1::StepPlan GroupTaskPlan(int64_t step, int world, int size, int ulysses,
                           const std::vector<int64_t>& lengths,
                           double recompute, const std::string& prefix) {
  size = std::max(size, 1);
  v1::StepPlan plan;
  plan.set_step(step);
  int64_t sample = 0;
  int64_t total = 0;
  for (int g = 0; g < world / size; ++g) {
    v1::Task* task = plan.add_tasks();
    task->set_task_index(g);
    task->set_recompute(recompute);
    v1::CommGroup* group = nullptr;
    if (size > 1) {
      group = plan.add_groups();
      group->set_id(g + 1);
      group->set_rendezvous_prefix(absl::StrCat(prefix, "/g", g));
      task->set_group_id(g + 1);
      if (ulysses > 0 && ulysses != size) task->set_ulysses(ulysses);
    }
    for (int r = g * size; r < (g + 1) * size; ++r) {
      task->add_ranks(r);
      task->add_micro_steps(0);
      if (group != nullptr) group->add_ranks(r);
    }
    for (int64_t length : lengths) {
      plan.add_samples(sample);
      task->add_samples(sample++);
      task->add_lengths(length);
      total += length;
    }
  }
  plan.set_total_tokens(total);
  return plan;
}

v1::StepPlan EveryRankTaskPlan(int64_t step, int world,
                               const std::vector<int64_t>& lengths,
                               double recompute) {
  return GroupTaskPlan(step, world, 1, 0, lengths, recompute, "");
}

}  // namespace dcp::train_benchmark
