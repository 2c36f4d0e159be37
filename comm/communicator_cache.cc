#include "comm/communicator_cache.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dcp {

CommunicatorCache::CommunicatorCache(Factory factory)
    : CommunicatorCache(std::move(factory), Options()) {}

CommunicatorCache::CommunicatorCache(Factory factory, Options options)
    : factory_(std::move(factory)), options_(options) {}

CommunicatorCache::~CommunicatorCache() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    warm_queue_.clear();
  }
  // Waits for a formation in progress: a rendezvous cannot be cancelled, but
  // it ends within the factory's timeout.
  if (warm_thread_.joinable()) warm_thread_.join();
  absl::flat_hash_map<CommKey, Entry> entries;
  {
    absl::MutexLock lock(&mu_);
    entries.swap(entries_);
  }
  // Destroyed, not aborted: aborted ones were aborted once by AbortAll.
}

absl::Status CommunicatorCache::CheckEpoch(const CommKey& key) const {
  if (key.epoch < min_epoch_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "communicator group ", key.ToString(),
        " is of an evicted epoch (epochs before ", min_epoch_, " are gone)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Communicator*> CommunicatorCache::Get(
    const CommKey& key, const std::string& prefix) {
  if (absl::Status s = key.Validate(); !s.ok()) return s;
  {
    absl::MutexLock lock(&mu_);
    while (true) {
      if (absl::Status s = CheckEpoch(key); !s.ok()) return s;
      auto it = entries_.find(key);
      if (it == entries_.end()) {
        entries_[key];  // kForming: concurrent Gets and Warm wait for us.
        ++stats_.misses;
        break;
      }
      Entry& entry = it->second;
      switch (entry.state) {
        case State::kReady:
          ++stats_.hits;
          return entry.comm.get();
        case State::kAborted:
          return absl::AbortedError(
              absl::StrCat("communicator group ", key.ToString(),
                           " was aborted; form it again under a new epoch"));
        case State::kFailed: {
          absl::Status error = std::move(entry.error);
          entries_.erase(it);
          return absl::Status(error.code(),
                              absl::StrCat("warm-up of group ", key.ToString(),
                                           " failed: ", error.message()));
        }
        case State::kForming: {
          auto formed = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
            auto it = entries_.find(key);
            return it == entries_.end() || it->second.state != State::kForming;
          };
          mu_.Await(absl::Condition(&formed));
          break;  // Look again.
        }
      }
    }
  }

  absl::Status status = Form(CommGroupSpec{key, prefix}, /*by_warm=*/false);
  absl::MutexLock lock(&mu_);
  if (!status.ok()) return status;
  auto it = entries_.find(key);
  if (it == entries_.end()) return CheckEpoch(key);  // Evicted meanwhile.
  if (it->second.state == State::kAborted) {
    return absl::AbortedError(absl::StrCat("communicator group ",
                                           key.ToString(),
                                           " was aborted as it was formed"));
  }
  return it->second.comm.get();
}

absl::Status CommunicatorCache::Form(const CommGroupSpec& spec, bool by_warm) {
  int64_t generation;
  {
    absl::MutexLock lock(&mu_);
    generation = abort_generation_;
  }
  absl::StatusOr<std::unique_ptr<Communicator>> built =
      factory_(spec.key, spec.prefix);
  if (built.ok() && *built == nullptr) {
    built = absl::InternalError("communicator factory returned null");
  }
  std::unique_ptr<Communicator> stale;  // Destroyed after the lock is released.
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(spec.key);
  if (!built.ok()) {
    ++stats_.build_failures;
    if (by_warm) {
      it->second.state = State::kFailed;
      it->second.error = built.status();
    } else {
      entries_.erase(it);
    }
    return built.status();
  }
  if (spec.key.epoch < min_epoch_) {
    stale = std::move(*built);
    entries_.erase(it);
    ++stats_.evicted;
    return absl::OkStatus();
  }
  Entry& entry = it->second;
  entry.comm = std::move(*built);
  entry.state = State::kReady;
  if (generation != abort_generation_) {
    entry.comm->Abort();
    entry.state = State::kAborted;
  }
  if (by_warm) ++stats_.warmed;
  return absl::OkStatus();
}

absl::Status CommunicatorCache::Warm(const std::vector<CommGroupSpec>& groups) {
  for (const CommGroupSpec& group : groups) {
    if (absl::Status s = group.key.Validate(); !s.ok()) return s;
  }
  if (options_.warm_in_background) {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::OkStatus();
    warm_queue_.insert(warm_queue_.end(), groups.begin(), groups.end());
    if (!warm_thread_.joinable()) {
      warm_thread_ = std::thread(&CommunicatorCache::WarmLoop, this);
    }
    return absl::OkStatus();
  }
  for (const CommGroupSpec& group : groups) {
    {
      absl::MutexLock lock(&mu_);
      if (!CheckEpoch(group.key).ok() || entries_.contains(group.key)) continue;
      entries_[group.key];
    }
    // Failures are kept for the next Get of the group.
    Form(group, /*by_warm=*/true).IgnoreError();
  }
  return absl::OkStatus();
}

void CommunicatorCache::WarmLoop() {
  while (true) {
    CommGroupSpec spec;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !warm_queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      spec = std::move(warm_queue_.front());
      warm_queue_.pop_front();
      if (!CheckEpoch(spec.key).ok() || entries_.contains(spec.key)) continue;
      entries_[spec.key];
    }
    Form(spec, /*by_warm=*/true).IgnoreError();
  }
}

int CommunicatorCache::EvictBefore(int64_t epoch) {
  std::vector<std::unique_ptr<Communicator>> stale;
  {
    absl::MutexLock lock(&mu_);
    min_epoch_ = std::max(min_epoch_, epoch);
    for (auto it = entries_.begin(); it != entries_.end();) {
      auto current = it++;
      if (current->first.epoch >= min_epoch_) continue;
      // A group still forming is destroyed by Form once formed.
      if (current->second.state == State::kForming) continue;
      if (current->second.comm != nullptr) {
        stale.push_back(std::move(current->second.comm));
      }
      entries_.erase(current);
    }
    warm_queue_.erase(std::remove_if(warm_queue_.begin(), warm_queue_.end(),
                                     [this](const CommGroupSpec& spec) {
                                       mu_.AssertHeld();
                                       return spec.key.epoch < min_epoch_;
                                     }),
                      warm_queue_.end());
    stats_.evicted += static_cast<int64_t>(stale.size());
  }
  return static_cast<int>(stale.size());
}

void CommunicatorCache::AbortAll() {
  absl::MutexLock lock(&mu_);
  ++abort_generation_;
  // Queued groups would only wait for peers that are gone.
  warm_queue_.clear();
  for (auto& [key, entry] : entries_) {
    if (entry.state != State::kReady) continue;
    entry.comm->Abort();
    entry.state = State::kAborted;
  }
}

bool CommunicatorCache::Quiesce(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  warm_queue_.clear();
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::none_of(entries_.begin(), entries_.end(), [](const auto& e) {
      return e.second.state == State::kForming;
    });
  };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

CommunicatorCache::Stats CommunicatorCache::stats() const {
  absl::MutexLock lock(&mu_);
  Stats stats = stats_;
  stats.live = 0;
  for (const auto& [key, entry] : entries_) {
    if (entry.state != State::kFailed) ++stats.live;
  }
  return stats;
}

}  // namespace dcp
