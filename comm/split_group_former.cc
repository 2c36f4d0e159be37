#include "comm/split_group_former.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/split_plan.h"
#include "common/status_macros.h"

namespace dcp {
namespace {

CommKey DataParallelKey(std::vector<int> members, int64_t epoch) {
  CommKey key;
  key.ranks = std::move(members);
  key.epoch = epoch;
  key.purpose = CommPurpose::kDataParallel;
  return key;
}

std::string Ranks(const std::vector<int>& ranks) {
  return absl::StrCat("[", absl::StrJoin(ranks, ","), "]");
}

/// OK when `members` are ascending ranks of a job of `world_size` that
/// hold `rank`.
absl::Status CheckMembers(const std::vector<int>& members, int rank,
                          int world_size) {
  const bool ascending =
      std::adjacent_find(members.begin(), members.end(),
                         std::greater_equal<int>()) == members.end();
  if (members.empty() || !ascending || members.front() < 0 ||
      members.back() >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the world ", Ranks(members),
                     " is not ascending ranks of a job of ", world_size));
  }
  if (!std::binary_search(members.begin(), members.end(), rank)) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank, " is not in the world ", Ranks(members),
                     " (it was left out of the epoch, as a failed rank)"));
  }
  return absl::OkStatus();
}

absl::Status WithContext(const absl::Status& status, absl::string_view what) {
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SplitGroupFormer>> SplitGroupFormer::Create(
    Options options) {
  if (options.world_size < 1 || options.rank < 0 ||
      options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SplitGroupFormer: rank ", options.rank, " is not in a world of ",
        options.world_size));
  }
  if (!options.make_world) {
    return absl::InvalidArgumentError("SplitGroupFormer: make_world is empty");
  }
  if (options.take_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "SplitGroupFormer: take_timeout must be positive");
  }
  auto former = absl::WrapUnique(new SplitGroupFormer(std::move(options)));
  former->thread_ = std::thread(&SplitGroupFormer::Loop, former.get());
  return former;
}

SplitGroupFormer::SplitGroupFormer(Options options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock
                                       : RealClock::Default()) {}

SplitGroupFormer::~SplitGroupFormer() {
  Cancel();
  if (thread_.joinable()) thread_.join();
  // Then `world_` and the groups never taken go, on this thread.
}

void SplitGroupFormer::AddStep(int64_t epoch, int64_t step,
                               std::vector<std::vector<int>> groups,
                               std::vector<int> world) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return;
  queue_.push_back(
      PendingStep{epoch, step, std::move(groups), std::move(world)});
}

std::vector<int> SplitGroupFormer::MembersOf(const PendingStep& step) const {
  if (!step.world.empty()) return step.world;
  std::vector<int> all(options_.world_size);
  std::iota(all.begin(), all.end(), 0);
  return all;
}

void SplitGroupFormer::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  queue_.clear();
  if (live_world_ != nullptr) live_world_->Abort();
  // Nobody will take them: aborted, they are freed without a finalize that
  // could wait for peers.
  for (auto& [key, comm] : ready_) comm->Abort();
}

SplitGroupFormer::Stats SplitGroupFormer::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void SplitGroupFormer::Loop() {
  while (true) {
    PendingStep next;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return cancelled_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (cancelled_) return;
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    Process(next);
  }
}

void SplitGroupFormer::Process(const PendingStep& step) {
  int64_t epoch;
  bool failed;
  {
    absl::MutexLock lock(&mu_);
    ++stats_.steps;
    epoch = epoch_;
    failed = !epoch_error_.ok();
  }
  if (step.epoch < epoch) return;  // Steps come in order: a stale one.
  std::vector<int> members = MembersOf(step);
  if (step.epoch > epoch) {
    if (absl::Status s = EnterEpoch(step.epoch, std::move(members));
        !s.ok()) {
      Fail(step.epoch, WithContext(s, absl::StrCat("forming the world of "
                                                   "epoch ",
                                                   step.epoch)));
      return;
    }
  } else if (failed) {
    return;
  } else if (members != members_) {
    Fail(step.epoch,
         absl::FailedPreconditionError(absl::StrCat(
             "step ", step.step, " of epoch ", step.epoch, " names the world ",
             Ranks(members), ", the epoch's first step ", Ranks(members_))));
    return;
  }
  if (absl::Status s = SplitStep(step); !s.ok()) {
    Fail(step.epoch,
         WithContext(s, absl::StrCat("splitting the groups of step ",
                                     step.step, " of epoch ", step.epoch)));
  }
}

