#include "examples/train_benchmark_report.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dcp::train_benchmark {
namespace {

double Rate(int64_t tokens, double seconds) {
  return seconds > 0 ? tokens / seconds : 0;
}

void PrintRow(const std::string& label, double dcp_wall, double static_wall,
              double dcp_cpu, double static_cpu) {
  auto ratio = [](double a, double b) {
    return b > 0 ? absl::StrFormat("%10.2f", a / b) : std::string(10, ' ');
  };
  auto num = [](double v) {
    return v > 0 ? absl::StrFormat("%10.0f", v) : absl::StrFormat("%10s", "-");
  };
  absl::PrintF("%-30s %s %s %s   %s %s %s\n", label, num(dcp_wall),
               num(static_wall), ratio(dcp_wall, static_wall), num(dcp_cpu),
               num(static_cpu), ratio(dcp_cpu, static_cpu));
}

}  // namespace

absl::Status CheckRecords(const RankRecords& records, int steps) {
  std::vector<int64_t> tokens(2 * steps, -1);
  for (size_t r = 0; r < records.size(); ++r) {
    if (records[r].size() != static_cast<size_t>(2 * steps)) {
      return absl::DataLossError(absl::StrCat("rank ", r, " measured ",
                                              records[r].size(), " steps, not ",
                                              2 * steps));
    }
    for (const StepRecord& rec : records[r]) {
      int64_t& t = tokens[rec.step];
      if (t >= 0 && t != rec.tokens) {
        return absl::InternalError(absl::StrCat(
            "step ", rec.step, " ran ", rec.tokens, " tokens in the ",
            PlanKindName(rec.kind), " plan on rank ", r, " and ", t,
            " elsewhere: the plans do not hold the same samples"));
      }
      t = rec.tokens;
    }
  }
  return absl::OkStatus();
}

KindFigures Figures(const RankRecords& records, PlanKind kind,
                    const std::vector<double>& predicted_s, int warmup) {
  KindFigures f;
  const size_t ranks = records.size();
  f.wall_s.assign(ranks, 0);
  f.cpu_s.assign(ranks, 0);
  const int steps = static_cast<int>(predicted_s.size());
  std::vector<double> max_wall(steps, 0), max_cpu(steps, 0);
  for (size_t r = 0; r < ranks; ++r) {
    for (const StepRecord& rec : records[r]) {
      if (rec.kind != kind) continue;
      if (rec.step == 0 && r == 0) f.first_loss = rec.loss;
      if (rec.step < warmup) continue;
      f.wall_s[r] += rec.wall_s;
      f.cpu_s[r] += rec.cpu_s;
      f.all_cpu_s += rec.cpu_s;
      max_wall[rec.step] = std::max(max_wall[rec.step], rec.wall_s);
      max_cpu[rec.step] = std::max(max_cpu[rec.step], rec.cpu_s);
      if (r == 0) f.tokens += rec.tokens;
    }
  }
  for (int s = warmup; s < steps; ++s) {
    f.slowest_wall_s += max_wall[s];
    f.slowest_cpu_s += max_cpu[s];
    f.predicted_s += predicted_s[s];
  }
  return f;
}

int Cores() { return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)); }

double LoadAverage() {
  double load[1] = {0};
  return getloadavg(load, 1) == 1 ? load[0] : 0;
}

