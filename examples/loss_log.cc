#include "examples/loss_log.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace dcp::examples {

absl::StatusOr<LossLog> LossLog::Open(const std::string& path,
                                      std::string prefix, bool echo) {
  std::unique_ptr<std::ofstream> out;
  if (!path.empty()) {
    out = std::make_unique<std::ofstream>(path, std::ios::trunc);
    if (!out->is_open()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot open ", path, " for writing"));
    }
  }
  return LossLog(path, std::move(out), std::move(prefix), echo);
}

LossLog::LossLog(std::string path, std::unique_ptr<std::ofstream> out,
                 std::string prefix, bool echo)
    : path_(std::move(path)),
      out_(std::move(out)),
      prefix_(std::move(prefix)),
      echo_(echo) {}

absl::Status LossLog::Write(const train::StepStats& stats) {
  if (steps_ == 0) first_loss_ = stats.loss;
  last_loss_ = stats.loss;
  ++steps_;
  if (echo_) {
    absl::FPrintF(stderr,
                  "%sstep %d: loss %.6f, grad norm %.4f, %d tokens, %.3f s\n",
                  prefix_, stats.step, stats.loss, stats.grad_norm,
                  stats.tokens, stats.seconds);
  }
  if (out_ == nullptr) return absl::OkStatus();
  // In this key order; doubles printed with the digits that round-trip.
  const nlohmann::ordered_json line = {{"step", stats.step},
                                       {"loss", stats.loss},
                                       {"grad_norm", stats.grad_norm},
                                       {"tokens", stats.tokens}};
  *out_ << line.dump() << "\n" << std::flush;
  if (!out_->good()) {
    return absl::DataLossError(absl::StrCat("cannot write to ", path_));
  }
  return absl::OkStatus();
}

std::string LossLog::Summary() const {
  if (steps_ == 0) return "no steps";
  return absl::StrFormat("%d step%s, loss %.4f -> %.4f", steps_,
                         steps_ == 1 ? "" : "s", first_loss_, last_loss_);
}

}  // namespace dcp::examples
