#include "comm/fake_world_communicator.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dcp {

class FakeWorld::MemberImpl final : public WorldCommunicator {
 public:
  MemberImpl(std::shared_ptr<FakeWorld> world, int rank,
             std::unique_ptr<FakeCommunicator> comm)
      : world_(std::move(world)), rank_(rank), comm_(std::move(comm)) {}

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }

  absl::Status AllReduceSumHost(float* data, size_t count) override {
    RETURN_IF_ERROR(comm_->AllReduceSum(data, count));
    if (rank_ == 0) ++world_->all_reduces_;
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color,
                                                      int key) override {
    FakeWorld& w = *world_;
    w.colors_[rank_] = color;
    w.keys_[rank_] = key;
    RETURN_IF_ERROR(comm_->Barrier());
    // The member that sorts first in its color forms the group for all.
    std::vector<int> mine;
    for (int r = 0; r < size(); ++r) {
      if (color != kNoColor && w.colors_[r] == color) mine.push_back(r);
    }
    std::sort(mine.begin(), mine.end(), [&w](int a, int b) {
      return std::make_pair(w.keys_[a], a) < std::make_pair(w.keys_[b], b);
    });
    if (!mine.empty() && mine.front() == rank_) {
      auto group = FakeCommunicator::Group(static_cast<int>(mine.size()),
                                           w.timeout_, w.stats_);
      for (size_t i = 0; i < mine.size(); ++i) {
        w.out_[mine[i]] = std::move(group[i]);
      }
    }
    RETURN_IF_ERROR(comm_->Barrier());
    std::unique_ptr<Communicator> child = std::move(w.out_[rank_]);
    if (rank_ == 0) ++w.splits_;
    // Nobody writes the next split's colors before everyone has read these.
    RETURN_IF_ERROR(comm_->Barrier());
    return child;
  }

  void Abort() override {
    if (!aborted_.exchange(true)) ++world_->aborted_;
    comm_->Abort();
  }

 private:
  const std::shared_ptr<FakeWorld> world_;
  const int rank_;
  const std::unique_ptr<FakeCommunicator> comm_;
  std::atomic<bool> aborted_{false};
};

FakeWorld::FakeWorld(int size, absl::Duration timeout,
                     std::shared_ptr<FakeCommunicatorStats> stats)
    : timeout_(timeout),
      stats_(std::move(stats)),
      members_(FakeCommunicator::Group(size, timeout)),
      colors_(size, WorldCommunicator::kNoColor),
      keys_(size, 0),
      out_(size) {}

std::shared_ptr<FakeWorld> FakeWorld::Make(
    int size, absl::Duration timeout,
    std::shared_ptr<FakeCommunicatorStats> stats) {
  return std::shared_ptr<FakeWorld>(
      new FakeWorld(size, timeout, std::move(stats)));
}

std::unique_ptr<WorldCommunicator> FakeWorld::Member(int rank) {
  if (rank < 0 || rank >= size() || members_[rank] == nullptr) return nullptr;
  return std::make_unique<MemberImpl>(shared_from_this(), rank,
                                      std::move(members_[rank]));
}

absl::StatusOr<std::unique_ptr<WorldCommunicator>> FakeWorlds::Member(
    int64_t epoch, int rank) {
  std::vector<int> all(size_);
  for (int r = 0; r < size_; ++r) all[r] = r;
  return Member(epoch, all, rank);
}

absl::StatusOr<std::unique_ptr<WorldCommunicator>> FakeWorlds::Member(
    int64_t epoch, const std::vector<int>& members, int rank) {
  const auto it = std::lower_bound(members.begin(), members.end(), rank);
  const int index = static_cast<int>(it - members.begin());
  std::shared_ptr<FakeWorld> world =
      WorldOfSize(epoch, static_cast<int>(members.size()));
  std::unique_ptr<WorldCommunicator> member;
  if (it != members.end() && *it == rank &&
      world->size() == static_cast<int>(members.size())) {
    member = world->Member(index);
  }
  if (member == nullptr) {
    return absl::InternalError(absl::StrCat(
        "rank ", rank, " of the world of epoch ", epoch, " (", members.size(),
        " members; the world has ", world->size(),
        ") was taken already or is not in it"));
  }
  return member;
}

std::shared_ptr<FakeWorld> FakeWorlds::World(int64_t epoch) {
  return WorldOfSize(epoch, size_);
}

std::shared_ptr<FakeWorld> FakeWorlds::WorldOfSize(int64_t epoch, int size) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<FakeWorld>& world = worlds_[epoch];
  if (world == nullptr) world = FakeWorld::Make(size, timeout_);
  return world;
}

}  // namespace dcp
