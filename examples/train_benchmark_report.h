#ifndef DCP_EXAMPLES_TRAIN_BENCHMARK_REPORT_H_
#define DCP_EXAMPLES_TRAIN_BENCHMARK_REPORT_H_

// What dcp-train-bench makes of its ranks' records: each plan kind's
// figures over the measured steps, and the tables it prints of them (the
// throughput, the measured speed-up beside the predicted one, the memory
// check's peaks).

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "examples/train_benchmark_job.h"

namespace dcp::train_benchmark {

/// One plan kind's figures over the measured steps.
struct KindFigures {
  int64_t tokens = 0;
  /// Per rank: the sum of its Step times.
  std::vector<double> wall_s, cpu_s;
  /// Sum over steps of the slowest rank's time.
  double slowest_wall_s = 0, slowest_cpu_s = 0;
  /// Every rank's CPU time, all added up.
  double all_cpu_s = 0;
  /// Sum over the steps of the predicted makespan.
  double predicted_s = 0;
  /// The world's loss at the first step (the same weights in both kinds).
  double first_loss = 0;
};

/// The measurements of every rank: records[rank][i].
using RankRecords = std::vector<std::vector<StepRecord>>;

/// Checks that every rank measured every step of both kinds and that both
/// kinds ran the same tokens in every step (the same samples): DATA_LOSS
/// naming the rank that measured too few, INTERNAL naming the step whose
/// tokens differ.
absl::Status CheckRecords(const RankRecords& records, int steps);

/// `kind`'s figures over the steps from `warmup` on; `predicted_s` holds
/// each step's predicted makespan.
KindFigures Figures(const RankRecords& records, PlanKind kind,
                    const std::vector<double>& predicted_s, int warmup);

/// This machine's cores, and its one-minute load average (how many
/// processes wanted a core).
int Cores();
double LoadAverage();

/// The throughput table of dcp's figures `d` and static's `s`.
void PrintThroughput(const KindFigures& d, const KindFigures& s, int steps,
                     int world);

/// The speed-up of dcp over static (both ran the same tokens) the cost
/// model predicts for the plans, beside the measured ones.
void PrintSpeedup(const KindFigures& d, const KindFigures& s);

/// Prints the memory table; whether the peak fell as the recompute ratio
/// rose (what is wrong on stderr when not).
bool ReportMemory(std::vector<MemoryRecord> records, const Job& job);

}  // namespace dcp::train_benchmark

#endif  // DCP_EXAMPLES_TRAIN_BENCHMARK_REPORT_H_
