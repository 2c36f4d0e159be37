#include "comm/rendezvous_store.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dcp {

InMemoryRendezvousStore::InMemoryRendezvousStore(Options options)
    : clock_(options.clock != nullptr ? options.clock : RealClock::Default()) {}

absl::Status InMemoryRendezvousStore::Set(absl::string_view key,
                                          absl::string_view value) {
  absl::MutexLock lock(&mu_);
  values_[key] = std::string(value);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> InMemoryRendezvousStore::Wait(
    absl::Span<const std::string> keys, absl::Duration timeout) {
  auto all_set = [this, keys]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const std::string& key : keys) {
      if (!values_.contains(key)) return false;
    }
    return true;
  };
  absl::MutexLock lock(&mu_);
  if (!clock_->AwaitWithTimeout(&mu_, absl::Condition(&all_set), timeout)) {
    std::vector<absl::string_view> missing;
    for (const std::string& key : keys) {
      if (!values_.contains(key)) missing.push_back(key);
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "rendezvous keys not set after ", absl::FormatDuration(timeout), ": ",
        absl::StrJoin(missing, ", ")));
  }
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const std::string& key : keys) values.push_back(values_.at(key));
  return values;
}

size_t InMemoryRendezvousStore::size() const {
  absl::MutexLock lock(&mu_);
  return values_.size();
}

}  // namespace dcp
