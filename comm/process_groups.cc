#include "comm/process_groups.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "comm/c10d_store.h"
#include "comm/collectives.h"
#include "gloo/common/error.h"
#include "torch/csrc/distributed/c10d/PrefixStore.hpp"
#include "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"
#include "torch/csrc/distributed/c10d/exception.h"

namespace dcp {
namespace {

std::chrono::milliseconds ToMillis(absl::Duration d) {
  return std::chrono::milliseconds(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

// A ProcessGroupGloo that can be aborted: 1.13's has no abort, but its
// contexts are reachable from a subclass, and closing their pairs fails the
// peers' collectives at once instead of after their timeout.
class AbortableProcessGroupGloo final : public c10d::ProcessGroupGloo {
 public:
  using c10d::ProcessGroupGloo::ProcessGroupGloo;

  void Abort() {
    for (const std::shared_ptr<::gloo::Context>& context : contexts_) {
      try {
        context->closeConnections();
      } catch (const std::exception&) {
        // A pair already broken has nothing left to close.
      }
    }
  }
};

// Message and code of an exception thrown while forming a group.
absl::Status FromException(const std::exception& e) {
  if (dynamic_cast<const c10d::TimeoutError*>(&e) != nullptr) {
    return absl::DeadlineExceededError(e.what());
  }
  if (dynamic_cast<const gloo::IoException*>(&e) != nullptr) {
    return SaysTimedOut(e.what()) ? absl::DeadlineExceededError(e.what())
                                  : absl::UnavailableError(e.what());
  }
  return absl::InternalError(ExceptionText(e));
}

void IgnoreSigpipeIfDefault() {
  struct sigaction current;
  if (sigaction(SIGPIPE, nullptr, &current) != 0) return;
  if ((current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == SIG_DFL) {
    struct sigaction ignore = {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, nullptr);
  }
}

/// Why `rank` cannot ask for group `key` under `prefix`, if it cannot.
absl::Status CheckGroupRequest(const CommKey& key, int rank,
                               const std::string& prefix) {
  if (absl::Status s = key.Validate(); !s.ok()) return s;
  if (key.GroupRank(rank) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is not a member of group ", key.ToString()));
  }
  if (prefix.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", key.ToString(),
                     " has no rendezvous prefix: plans must come from a "
                     "scheduler (CommGroup.rendezvous_prefix)"));
  }
  return absl::OkStatus();
}

// The store prefix a task's whole group meets under.
std::string WholeGroupPrefix(const std::string& prefix) {
  return absl::StrCat(absl::StripSuffix(prefix, "/"), "/c10d");
}

}  // namespace

struct ProcessGroups::Group {
  c10::intrusive_ptr<AbortableProcessGroupGloo> process_group;
};

struct ProcessGroups::Device {
  std::shared_ptr<::gloo::transport::Device> device;
};

absl::StatusOr<std::unique_ptr<ProcessGroups>> ProcessGroups::Create(
    RendezvousStoreInterface* store, Options options) {
  if (store == nullptr) {
    return absl::InvalidArgumentError("ProcessGroups: null rendezvous store");
  }
  if (options.rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ProcessGroups: rank ", options.rank, " is negative"));
  }
  if (options.timeout <= absl::ZeroDuration() || options.threads < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ProcessGroups: the timeout must be positive and threads at least 1, "
        "not ",
        absl::FormatDuration(options.timeout), " and ", options.threads));
  }
  auto device = std::make_unique<Device>();
  try {
    device->device =
        c10d::ProcessGroupGloo::createDeviceForHostname(options.hostname);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("ProcessGroups: no Gloo device on '", options.hostname,
                     "': ", FromException(e).message()));
  }
  if (options.clock == nullptr) options.clock = RealClock::Default();
  if (options.ignore_sigpipe) IgnoreSigpipeIfDefault();
  return absl::WrapUnique(
      new ProcessGroups(store, std::move(options), std::move(device)));
}