void SplitGroupFormer::LeaveWorld(const std::vector<int>& members) {
  const bool shrunk = !std::includes(members.begin(), members.end(),
                                     members_.begin(), members_.end());
  // Same members: destroyed, not aborted, since a peer may still be
  // finishing the last exchange on it (finalizing lets it; every member
  // does this at the same step). What was split from it does not depend
  // on it.
  if (shrunk && world_ != nullptr) world_->Abort();
  world_.reset();
  formed_.clear();
}

absl::Status SplitGroupFormer::EnterEpoch(int64_t epoch,
                                          std::vector<int> members) {
  {
    absl::MutexLock lock(&mu_);
    epoch_ = epoch;
    epoch_error_ = absl::OkStatus();
    live_world_ = nullptr;
  }
  LeaveWorld(members);
  members_ = std::move(members);
  world_rank_ = -1;
  RETURN_IF_ERROR(CheckMembers(members_, options_.rank, options_.world_size));
  const int index = static_cast<int>(
      std::lower_bound(members_.begin(), members_.end(), options_.rank) -
      members_.begin());
  const int size = static_cast<int>(members_.size());
  ASSIGN_OR_RETURN(std::unique_ptr<WorldCommunicator> world,
                   options_.make_world(epoch, members_));
  if (world == nullptr || world->size() != size || world->rank() != index) {
    return absl::InternalError(absl::StrCat(
        "the world factory returned ",
        world == nullptr ? "no communicator"
                         : absl::StrCat("rank ", world->rank(), " of ",
                                        world->size()),
        ", expected rank ", index, " of ", size, " (world ", Ranks(members_),
        ")"));
  }
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) world->Abort();
    live_world_ = world.get();
    ++stats_.worlds;
  }
  world_ = std::move(world);
  world_rank_ = index;
  if (size < 2) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> all,
                   world_->Split(/*color=*/0, /*key=*/world_rank_));
  {
    absl::MutexLock lock(&mu_);
    ++stats_.splits;
  }
  if (all == nullptr) return absl::InternalError("the world split to nothing");
  Publish(DataParallelKey(members_, epoch), std::move(all));
  return absl::OkStatus();
}

absl::Status SplitGroupFormer::SplitStep(const PendingStep& step) {
  const int world = static_cast<int>(members_.size());
  std::set<std::vector<int>> mine_set;
  for (const std::vector<int>& group : step.groups) {
    if (formed_.count(group) == 0) mine_set.insert(group);
  }
  // The exchange and the splits are in world indices; keys and `formed_`
  // in global ranks, as the plans name groups.
  ASSIGN_OR_RETURN(
      const std::vector<std::vector<int>> mine,
      ToWorldIndices({mine_set.begin(), mine_set.end()}, members_));
  std::vector<float> header = SplitHeader(world, world_rank_, step.step,
                                          static_cast<int>(mine.size()));
  RETURN_IF_ERROR(world_->AllReduceSumHost(header.data(), header.size()));
  ASSIGN_OR_RETURN(std::vector<int> counts,
                   ReadSplitHeader(header, world, step.step));
  if (std::all_of(counts.begin(), counts.end(),
                  [](int c) { return c == 0; })) {
    return absl::OkStatus();
  }
  std::vector<float> table = SplitTable(world, world_rank_, counts, mine);
  RETURN_IF_ERROR(world_->AllReduceSumHost(table.data(), table.size()));
  ASSIGN_OR_RETURN(std::vector<std::vector<int>> groups,
                   ReadSplitTable(table, world, counts));
  for (const std::vector<std::vector<int>>& round : SplitRounds(groups)) {
    RETURN_IF_ERROR(SplitRound(step.epoch, round));
  }
  for (const std::vector<int>& group : groups) {
    formed_.insert(ToGlobalRanks(group, members_));
  }
  return absl::OkStatus();
}

