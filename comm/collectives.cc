#include "comm/collectives.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "c10/util/Exception.h"

namespace dcp {

std::string ExceptionText(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) {
    return c10->what_without_backtrace();
  }
  return e.what();
}

bool SaysTimedOut(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  return absl::StrContains(lower, "timed out") ||
         absl::StrContains(lower, "timeout");
}

absl::Status RunCollective(
    const std::string& what,
    absl::FunctionRef<c10::intrusive_ptr<c10d::Work>()> start) {
  c10::intrusive_ptr<c10d::Work> work;
  try {
    work = start();
  } catch (const std::exception& e) {
    // Refused before anything was sent (an argument c10d checks, such as a
    // root outside the group): the caller's mistake, not a lost peer.
    return absl::InvalidArgumentError(
        absl::StrCat(what, " could not start: ", ExceptionText(e)));
  }
  try {
    work->wait();
  } catch (const std::exception& e) {
    const std::string text = ExceptionText(e);
    const std::string message = absl::StrCat(what, " failed: ", text);
    return SaysTimedOut(text) ? absl::DeadlineExceededError(message)
                              : absl::UnavailableError(message);
  }
  return absl::OkStatus();
}

absl::Status AllReduceSum(c10d::ProcessGroup& group,
                          absl::Span<double> values) {
  // A copy of the values: from_blob would alias memory c10d may hold past
  // a failed wait.
  at::Tensor sum = at::empty({static_cast<int64_t>(values.size())},
                             at::TensorOptions().dtype(at::kDouble));
  std::copy(values.begin(), values.end(), sum.data_ptr<double>());
  std::vector<at::Tensor> tensors = {sum};
  absl::Status status = RunCollective(
      absl::StrCat("a sum of ", values.size(), " values over a group of ",
                   group.getSize(), " ranks"),
      [&] { return group.allreduce(tensors); });
  if (!status.ok()) return status;
  std::copy(sum.data_ptr<double>(), sum.data_ptr<double>() + values.size(),
            values.begin());
  return absl::OkStatus();
}

}  // namespace dcp