void PrintThroughput(const KindFigures& d, const KindFigures& s, int steps,
                     int world) {
  absl::PrintF(
      "\nThroughput over the %d measured steps, world tokens per "
      "second (%d tokens a kind; load average %.1f after the ranks)\n",
      steps, d.tokens, LoadAverage());
  absl::PrintF("%-30s %32s   %32s\n", "", "wall clock, ranks sharing cores",
               "CPU time of the rank");
  absl::PrintF("%-30s %10s %10s %10s   %10s %10s %10s\n", "", "dcp", "static",
               "dcp/static", "dcp", "static", "dcp/static");
  for (int r = 0; r < world; ++r) {
    PrintRow(absl::StrCat("rank ", r), Rate(d.tokens, d.wall_s[r]),
             Rate(s.tokens, s.wall_s[r]), Rate(d.tokens, d.cpu_s[r]),
             Rate(s.tokens, s.cpu_s[r]));
  }
  PrintRow("slowest rank of each step", Rate(d.tokens, d.slowest_wall_s),
           Rate(s.tokens, s.slowest_wall_s), Rate(d.tokens, d.slowest_cpu_s),
           Rate(s.tokens, s.slowest_cpu_s));
  PrintRow("all ranks' CPU time added", 0, 0, Rate(d.tokens, d.all_cpu_s),
           Rate(s.tokens, s.all_cpu_s));
  PrintRow("cost model (fitted, predicted)", 0, 0,
           Rate(d.tokens, d.predicted_s), Rate(s.tokens, s.predicted_s));
  absl::PrintF(
      "  wall = world tokens / elapsed seconds of the rank's Step calls, with "
      "%d ranks sharing %d cores: it counts waiting for a core and for "
      "peers.\n"
      "  CPU = world tokens / seconds the rank's own process ran "
      "(ProcessCpuClock; waiting does not count): its speed on a core of its "
      "own. Slowest rank: each step's largest time (CPU: the step on "
      "dedicated cores, waits left out); all ranks' CPU added: the total "
      "work; cost model: the fitted model's prediction (wall clock of "
      "tasks timed on the ranks).\n",
      world, Cores());
  absl::PrintF(
      "  loss at the first step (same weights, same samples): dcp "
      "%.6f, static %.6f\n",
      d.first_loss, s.first_loss);
}

void PrintSpeedup(const KindFigures& d, const KindFigures& s) {
  auto ratio = [](double num, double den) { return den > 0 ? num / den : 0; };
  const double predicted = ratio(s.predicted_s, d.predicted_s);
  const double wall = ratio(s.slowest_wall_s, d.slowest_wall_s);
  const double cpu = ratio(s.slowest_cpu_s, d.slowest_cpu_s);
  absl::PrintF(
      "\nSpeed-up of dcp over static, the same tokens: predicted %.3f (the "
      "fitted cost model); measured %.3f on the wall clock and %.3f "
      "on the ranks' CPU time (slowest rank of each step); the wall clock's "
      "is %+.1f%% off the prediction\n",
      predicted, wall, cpu, 100 * (wall / predicted - 1));
}

bool ReportMemory(std::vector<MemoryRecord> records, const Job& job) {
  std::sort(records.begin(), records.end(),
            [](const MemoryRecord& a, const MemoryRecord& b) {
              return a.recompute < b.recompute;
            });
  absl::PrintF(
      "\nMemory: one task of one %d-token sequence on one rank alone "
      "(a world of one, float32, torch at 1 thread); peak resident "
      "memory during the step (VmHWM, reset before it) above the "
      "resident memory before it\n",
      job.memory_length);
  absl::PrintF("%-10s %-18s %22s %15s\n", "recompute", "layers recomputed",
               "peak above baseline", "vs recompute 0");
  auto above = [](const MemoryRecord& r) {
    return static_cast<double>(r.peak_bytes - r.baseline_bytes);
  };
  std::string failure;
  for (size_t i = 0; i < records.size(); ++i) {
    const MemoryRecord& r = records[i];
    absl::PrintF("%-10g %-18s %18.1f MiB %15.2f\n", r.recompute,
                 absl::StrCat(r.layers_recomputed, " of ", job.model.layers),
                 above(r) / (1 << 20), above(r) / above(records[0]));
    if (i > 0 && above(r) >= above(records[i - 1]) && failure.empty()) {
      failure = absl::StrFormat(
          "recompute %g did not lower the peak memory below recompute %g's",
          r.recompute, records[i - 1].recompute);
    }
  }
  if (records.size() < 2) failure = "the memory check measured nothing";
  if (!failure.empty()) {
    absl::PrintF("  check: FAILED: %s\n", failure);
    absl::FPrintF(stderr, "dcp-train-bench: %s\n", failure);
    return false;
  }
  absl::PrintF("  check: each higher recompute ratio lowered the peak: ok\n");
  return true;
}

}  // namespace dcp::train_benchmark
