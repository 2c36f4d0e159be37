#include "comm/split_group_former.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "comm/comm_key.h"
#include "comm/communicator.h"
#include "comm/communicator_cache.h"
#include "comm/fake_world_communicator.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

using Groups = std::vector<std::vector<int>>;

/// Bounds real waits that end on a condition.
constexpr absl::Duration kGuard = absl::Seconds(30);

std::unique_ptr<SplitGroupFormer> Former(FakeWorlds& worlds, int rank,
                                         int size, Clock* clock = nullptr) {
  SplitGroupFormer::Options options;
  options.rank = rank;
  options.world_size = size;
  options.make_world = [&worlds, rank](int64_t epoch,
                                       const std::vector<int>& members) {
    return worlds.Member(epoch, members, rank);
  };
  options.take_timeout = kGuard;
  options.clock = clock;
  absl::StatusOr<std::unique_ptr<SplitGroupFormer>> former =
      SplitGroupFormer::Create(std::move(options));
  EXPECT_TRUE(former.ok()) << former.status();
  return former.ok() ? *std::move(former) : nullptr;
}

CommKey Key(std::vector<int> ranks, int64_t epoch,
            CommPurpose purpose = CommPurpose::kSequenceParallel) {
  absl::StatusOr<CommKey> key = CommKey::Make(std::move(ranks), epoch, purpose);
  EXPECT_TRUE(key.ok()) << key.status();
  return *key;
}

/// Sums rank + 1 over `comm`: what every member of `members` should get.
absl::Status CheckSum(Communicator& comm, int rank,
                      const std::vector<int>& members) {
  float value = static_cast<float>(rank + 1);
  if (absl::Status s = comm.AllReduceSum(&value, 1); !s.ok()) return s;
  float expected = 0;
  for (int m : members) expected += static_cast<float>(m + 1);
  if (value != expected) {
    return absl::InternalError(absl::StrCat("sum ", value, " != ", expected));
  }
  return absl::OkStatus();
}

/// Runs `rank_body` for every rank of `worlds`, each on its own thread with
/// its own former, and returns what each rank's call returned.
std::vector<absl::Status> RunRanks(
    FakeWorlds& worlds, int size,
    const std::function<absl::Status(int rank, SplitGroupFormer& former)>&
        rank_body) {
  std::vector<absl::Status> results(size);
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      std::unique_ptr<SplitGroupFormer> former = Former(worlds, r, size);
      ASSERT_NE(former, nullptr);
      results[r] = rank_body(r, *former);
    });
  }
  for (std::thread& t : ranks) t.join();
  return results;
}

TEST(SplitGroupFormerTest, SplitsEachNewGroupOnceForItsMembersThroughACache) {
  constexpr int kWorld = 4;
  FakeWorlds worlds(kWorld, kGuard);
  // Rank r's groups at steps 0 and 1; rank 3 sits step 1 out.
  const std::vector<std::vector<Groups>> steps = {
      {{{0, 1}}, {{0, 1}}},
      {{{0, 1}}, {{0, 1}, {1, 2}}},
      {{{2, 3}}, {{1, 2}}},
      {{{2, 3}}, {}},
  };
  std::vector<SplitGroupFormer::Stats> stats(kWorld);
  const std::vector<absl::Status> results = RunRanks(
      worlds, kWorld, [&](int r, SplitGroupFormer& former) -> absl::Status {
        CommunicatorCache cache(
            [&former](const CommKey& key, const std::string&) {
              return former.Take(key);
            });
        auto run = [&]() -> absl::Status {
          for (int64_t s = 0; s < 2; ++s) {
            former.AddStep(/*epoch=*/0, s, steps[r][s]);
            for (const std::vector<int>& group : steps[r][s]) {
              absl::StatusOr<Communicator*> comm = cache.Get(Key(group, 0), "");
              if (!comm.ok()) return comm.status();
              if ((*comm)->size() != static_cast<int>(group.size())) {
                return absl::InternalError("wrong group size");
              }
              if (absl::Status c = CheckSum(**comm, r, group); !c.ok()) {
                return c;
              }
            }
            absl::StatusOr<Communicator*> all =
                cache.Get(Key({0, 1, 2, 3}, 0, CommPurpose::kDataParallel), "");
            if (!all.ok()) return all.status();
            if (absl::Status c = CheckSum(**all, r, {0, 1, 2, 3}); !c.ok()) {
              return c;
            }
          }
          // The cache holds it now: the former hands a group out once.
          absl::Status again = former.Take(Key(steps[r][0][0], 0)).status();
          if (again.code() != absl::StatusCode::kFailedPrecondition) {
            return absl::InternalError(
                absl::StrCat("second take: ", again.ToString()));
          }
          return absl::OkStatus();
        };
        absl::Status result = run();
        stats[r] = former.stats();
        return result;
      });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
    EXPECT_EQ(stats[r].worlds, 1);
    EXPECT_EQ(stats[r].failures, 0);
  }
  // The data-parallel group, step 0's [0,1] and [2,3] in one split, step
  // 1's [1,2] (its [0,1] is held already) in another.
  EXPECT_EQ(worlds.World(0)->splits(), 3);
  // Two exchanges a step: both steps had new groups.
  EXPECT_EQ(worlds.World(0)->all_reduces(), 4);
}