ProcessGroups::ProcessGroups(RendezvousStoreInterface* store, Options options,
                             std::unique_ptr<Device> device)
    : store_(store), options_(std::move(options)), device_(std::move(device)) {}

ProcessGroups::~ProcessGroups() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    warm_queue_.clear();
  }
  if (warm_thread_.joinable()) warm_thread_.join();
  AbortAll();
  absl::flat_hash_map<Slot, Entry> entries;
  {
    absl::MutexLock lock(&mu_);
    entries.swap(entries_);
  }
  // Destroyed here, without the lock: each joins its worker threads.
}

absl::StatusOr<c10d::ProcessGroup*> ProcessGroups::Get(
    const CommKey& key, const std::string& prefix) {
  if (absl::Status s = CheckGroupRequest(key, options_.rank, prefix); !s.ok()) {
    return s;
  }
  return GetSlot(Slot(key, std::string()), WholeGroupPrefix(prefix));
}

absl::Status ProcessGroups::Warm(const std::vector<CommGroupSpec>& groups) {
  for (const CommGroupSpec& spec : groups) {
    if (absl::Status s = CheckGroupRequest(spec.key, options_.rank,
                                           spec.prefix);
        !s.ok()) {
      return s;
    }
  }
  absl::MutexLock lock(&mu_);
  if (stopping_ || aborted_) return absl::OkStatus();
  for (const CommGroupSpec& spec : groups) {
    if (spec.key.epoch < min_epoch_) continue;
    if (entries_.contains(Slot(spec.key, std::string()))) continue;
    warm_queue_.push_back(spec);
  }
  if (!warm_thread_.joinable() && !warm_queue_.empty()) {
    warm_thread_ = std::thread([this] { WarmLoop(); });
  }
  return absl::OkStatus();
}

void ProcessGroups::WarmLoop() {
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
    }
    // Its error is the next Get's (Keep keeps it).
    GetSlot(Slot(spec.key, std::string()), WholeGroupPrefix(spec.prefix),
            /*warm=*/true)
        .IgnoreError();
  }
}

bool ProcessGroups::Quiesce(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  warm_queue_.clear();
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::none_of(entries_.begin(), entries_.end(),
                        [](const auto& e) { return e.second.forming; });
  };
  return options_.clock->AwaitWithTimeout(&mu_, absl::Condition(&idle),
                                          timeout);
}

absl::StatusOr<ProcessGroups::HybridGroups> ProcessGroups::Hybrid(
    const CommKey& key, int ulysses, const std::string& prefix) {
  if (absl::Status s = CheckGroupRequest(key, options_.rank, prefix); !s.ok()) {
    return s;
  }
  const int p = static_cast<int>(key.ranks.size());
  if (ulysses < 1 || p % ulysses != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group ", key.ToString(), ": the Ulysses degree u = ", ulysses,
        " does not divide the group of p = ", p));
  }
  const int u = ulysses, c = p / u;
  const int m = key.GroupRank(options_.rank), j = m / u, i = m % u;
  // The degree is in the name: tasks of one prefix may differ in u.
  const std::string base =
      absl::StrCat(absl::StripSuffix(prefix, "/"), "/h", u);
  // Members first, first + stride, ... (count of them) of the task group,
  // as a group of their own under `where`.
  auto sub =
      [&](int first, int stride, int count,
          const std::string& where) -> absl::StatusOr<c10d::ProcessGroup*> {
    std::vector<int> ranks;
    for (int t = 0; t < count; ++t) {
      ranks.push_back(key.ranks[first + t * stride]);
    }
    absl::StatusOr<CommKey> sub_key =
        CommKey::Make(std::move(ranks), key.epoch, key.purpose);
    if (!sub_key.ok()) return sub_key.status();
    return GetSlot(Slot(*std::move(sub_key), where), where);
  };
  HybridGroups groups;
  if (u > 1) {
    absl::StatusOr<c10d::ProcessGroup*> group =
        sub(j * u, 1, u, absl::StrCat(base, "/u", j));
    if (!group.ok()) return group.status();
    groups.ulysses = *group;
  }
  if (c > 1) {
    absl::StatusOr<c10d::ProcessGroup*> group =
        sub(i, u, c, absl::StrCat(base, "/r", i));
    if (!group.ok()) return group.status();
    groups.ring = *group;
  }
  return groups;
}

