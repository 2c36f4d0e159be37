#ifndef DCP_EXAMPLES_LOSS_LOG_H_
#define DCP_EXAMPLES_LOSS_LOG_H_

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "train/trainer.h"

namespace dcp::examples {

/// Where dcp-train records each step: one JSON object a line in a file,
///   {"step":S,"loss":L,"grad_norm":G,"tokens":T}
/// (the world's figures, the same on every rank; doubles printed so that
/// they read back exactly), and a short line on stderr starting with
/// `prefix` (when `echo`). tools/plot_loss.sh draws the file.
///
/// Thread-compatible. Move-only (owns the file).
///
///   ASSIGN_OR_RETURN(LossLog log, LossLog::Open("/tmp/loss.jsonl", "", true));
///   RETURN_IF_ERROR(log.Write(stats));
class LossLog {
 public:
  /// Truncates (or creates) `path`; an empty path writes no file.
  /// INVALID_ARGUMENT naming the path when it cannot be opened.
  static absl::StatusOr<LossLog> Open(const std::string& path,
                                      std::string prefix, bool echo);

  LossLog(LossLog&&) = default;
  LossLog& operator=(LossLog&&) = default;

  /// Appends `stats`' line (and flushes it, so that a run that fails later
  /// keeps the steps it trained). DATA_LOSS when the write fails.
  absl::Status Write(const train::StepStats& stats);

  /// Steps written, and the first and last step's loss, in one line.
  std::string Summary() const;

 private:
  LossLog(std::string path, std::unique_ptr<std::ofstream> out,
          std::string prefix, bool echo);

  std::string path_;
  std::unique_ptr<std::ofstream> out_;  // Null without a file.
  std::string prefix_;
  bool echo_ = true;
  int64_t steps_ = 0;
  double first_loss_ = 0;
  double last_loss_ = 0;
};

}  // namespace dcp::examples

#endif  // DCP_EXAMPLES_LOSS_LOG_H_
