#ifndef DCP_SCHEDULER_EVAL_PLAN_IO_H_
#define DCP_SCHEDULER_EVAL_PLAN_IO_H_

// The plan file format of docs/COST_MODEL.md: JSON Lines, one step a line,
//
//   {"step": 0, "samples": [4, 9, 1],
//    "tasks": [{"ranks": [0, 1], "samples": [4, 1], "recompute": 0.25,
//               "loss_weights": [0.5, 0.25]},
//              {"ranks": [2], "samples": [9], "recompute": 0}]}
//
// (on one line). "loss_weights" is written when a task has weights and
// "predicted_makespan_s" when the plan has a prediction (non-zero); both are
// optional on read, and fields this reader does not know are ignored.

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scheduler/planner/plan.h"

namespace dcp {

/// One line of a plan file for `plan`, without the trailing newline. Doubles
/// are written with the fewest digits (at most 17) that read back to the same
/// value. Non-finite doubles, which no valid plan has, are written as `null`
/// (and rejected by the reader); `PlanFileWriter::Write` refuses them.
std::string StepPlanToJsonLine(const StepPlan& plan);

/// Parses one line of a plan file. INVALID_ARGUMENT, saying what is wrong
/// and where in the object (e.g. `task 2: "ranks"[1] must be a non-negative
/// integer, got "x"`), for malformed JSON, a missing required field ("step",
/// "samples", "tasks"; per task "ranks", "samples", "recompute"), a value of
/// the wrong type, a negative step, sample id or rank, or loss weights whose
/// count differs from the task's samples. Plan semantics (every sample in one
/// task, group sizes, memory) are `ReplayStep`'s to check.
absl::StatusOr<StepPlan> ParseStepPlanJsonLine(absl::string_view line);

/// Writes a plan file, one `StepPlan` a line.
///
/// Writes are buffered, so an I/O error (e.g. a full disk) may only show at
/// a later `Write` or at `Close`; always check `Close`. The first error is
/// sticky: every later call returns it. Move-only; owns its file and closes
/// it on destruction (silently: call `Close` to learn about errors).
/// Thread-compatible.
///
///   ASSIGN_OR_RETURN(PlanFileWriter writer, PlanFileWriter::Open(path));
///   for (const StepPlan& plan : plans) RETURN_IF_ERROR(writer.Write(plan));
///   RETURN_IF_ERROR(writer.Close());
class PlanFileWriter {
 public:
  /// Creates or truncates `path`. The error carries the errno's code (e.g.
  /// NOT_FOUND for a missing directory) and names the path.
  static absl::StatusOr<PlanFileWriter> Open(const std::string& path);

  PlanFileWriter(PlanFileWriter&& other) noexcept;
  PlanFileWriter& operator=(PlanFileWriter&& other) noexcept;
  PlanFileWriter(const PlanFileWriter&) = delete;
  PlanFileWriter& operator=(const PlanFileWriter&) = delete;
  ~PlanFileWriter();

  /// Appends one line. INVALID_ARGUMENT (nothing written) when the plan has
  /// a non-finite recompute ratio, loss weight or prediction;
  /// FAILED_PRECONDITION after `Close`.
  absl::Status Write(const StepPlan& plan);

  /// Flushes and closes the file, reporting any write error so far.
  /// FAILED_PRECONDITION when already closed.
  absl::Status Close();

  const std::string& path() const { return path_; }

 private:
  PlanFileWriter(std::string path, std::FILE* file)
      : path_(std::move(path)), file_(file) {}

  std::string path_;
  std::FILE* file_ = nullptr;
  absl::Status error_;
};

/// Reads a whole plan file. Blank lines are skipped. INVALID_ARGUMENT naming
/// `path:line` and the problem for a line `ParseStepPlanJsonLine` rejects and
/// for a sample that appears twice in the file (in one step, or in two steps:
/// the message names both lines); the errno's code naming the path when the
/// file cannot be opened or read.
absl::StatusOr<std::vector<StepPlan>> ReadPlanFile(const std::string& path);

}  // namespace dcp

#endif  // DCP_SCHEDULER_EVAL_PLAN_IO_H_