absl::StatusOr<c10d::ProcessGroup*> ProcessGroups::GetSlot(
    const Slot& slot, const std::string& where, bool warm) {
  bool form = false;
  absl::StatusOr<c10d::ProcessGroup*> held = Claim(slot, warm, &form);
  if (!form) return held;

  const absl::Time start = options_.clock->Now();
  absl::StatusOr<std::unique_ptr<Group>> formed = Form(slot.first, where);
  if (formed.ok() && options_.on_formed) {
    options_.on_formed(options_.clock->Now() - start);
  }
  return Keep(slot, std::move(formed), warm);
}

absl::StatusOr<c10d::ProcessGroup*> ProcessGroups::Claim(const Slot& slot,
                                                         bool warm,
                                                         bool* form) {
  const CommKey& key = slot.first;
  absl::MutexLock lock(&mu_);
  bool counted = false;  // A Get counts once, as a hit or a miss.
  while (true) {
    if (aborted_) {
      return absl::AbortedError(
          absl::StrCat("group ", key.ToString(), ": the groups are aborted"));
    }
    if (key.epoch < min_epoch_) {
      return absl::FailedPreconditionError(
          absl::StrCat("group ", key.ToString(), ": epochs before ", min_epoch_,
                       " are evicted"));
    }
    auto it = entries_.find(slot);
    if (it == entries_.end()) break;
    // A warm-up leaves a group held, being formed or failed alone.
    if (warm) return nullptr;
    Entry& entry = it->second;
    if (!entry.forming && entry.group == nullptr) {
      // A warm-up failed: this Get hears of it, the next forms again.
      absl::Status failed = std::move(entry.failed);
      entries_.erase(it);
      return failed;
    }
    if (!counted) {
      ++stats_.hits;
      counted = true;
    }
    if (!entry.forming) return entry.group->process_group.get();
    // Another thread forms it: wait for that formation to end.
    auto settled = [this, &slot]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto found = entries_.find(slot);
      return aborted_ || found == entries_.end() || !found->second.forming;
    };
    mu_.Await(absl::Condition(&settled));
  }
  if (!warm && !counted) ++stats_.misses;
  entries_[slot].forming = true;
  *form = true;
  return nullptr;
}

