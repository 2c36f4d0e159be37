#include "scheduler/control/kv_store.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "scheduler/control/report_validation.h"

namespace dcp {
namespace {

/// A key for error messages: short keys as they are, long ones cut.
std::string Printable(absl::string_view key) {
  constexpr size_t kShown = 80;
  if (key.size() <= kShown) return absl::StrCat("'", key, "'");
  return absl::StrCat("'", key.substr(0, kShown), "...' (", key.size(),
                      " bytes)");
}

}  // namespace

KvStore::KvStore(KvStoreOptions options) : options_(std::move(options)) {}

absl::Status KvStore::CheckKey(absl::string_view session_id,
                               absl::string_view key,
                               absl::string_view value) const {
  RETURN_IF_ERROR(CheckSession(session_id, options_.session_id));
  if (static_cast<int64_t>(key.size()) > options_.max_key_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("store key ", Printable(key), " has ", key.size(),
                     " bytes; the limit is ", options_.max_key_bytes));
  }
  const std::string prefix = absl::StrCat(options_.session_id, "/");
  if (!absl::StartsWith(key, prefix) || key.size() == prefix.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("store key ", Printable(key), " must start with '", prefix,
                     "' (a CommGroup.rendezvous_prefix does)"));
  }
  if (static_cast<int64_t>(value.size()) > options_.max_value_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "value of store key ", Printable(key), " has ", value.size(),
        " bytes; the limit is ", options_.max_value_bytes));
  }
  return absl::OkStatus();
}

absl::Status KvStore::CheckRoomLocked(absl::string_view key,
                                      absl::string_view value) const {
  auto it = entries_.find(key);
  const int64_t old_bytes =
      it == entries_.end()
          ? 0
          : static_cast<int64_t>(it->first.size() + it->second.size());
  const int64_t new_bytes = static_cast<int64_t>(key.size() + value.size());
  if (it == entries_.end() &&
      static_cast<int64_t>(entries_.size()) >= options_.max_keys) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the store holds ", entries_.size(),
                     " keys, its limit; cannot add ", Printable(key)));
  }
  if (bytes_ - old_bytes + new_bytes > options_.max_total_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the store holds ", bytes_, " bytes; adding ", Printable(key),
        " would pass its limit of ", options_.max_total_bytes));
  }
  return absl::OkStatus();
}

void KvStore::PutLocked(absl::string_view key, absl::string_view value) {
  auto it = entries_.find(key);
  const int64_t new_bytes = static_cast<int64_t>(key.size() + value.size());
  if (it == entries_.end()) {
    entries_.emplace(std::string(key), std::string(value));
    bytes_ += new_bytes;
  } else {
    bytes_ +=
        new_bytes - static_cast<int64_t>(it->first.size() + it->second.size());
    it->second.assign(value.data(), value.size());
  }
}

absl::Status KvStore::Set(absl::string_view session_id, absl::string_view key,
                          absl::string_view value) {
  RETURN_IF_ERROR(CheckKey(session_id, key, value));
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckRoomLocked(key, value));
  PutLocked(key, value);
  return absl::OkStatus();
}

absl::Status KvStore::Check(absl::string_view session_id, absl::string_view key,
                            absl::string_view value) const {
  RETURN_IF_ERROR(CheckKey(session_id, key, value));
  absl::MutexLock lock(&mu_);
  return CheckRoomLocked(key, value);
}

void KvStore::Restore(const std::string& key, const std::string& value) {
  absl::MutexLock lock(&mu_);
  PutLocked(key, value);
}

absl::StatusOr<std::vector<std::string>> KvStore::Get(
    absl::string_view session_id, const std::vector<std::string>& keys) const {
  RETURN_IF_ERROR(CheckSession(session_id, options_.session_id));
  std::vector<std::string> values;
  values.reserve(keys.size());
  absl::MutexLock lock(&mu_);
  for (const std::string& key : keys) {
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      return absl::NotFoundError(
          absl::StrCat("store key ", Printable(key), " is not set (yet)"));
    }
    values.push_back(it->second);
  }
  return values;
}

int64_t KvStore::PurgeBefore(int64_t epoch) {
  const std::string prefix = absl::StrCat(options_.session_id, "/e");
  int64_t purged = 0;
  absl::MutexLock lock(&mu_);
  for (auto it = entries_.lower_bound(prefix);
       it != entries_.end() && absl::StartsWith(it->first, prefix);) {
    absl::string_view rest = absl::string_view(it->first).substr(prefix.size());
    int64_t key_epoch = 0;
    const size_t slash = rest.find('/');
    if (slash != absl::string_view::npos &&
        absl::SimpleAtoi(rest.substr(0, slash), &key_epoch) &&
        key_epoch < epoch) {
      bytes_ -= static_cast<int64_t>(it->first.size() + it->second.size());
      it = entries_.erase(it);
      ++purged;
    } else {
      ++it;
    }
  }
  return purged;
}

KvStore::Usage KvStore::usage() const {
  absl::MutexLock lock(&mu_);
  return Usage{static_cast<int64_t>(entries_.size()), bytes_};
}

}  // namespace dcp