TEST(SplitGroupFormerTest, ANewEpochFormsANewWorld) {
  FakeWorlds worlds(2, kGuard);
  const std::vector<absl::Status> results =
      RunRanks(worlds, 2, [](int r, SplitGroupFormer& former) -> absl::Status {
        former.AddStep(0, 0, {{0, 1}});
        former.AddStep(1, 0, {{0, 1}});
        absl::StatusOr<std::unique_ptr<Communicator>> late =
            former.Take(Key({0, 1}, 1));
        if (!late.ok()) return late.status();
        absl::Status result = CheckSum(**late, r, {0, 1});
        // Epoch 0's group was split (and is still there to take); an epoch-0
        // group no step named is refused now that epoch 1 is here.
        if (result.ok() && !former.Take(Key({0, 1}, 0)).ok()) {
          result = absl::InternalError("epoch 0's group is gone");
        }
        absl::Status over =
            former.Take(Key({0, 1}, 0, CommPurpose::kDataParallel)).status();
        if (result.ok() && !over.ok()) {
          result = absl::InternalError("epoch 0's data-parallel group");
        }
        EXPECT_EQ(former.stats().worlds, 2);
        return result;
      });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
  }
  EXPECT_EQ(worlds.World(0)->splits(), 2);
  EXPECT_EQ(worlds.World(1)->splits(), 2);
  // The same members: epoch 0's world was finalized, not aborted (the
  // formers' destructors abort only epoch 1's).
  EXPECT_EQ(worlds.World(0)->aborted(), 0);
}

// Issue 11: after rank 1 failed and the world shrank, epoch 1's world spans
// [0, 2, 3] only (world ranks 0, 1, 2). It forms and splits the
// data-parallel group and the step's groups while rank 1 is absent: alive
// but silent, it hands in no step of epoch 1 and still holds its member of
// epoch 0's world. A world that waited for it would fail at its short
// timeout.
TEST(SplitGroupFormerTest, AShrunkEpochsWorldFormsAndSplitsWithoutTheDeadRank) {
  constexpr int kJob = 4;
  const std::vector<int> survivors = {0, 2, 3};
  FakeWorlds worlds(kJob, absl::Seconds(5));
  // Epoch 0, every rank: [0,1] and [2,3]. Epoch 1: [0,2] and [2,3].
  const Groups before[kJob] = {{{0, 1}}, {{0, 1}}, {{2, 3}}, {{2, 3}}};
  const Groups after[kJob] = {{{0, 2}}, {}, {{0, 2}, {2, 3}}, {{2, 3}}};
  absl::Notification survivors_done;
  std::vector<absl::Status> results(kJob);
  std::vector<SplitGroupFormer::Stats> stats(kJob);
  auto take_and_sum = [](SplitGroupFormer& former, int r, const Groups& groups,
                         int64_t epoch) -> absl::Status {
    for (const std::vector<int>& group : groups) {
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          former.Take(Key(group, epoch));
      if (!comm.ok()) return comm.status();
      RETURN_IF_ERROR(CheckSum(**comm, r, group));
    }
    return absl::OkStatus();
  };
  std::vector<std::thread> ranks;
  for (int r = 0; r < kJob; ++r) {
    ranks.emplace_back([&, r] {
      std::unique_ptr<SplitGroupFormer> former = Former(worlds, r, kJob);
      ASSERT_NE(former, nullptr);
      former->AddStep(0, 0, before[r]);
      results[r] = take_and_sum(*former, r, before[r], 0);
      if (r == 1) {  // The failed rank: gone from here on.
        survivors_done.WaitForNotification();
        return;
      }
      former->AddStep(1, 5, after[r], survivors);
      if (results[r].ok()) results[r] = take_and_sum(*former, r, after[r], 1);
      absl::StatusOr<std::unique_ptr<Communicator>> all =
          former->Take(Key(survivors, 1, CommPurpose::kDataParallel));
      if (results[r].ok()) {
        results[r] = all.ok() ? CheckSum(**all, r, survivors) : all.status();
      }
      stats[r] = former->stats();
    });
  }
  for (int r : survivors) ranks[r].join();
  // Before rank 1 leaves: each survivor aborted its member of epoch 0's
  // world (a finalize could wait for rank 1); rank 1's is untouched.
  EXPECT_EQ(worlds.World(0)->aborted(), 3);
  survivors_done.Notify();
  ranks[1].join();
  for (int r = 0; r < kJob; ++r) {
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
  }
  for (int r : survivors) {
    EXPECT_EQ(stats[r].worlds, 2) << "rank " << r;
    EXPECT_EQ(stats[r].failures, 0) << "rank " << r;
  }
  EXPECT_EQ(worlds.World(1)->size(), 3);
  // The data-parallel group, then [0,2] and [2,3] (they share rank 2) in
  // two rounds.
  EXPECT_EQ(worlds.World(1)->splits(), 3);
}