absl::StatusOr<c10d::ProcessGroup*> ProcessGroups::Keep(
    const Slot& slot, absl::StatusOr<std::unique_ptr<Group>> formed,
    bool warm) {
  const CommKey& key = slot.first;
  std::unique_ptr<Group> discard;  // Destroyed after the lock is released.
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(slot);
  if (!formed.ok()) {
    ++stats_.failures;
    if (warm && !aborted_) {
      it->second.forming = false;
      it->second.failed = formed.status();
    } else {
      entries_.erase(it);
    }
    return formed.status();
  }
  if (aborted_ || key.epoch < min_epoch_) {
    (*formed)->process_group->Abort();
    discard = *std::move(formed);
    entries_.erase(it);
    if (aborted_) {
      return absl::AbortedError(absl::StrCat(
          "group ", key.ToString(), ": aborted while it was being formed"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("group ", key.ToString(),
                     ": its epoch was evicted while it was being formed"));
  }
  it->second.forming = false;
  it->second.group = *std::move(formed);
  if (warm) ++stats_.warmed;
  return it->second.group->process_group.get();
}

absl::StatusOr<std::unique_ptr<ProcessGroups::Group>> ProcessGroups::Form(
    const CommKey& key, const std::string& where) {
  const int group_rank = key.GroupRank(options_.rank);
  const int size = static_cast<int>(key.ranks.size());
  C10dRendezvousStore::Options store_options;
  const absl::Duration formation =
      options_.timeout_of ? options_.timeout_of(key)
      : key.purpose == CommPurpose::kDataParallel &&
              options_.dp_timeout > absl::ZeroDuration()
          ? options_.dp_timeout
          : options_.timeout;
  store_options.timeout = formation;
  store_options.deadline = options_.clock->Now() + formation;
  store_options.clock = options_.clock;
  absl::StatusOr<c10::intrusive_ptr<C10dRendezvousStore>> store =
      C10dRendezvousStore::Create(store_, store_options);
  if (!store.ok()) return store.status();

  auto gloo_options =
      c10d::ProcessGroupGloo::Options::create(ToMillis(formation));
  gloo_options->devices = {device_->device};
  gloo_options->threads = options_.threads;
  auto group = std::make_unique<Group>();
  try {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(where, *store);
    group->process_group = c10::make_intrusive<AbortableProcessGroupGloo>(
        prefixed, group_rank, size, gloo_options);
    return group;
  } catch (const std::exception& e) {
    // The store's own status says best what went wrong (which keys are
    // missing); Gloo's exception is the fallback.
    absl::Status cause = (*store)->last_error();
    if (cause.ok()) cause = FromException(e);
    return absl::Status(
        cause.code(),
        absl::StrCat("forming c10d group ", key.ToString(), " as its rank ",
                     group_rank, " (global ", options_.rank, ") under '", where,
                     "': ", cause.message()));
  }
}

absl::StatusOr<c10d::ProcessGroup*> ProcessGroups::DataParallel(
    int world_size, int64_t epoch, const std::string& prefix) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("data-parallel group of ", world_size, " ranks"));
  }
  std::vector<int> ranks(world_size);
  std::iota(ranks.begin(), ranks.end(), 0);
  return DataParallel(std::move(ranks), epoch, prefix);
}

absl::StatusOr<c10d::ProcessGroup*> ProcessGroups::DataParallel(
    std::vector<int> ranks, int64_t epoch, const std::string& prefix) {
  if (!std::is_sorted(ranks.begin(), ranks.end())) {
    return absl::InvalidArgumentError(
        absl::StrCat("data-parallel group [", absl::StrJoin(ranks, ","),
                     "]: its ranks are not ascending"));
  }
  absl::StatusOr<CommKey> key =
      CommKey::Make(std::move(ranks), epoch, CommPurpose::kDataParallel);
  if (!key.ok()) return key.status();
  return Get(*key, prefix);
}

void ProcessGroups::AbortAll() {
  absl::MutexLock lock(&mu_);
  aborted_ = true;
  for (auto& [key, entry] : entries_) {
    if (entry.group != nullptr) entry.group->process_group->Abort();
  }
}

int ProcessGroups::EvictBefore(int64_t epoch) {
  std::vector<std::unique_ptr<Group>> evicted;
  {
    absl::MutexLock lock(&mu_);
    min_epoch_ = std::max(min_epoch_, epoch);
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->first.first.epoch < epoch && !it->second.forming) {
        if (it->second.group != nullptr) {
          it->second.group->process_group->Abort();
          evicted.push_back(std::move(it->second.group));
        }
        entries_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  return static_cast<int>(evicted.size());
}

int ProcessGroups::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(
      std::count_if(entries_.begin(), entries_.end(), [](const auto& e) {
        return e.second.forming || e.second.group != nullptr;
      }));
}

ProcessGroups::Stats ProcessGroups::stats() const {
  Stats stats;
  {
    absl::MutexLock lock(&mu_);
    stats = stats_;
  }
  stats.live = size();
  return stats;
}

}  // namespace dcp