absl::Status SplitGroupFormer::SplitRound(
    int64_t epoch, const std::vector<std::vector<int>>& round) {
  const int color = SplitColor(round, world_rank_);
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> child,
                   world_->Split(color, /*key=*/world_rank_));
  {
    absl::MutexLock lock(&mu_);
    ++stats_.splits;
  }
  if (color < 0) {
    if (child != nullptr) {
      return absl::InternalError("a split gave a group to a rank in none");
    }
    return absl::OkStatus();
  }
  const std::vector<int>& group = round[color];
  if (child == nullptr || child->size() != static_cast<int>(group.size())) {
    return absl::InternalError(absl::StrCat(
        "the split of a group of ", group.size(), " ranks gave ",
        child == nullptr ? 0 : child->size()));
  }
  ASSIGN_OR_RETURN(CommKey key,
                   CommKey::Make(ToGlobalRanks(group, members_), epoch));
  Publish(std::move(key), std::move(child));
  return absl::OkStatus();
}

void SplitGroupFormer::Publish(CommKey key, std::unique_ptr<Communicator> comm) {
  absl::MutexLock lock(&mu_);
  ready_[std::move(key)] = std::move(comm);
}

void SplitGroupFormer::Fail(int64_t epoch, absl::Status status) {
  absl::MutexLock lock(&mu_);
  ++stats_.failures;
  if (epoch != epoch_ || !epoch_error_.ok()) return;
  epoch_error_ = std::move(status);
  // Peers blocked on this rank's part of the world fail instead of hanging.
  if (live_world_ != nullptr) live_world_->Abort();
}

std::optional<absl::StatusOr<std::unique_ptr<Communicator>>>
SplitGroupFormer::TryTake(const CommKey& key) {
  if (cancelled_) {
    return absl::CancelledError(absl::StrCat(
        "group ", key.ToString(), ": the NCCL group former was cancelled"));
  }
  if (auto it = ready_.find(key); it != ready_.end()) {
    std::unique_ptr<Communicator> comm = std::move(it->second);
    ready_.erase(it);
    taken_.insert(key);
    return std::move(comm);
  }
  if (taken_.contains(key)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group ", key.ToString(),
        " was handed out already: groups split from a world are formed once "
        "per epoch"));
  }
  if (key.epoch == epoch_ && !epoch_error_.ok()) {
    return absl::Status(epoch_error_.code(),
                        absl::StrCat("group ", key.ToString(), ": ",
                                     epoch_error_.message()));
  }
  if (key.epoch < epoch_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "group ", key.ToString(), " was not split from the world of epoch ",
        key.epoch, ", which is over (now epoch ", epoch_, ")"));
  }
  return std::nullopt;
}

absl::StatusOr<std::unique_ptr<Communicator>> SplitGroupFormer::Take(
    const CommKey& key) {
  RETURN_IF_ERROR(key.Validate());
  const absl::Time deadline = clock_->Now() + options_.take_timeout;
  absl::MutexLock lock(&mu_);
  // Evaluated by whichever thread releases the lock: no side effects.
  auto answerable = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cancelled_ || ready_.contains(key) || taken_.contains(key) ||
           key.epoch < epoch_ || (key.epoch == epoch_ && !epoch_error_.ok());
  };
  clock_->AwaitWithDeadline(&mu_, absl::Condition(&answerable), deadline);
  std::optional<absl::StatusOr<std::unique_ptr<Communicator>>> answer =
      TryTake(key);
  if (answer.has_value()) return *std::move(answer);
  return absl::DeadlineExceededError(absl::StrCat(
      "group ", key.ToString(), " was not split from the world within ",
      absl::FormatDuration(options_.take_timeout),
      ": no step handed in so far names it, or a rank of the world is "
      "behind (every rank must hand in every step)"));
}

}  // namespace dcp