TEST(SplitGroupFormerTest, ARankLeftOutOfTheEpochsWorldFormsNone) {
  FakeWorlds worlds(4, kGuard);
  std::unique_ptr<SplitGroupFormer> former = Former(worlds, 1, 4);
  ASSERT_NE(former, nullptr);
  former->AddStep(2, 0, {}, {0, 2, 3});
  absl::Status status =
      former->Take(Key({0, 2, 3}, 2, CommPurpose::kDataParallel)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr("rank 1 is not in the world [0,2,3]"));
  EXPECT_EQ(former->stats().worlds, 0);
}

TEST(SplitGroupFormerTest, RanksThatDisagreeFailTheEpochOnEveryRank) {
  FakeWorlds worlds(2, kGuard);
  const std::vector<absl::Status> results =
      RunRanks(worlds, 2, [](int r, SplitGroupFormer& former) -> absl::Status {
        // Rank 1's plan does not have the group rank 0's has.
        former.AddStep(0, 0, r == 0 ? Groups{{0, 1}} : Groups{});
        absl::Status result = former.Take(Key({0, 1}, 0)).status();
        EXPECT_EQ(former.stats().failures, 1);
        return result;
      });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].code(), absl::StatusCode::kFailedPrecondition)
        << results[r];
    EXPECT_THAT(results[r].message(),
                HasSubstr("disagree about the group [0,1]"));
    EXPECT_THAT(results[r].message(), HasSubstr("step 0 of epoch 0"));
  }
}

TEST(SplitGroupFormerTest, AMissingRankFailsTheEpochAtTheWorldsTimeout) {
  // Rank 1 never comes: the world's first collective (the data-parallel
  // split) gives up after its timeout, and so does the epoch.
  FakeWorlds worlds(2, absl::Milliseconds(50));
  std::unique_ptr<SplitGroupFormer> former = Former(worlds, 0, 2);
  ASSERT_NE(former, nullptr);
  former->AddStep(0, 0, {{0, 1}});
  absl::Status status = former->Take(Key({0, 1}, 0)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(), HasSubstr("forming the world of epoch 0"));
}

TEST(SplitGroupFormerTest, TakeOfAGroupNoStepNamesTimesOutOnTheClock) {
  FakeClock clock;
  FakeWorlds worlds(1, kGuard);
  std::unique_ptr<SplitGroupFormer> former = Former(worlds, 0, 1, &clock);
  ASSERT_NE(former, nullptr);
  former->AddStep(0, 0, {{0}});
  absl::Status status;
  std::thread taker([&] { status = former->Take(Key({0, 5}, 0)).status(); });
  ASSERT_TRUE(clock.AwaitSleepers(1, kGuard));
  clock.Advance(kGuard);
  taker.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(), HasSubstr("no step handed in so far"));
  // A world of one splits its groups of one (what a GPU test runs).
  absl::StatusOr<std::unique_ptr<Communicator>> alone =
      former->Take(Key({0}, 0));
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ((*alone)->size(), 1);
}

TEST(SplitGroupFormerTest, CancelAbortsTheWorldAndEndsPendingTakes) {
  // Rank 1 never comes and the world would wait for it forever: only the
  // abort by Cancel lets the former's thread (joined by the destructor)
  // end.
  FakeWorlds worlds(2, absl::InfiniteDuration());
  FakeClock clock;
  std::unique_ptr<SplitGroupFormer> former = Former(worlds, 0, 2, &clock);
  ASSERT_NE(former, nullptr);
  former->AddStep(0, 0, {{0, 1}});
  absl::Status status;
  std::thread taker([&] { status = former->Take(Key({0, 1}, 0)).status(); });
  ASSERT_TRUE(clock.AwaitSleepers(1, kGuard));
  former->Cancel();
  taker.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  former.reset();
}

TEST(SplitGroupFormerTest, CreateChecksItsOptions) {
  SplitGroupFormer::Options options;
  options.rank = 2;
  options.world_size = 2;
  options.make_world = [](int64_t, const std::vector<int>&) {
    return absl::StatusOr<std::unique_ptr<WorldCommunicator>>(
        absl::InternalError("unused"));
  };
  EXPECT_EQ(SplitGroupFormer::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.rank = 0;
  options.take_timeout = absl::ZeroDuration();
  EXPECT_EQ(SplitGroupFormer::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.take_timeout = absl::Seconds(1);
  options.make_world = nullptr;
  EXPECT_EQ(SplitGroupFormer::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dcp
