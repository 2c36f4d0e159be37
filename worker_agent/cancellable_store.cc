#include "worker_agent/cancellable_store.h"

#include <algorithm>

#include "common/status_macros.h"

namespace dcp {

absl::Status CancellableStore::Set(absl::string_view key,
                                   absl::string_view value) {
  RETURN_IF_ERROR(Check());
  return store_->Set(key, value);
}

absl::StatusOr<std::vector<std::string>> CancellableStore::Wait(
    absl::Span<const std::string> keys, absl::Duration timeout) {
  const absl::Time deadline = clock_->Now() + timeout;
  while (true) {
    RETURN_IF_ERROR(Check());
    const absl::Duration left = deadline - clock_->Now();
    absl::StatusOr<std::vector<std::string>> values =
        store_->Wait(keys, std::min(left, kSlice));
    if (values.ok() || !absl::IsDeadlineExceeded(values.status()) ||
        left <= kSlice) {
      return values;
    }
  }
}

absl::Status CancellableStore::Check() const {
  if (cancelled_.load()) {
    return absl::CancelledError("the agent is shutting down");
  }
  return absl::OkStatus();
}

}  // namespace dcp
