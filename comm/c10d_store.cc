#include "comm/c10d_store.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "c10/util/Exception.h"
#include "torch/csrc/distributed/c10d/exception.h"

namespace dcp {
namespace {

absl::Duration FromMillis(const std::chrono::milliseconds& ms) {
  return absl::Milliseconds(ms.count());
}

std::chrono::milliseconds ToMillis(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

[[noreturn]] void Refuse(absl::string_view method) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "C10dRendezvousStore::", std::string(method),
      " is not supported: dcp's rendezvous store is write-once per key, "
      "with no atomic read-modify-write, deletion or listing "
      "(ProcessGroupGloo needs only set, get and wait)");
  // TORCH_CHECK_NOT_IMPLEMENTED(false, ...) always throws.
  throw std::logic_error("unreachable");
}

}  // namespace

absl::StatusOr<c10::intrusive_ptr<C10dRendezvousStore>>
C10dRendezvousStore::Create(RendezvousStoreInterface* store, Options options) {
  if (store == nullptr) {
    return absl::InvalidArgumentError("C10dRendezvousStore: null store");
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("C10dRendezvousStore: timeout must be positive, not ",
                     absl::FormatDuration(options.timeout)));
  }
  return c10::make_intrusive<C10dRendezvousStore>(store, options);
}

C10dRendezvousStore::C10dRendezvousStore(RendezvousStoreInterface* store,
                                         Options options)
    : c10d::Store(ToMillis(options.timeout)),
      store_(store),
      deadline_(options.deadline),
      clock_(options.clock != nullptr ? options.clock : RealClock::Default()) {}

void C10dRendezvousStore::set(const std::string& key,
                              const std::vector<uint8_t>& value) {
  absl::Status status = store_->Set(
      key, absl::string_view(reinterpret_cast<const char*>(value.data()),
                             value.size()));
  if (!status.ok()) Fail(std::move(status));
}

std::vector<uint8_t> C10dRendezvousStore::get(const std::string& key) {
  std::vector<std::string> values = WaitOrThrow({key}, FromMillis(timeout_));
  const std::string& value = values.front();
  return std::vector<uint8_t>(value.begin(), value.end());
}

void C10dRendezvousStore::wait(const std::vector<std::string>& keys) {
  WaitOrThrow(keys, FromMillis(timeout_));
}

void C10dRendezvousStore::wait(const std::vector<std::string>& keys,
                               const std::chrono::milliseconds& timeout) {
  WaitOrThrow(keys, FromMillis(timeout.count() > 0 ? timeout : timeout_));
}

void C10dRendezvousStore::setTimeout(const std::chrono::milliseconds& timeout) {
  TORCH_CHECK(timeout.count() > 0,
              "C10dRendezvousStore: the timeout must be positive, not ",
              timeout.count(), " ms");
  c10d::Store::setTimeout(timeout);
}

std::vector<std::string> C10dRendezvousStore::WaitOrThrow(
    const std::vector<std::string>& keys, absl::Duration timeout) {
  if (deadline_ != absl::InfiniteFuture()) {
    timeout = std::max(absl::ZeroDuration(),
                       std::min(timeout, deadline_ - clock_->Now()));
  }
  absl::StatusOr<std::vector<std::string>> values = store_->Wait(keys, timeout);
  if (!values.ok()) Fail(values.status());
  return *std::move(values);
}

void C10dRendezvousStore::Fail(absl::Status status) {
  const std::string message =
      absl::StrCat("dcp rendezvous store: ", status.ToString());
  const bool timed_out = status.code() == absl::StatusCode::kDeadlineExceeded;
  {
    absl::MutexLock lock(&mu_);
    last_error_ = std::move(status);
  }
  if (timed_out) throw c10d::TimeoutError(message);
  throw c10d::C10dError(message);
}

absl::Status C10dRendezvousStore::last_error() const {
  absl::MutexLock lock(&mu_);
  return last_error_;
}

std::vector<uint8_t> C10dRendezvousStore::compareSet(
    const std::string& /*key*/, const std::vector<uint8_t>& /*current*/,
    const std::vector<uint8_t>& /*desired*/) {
  Refuse("compareSet");
}

int64_t C10dRendezvousStore::add(const std::string& /*key*/,
                                 int64_t /*value*/) {
  Refuse("add");
}

bool C10dRendezvousStore::deleteKey(const std::string& /*key*/) {
  Refuse("deleteKey");
}

bool C10dRendezvousStore::check(const std::vector<std::string>& /*keys*/) {
  Refuse("check");
}

int64_t C10dRendezvousStore::getNumKeys() { Refuse("getNumKeys"); }

void C10dRendezvousStore::watchKey(const std::string& /*key*/,
                                   c10d::WatchKeyCallback /*callback*/) {
  Refuse("watchKey");
}

}  // namespace dcp
