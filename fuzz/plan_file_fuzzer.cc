// Fuzzes the plan file format (scheduler/eval/plan_io.h) and what judges a
// plan read from one: the input is a plan file, read whole by ReadPlanFile
// and line by line by ParseStepPlanJsonLine; every step that parses is
// written back (StepPlanToJsonLine), must read back to the same plan, and is
// replayed on a small reference cluster (ReplayStep), which must accept it
// or reject it with a clean INVALID_ARGUMENT, never crash.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/model_spec.h"
#include "fuzz/fuzz_support.h"
#include "scheduler/eval/plan_io.h"
#include "scheduler/eval/simulator.h"
#include "scheduler/planner/plan.h"

namespace dcp {
namespace fuzz {
namespace {

constexpr int kWorld = 8;

const ReferenceCluster& Cluster() {
  static const ReferenceCluster* const cluster = [] {
    ClusterSpec spec = ClusterSpec::H200();
    spec.gpus_per_node = 4;
    return new ReferenceCluster(spec, *BuiltinModel("llama3-8b"), kWorld);
  }();
  return *cluster;
}

// 64 samples of 1..40000 tokens under a 32768-token window.
const LengthView& Lengths() {
  static const std::vector<int32_t>* const table = [] {
    auto* v = new std::vector<int32_t>();
    for (int i = 0; i < 64; ++i) v->push_back(1 + (i * 7919) % 40000);
    return v;
  }();
  static const LengthView view(*table, 32768);
  return view;
}

bool SameTask(const TaskPlan& a, const TaskPlan& b) {
  return a.ranks == b.ranks && a.samples == b.samples &&
         a.loss_weights == b.loss_weights && a.recompute == b.recompute;
}

bool SamePlan(const StepPlan& a, const StepPlan& b) {
  if (a.step != b.step || a.samples != b.samples ||
      a.predicted_makespan_s != b.predicted_makespan_s ||
      a.tasks.size() != b.tasks.size()) {
    return false;
  }
  for (size_t t = 0; t < a.tasks.size(); ++t) {
    if (!SameTask(a.tasks[t], b.tasks[t])) return false;
  }
  return true;
}

// Checks one line; returns its plan when it parses.
absl::StatusOr<StepPlan> CheckLine(absl::string_view line) {
  absl::StatusOr<StepPlan> plan = ParseStepPlanJsonLine(line);
  CheckClean(plan.status(), {absl::StatusCode::kInvalidArgument},
             "ParseStepPlanJsonLine");
  if (!plan.ok()) return plan;
  DCP_FUZZ_CHECK(plan->step >= 0, "step ", plan->step);
  for (int64_t id : plan->samples) DCP_FUZZ_CHECK(id >= 0, "sample ", id);
  for (const TaskPlan& task : plan->tasks) {
    for (int rank : task.ranks) DCP_FUZZ_CHECK(rank >= 0, "rank ", rank);
    for (int64_t id : task.samples) DCP_FUZZ_CHECK(id >= 0, "sample ", id);
    DCP_FUZZ_CHECK(task.loss_weights.empty() ||
                       task.loss_weights.size() == task.samples.size(),
                   task.loss_weights.size(), " loss weights for ",
                   task.samples.size(), " samples");
    DCP_FUZZ_CHECK(std::isfinite(task.recompute), "recompute ", task.recompute);
  }

  const std::string written = StepPlanToJsonLine(*plan);
  absl::StatusOr<StepPlan> again = ParseStepPlanJsonLine(written);
  DCP_FUZZ_CHECK(again.ok(), "the written line does not read back: ",
                 again.status().ToString(), " for ", written);
  DCP_FUZZ_CHECK(SamePlan(*plan, *again),
                 "the written line reads back to another plan: ", written);

  absl::StatusOr<StepReport> report = ReplayStep(Cluster(), *plan, Lengths());
  CheckClean(report.status(), {absl::StatusCode::kInvalidArgument},
             "ReplayStep");
  if (report.ok()) {
    DCP_FUZZ_CHECK(std::isfinite(report->makespan_s) &&
                       report->makespan_s >= 0 &&
                       report->rank_busy_s.size() == kWorld,
                   "replay makespan ", report->makespan_s, " over ",
                   report->rank_busy_s.size(), " ranks");
  }
  return plan;
}

}  // namespace
}  // namespace fuzz
}  // namespace dcp

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using dcp::StepPlan;
  const absl::string_view text = dcp::fuzz::AsText(data, size);
  dcp::fuzz::ScratchFile& file = dcp::fuzz::ScratchFile::Get();
  file.Replace(text);
  absl::StatusOr<std::vector<StepPlan>> plans = dcp::ReadPlanFile(file.path());
  dcp::fuzz::CheckClean(plans.status(), {absl::StatusCode::kInvalidArgument},
                        "ReadPlanFile");

  // The file's lines as ReadPlanFile sees them: split at '\n', one '\r'
  // dropped, lines of spaces and tabs skipped.
  std::vector<StepPlan> parsed;
  bool all_parse = true;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == absl::string_view::npos) continue;
    absl::StatusOr<StepPlan> plan = dcp::fuzz::CheckLine(line);
    all_parse = all_parse && plan.ok();
    if (plan.ok()) parsed.push_back(*std::move(plan));
  }
  if (plans.ok()) {
    DCP_FUZZ_CHECK(all_parse && plans->size() == parsed.size(),
                   "ReadPlanFile read ", plans->size(), " steps of ",
                   parsed.size(), " lines that parse",
                   all_parse ? "" : " (and some that do not)");
    for (size_t i = 0; i < parsed.size(); ++i) {
      DCP_FUZZ_CHECK(dcp::fuzz::SamePlan((*plans)[i], parsed[i]), "step ", i,
                     " of the file differs from its line");
    }
  }
  return 0;
}
