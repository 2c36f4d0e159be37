#ifndef DCP_TESTS_EXECUTION_LOG_H_
#define DCP_TESTS_EXECUTION_LOG_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace dcp::testing_process {

/// One line of an execute- or simulate-mode agent's `--log_file`
/// (worker_agent's `FormatExecutionLog`): a "task" line per task it ran, then
/// a "step" line.
struct ExecutionLine {
  std::string kind;
  int64_t epoch = 0;
  int64_t step = 0;
  int rank = 0;
  /// Task lines: the task, its group and samples.
  int task_index = 0;
  std::vector<int> group;
  std::vector<int64_t> samples;
  /// Tokens of the task (task lines) or of the rank's step (step lines).
  int64_t tokens = 0;
  /// Step lines: the loss and, where the executor logs them, the digests of
  /// the weights after and before the step.
  double loss = 0;
  std::string weights;
  std::string start_weights;
};

/// The lines of the log at `path` in order; lines that are not JSON objects
/// with a "kind" (a torn last line of a killed agent) are left out.
std::vector<ExecutionLine> ReadExecutionLog(const std::string& path);

/// The step lines' steps of the log at `path`, in order (repeats kept).
std::vector<int64_t> LoggedSteps(const std::string& path);

/// [A, B) of the scheduler's "... steps [A, B) abandoned ..." shrink line;
/// {-1, -1} (and a test failure when the line names steps but they do not
/// parse) otherwise.
std::pair<int64_t, int64_t> AbandonedRange(const std::string& line);

/// The first line of the file at `path` (a child's log) that contains
/// `text`, waiting on the files of `dir` (FileActivity, no sleep) until
/// `deadline`; "" if none came.
std::string AwaitLineContaining(const std::string& path,
                                const std::string& text,
                                const std::string& dir, absl::Time deadline);

/// A task of a step as the ranks that ran it logged it.
struct LoggedTask {
  std::vector<int> group;
  std::vector<int64_t> samples;
  int64_t tokens = 0;
  /// How many times each rank logged it (more than once: a rank that died
  /// before reporting the step ran it again after its restart).
  std::map<int, int> runs;
};

/// Every task of every step not in `skip` that the logs at `logs` (rank r's
/// at `logs[r]`) hold, keyed by (step, task index). A test failure when the
/// ranks of a task logged different samples or groups for it, or when its
/// group is not the ranks that logged it.
std::map<std::pair<int64_t, int>, LoggedTask> LoggedTasks(
    const std::vector<std::string>& logs, const std::set<int64_t>& skip);

/// Per step number, the samples of its tasks (each task once).
std::map<int64_t, std::multiset<int64_t>> SamplesByStep(
    const std::map<std::pair<int64_t, int>, LoggedTask>& tasks);

/// A test failure for each job step whose samples `ran` (`SamplesByStep`)
/// did not train exactly once: the steps outside the `abandoned` ranges
/// [from, to), in order, train the job's steps `expected` in order (a
/// shrink re-serves the samples of the steps it abandoned in the steps
/// right after them), and no other step ran.
void ExpectEachJobStepOnce(
    const std::map<int64_t, std::multiset<int64_t>>& ran,
    const std::vector<std::multiset<int64_t>>& expected,
    const std::vector<std::pair<int64_t, int64_t>>& abandoned);

}  // namespace dcp::testing_process

#endif  // DCP_TESTS_EXECUTION_LOG_H_
