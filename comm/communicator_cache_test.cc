#include "comm/communicator_cache.h"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "comm/fake_communicator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

CommKey Key(std::vector<int> ranks, int64_t epoch) {
  absl::StatusOr<CommKey> key = CommKey::Make(std::move(ranks), epoch);
  EXPECT_TRUE(key.ok()) << key.status();
  return *key;
}

// A guard against a test that hangs, never a step of one: every wait below
// ends by a notification or a condition long before it.
constexpr absl::Duration kGuard = absl::Seconds(30);

// A communicator that runs `on_destroy` when destroyed, so a test can wait
// for a destruction that happens on the cache's own thread.
class DestructionSignal final : public Communicator {
 public:
  DestructionSignal(std::unique_ptr<Communicator> comm,
                    std::function<void()> on_destroy)
      : comm_(std::move(comm)), on_destroy_(std::move(on_destroy)) {}
  ~DestructionSignal() override {
    comm_.reset();
    on_destroy_();
  }

  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  absl::Status AllToAll(const float* send, float* recv,
                        size_t count_per_peer) override {
    return comm_->AllToAll(send, recv, count_per_peer);
  }
  absl::Status AllReduceSum(float* data, size_t count) override {
    return comm_->AllReduceSum(data, count);
  }
  absl::Status Barrier() override { return comm_->Barrier(); }
  void Abort() override { comm_->Abort(); }

 private:
  std::unique_ptr<Communicator> comm_;
  std::function<void()> on_destroy_;
};

// A factory of fake communicators that counts its calls per key and can be
// told to fail or to block until released.
class FakeFactory {
 public:
  FakeFactory() : stats_(std::make_shared<FakeCommunicatorStats>()) {}

  CommunicatorCache::Factory AsFactory() {
    return [this](const CommKey& key, const std::string& prefix)
               -> absl::StatusOr<std::unique_ptr<Communicator>> {
      absl::Notification* gate = nullptr;
      {
        absl::MutexLock lock(&mu_);
        ++calls_[key];
        prefixes_.push_back(prefix);
        if (fail_next_) {
          fail_next_ = false;
          return absl::DeadlineExceededError("peer 3 never showed up");
        }
        auto it = gates_.find(key);
        if (it != gates_.end()) gate = it->second;
      }
      if (gate != nullptr) gate->WaitForNotification();
      // A group of one: the cache never runs collectives, and the stats
      // then count exactly the communicators the cache held.
      auto members = FakeCommunicator::Group(1, absl::Seconds(5), stats_);
      return std::unique_ptr<Communicator>(
          new DestructionSignal(std::move(members[0]), [this] {
            absl::MutexLock lock(&mu_);
            ++destroyed_;
          }));
    };
  }

  // Waits until the factory was called `n` times for `key`.
  bool AwaitCalls(const CommKey& key, int n) {
    absl::MutexLock lock(&mu_);
    auto called = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto it = calls_.find(key);
      return it != calls_.end() && it->second >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&called), kGuard);
  }
  // Waits until `n` of the communicators it made were destroyed.
  bool AwaitDestroyed(int n) {
    absl::MutexLock lock(&mu_);
    auto destroyed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return destroyed_ >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&destroyed), kGuard);
  }

  void FailNext() {
    absl::MutexLock lock(&mu_);
    fail_next_ = true;
  }
  // Formation of `key` blocks until `gate` is notified.
  void Gate(const CommKey& key, absl::Notification* gate) {
    absl::MutexLock lock(&mu_);
    gates_[key] = gate;
  }
  int calls(const CommKey& key) const {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(key);
    return it == calls_.end() ? 0 : it->second;
  }
  int total_calls() const {
    absl::MutexLock lock(&mu_);
    int total = 0;
    for (const auto& [key, n] : calls_) total += n;
    return total;
  }
  const FakeCommunicatorStats& stats() const { return *stats_; }

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<CommKey, int> calls_;
  absl::flat_hash_map<CommKey, absl::Notification*> gates_;
  std::vector<std::string> prefixes_;
  bool fail_next_ = false;
  int destroyed_ = 0;
  std::shared_ptr<FakeCommunicatorStats> stats_;
};

TEST(CommKeyTest, MakeSortsAndRejectsMalformedKeys) {
  absl::StatusOr<CommKey> key = CommKey::Make({5, 1, 3}, 2);
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(key->ranks, (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(key->GroupRank(3), 1);
  EXPECT_EQ(key->GroupRank(4), -1);
  EXPECT_EQ(key->ToString(), "[1,3,5]@2");
  EXPECT_EQ(CommKey::Make({}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CommKey::Make({1, 1}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CommKey::Make({-1, 2}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CommKey::Make({1}, -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Key({1, 2}, 0), Key({1, 2}, 1));
  EXPECT_NE(Key({1, 2}, 0), Key({1, 3}, 0));
}

TEST(CommunicatorCacheTest, MissFormsOnceThenHits) {
  FakeFactory factory;
  CommunicatorCache cache(factory.AsFactory());
  const CommKey key = Key({0, 1, 2, 3}, 1);
  absl::StatusOr<Communicator*> first = cache.Get(key, "g1/");
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<Communicator*> second = cache.Get(key, "g1/");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*first, *second);
  EXPECT_EQ((*first)->rank(), 0);
  EXPECT_EQ(factory.calls(key), 1);
  // Same ranks in another epoch are another group.
  absl::StatusOr<Communicator*> later = cache.Get(Key({0, 1, 2, 3}, 2), "g2/");
  ASSERT_TRUE(later.ok());
  EXPECT_NE(*later, *first);
  CommunicatorCache::Stats stats = cache.stats();
  EXPECT_EQ(stats.hits, 1);
  EXPECT_EQ(stats.misses, 2);
  EXPECT_EQ(stats.build_failures, 0);
  EXPECT_EQ(stats.live, 2);
}

TEST(CommunicatorCacheTest, DataParallelGroupIsNotASequenceParallelOne) {
  // The same members and epoch for two purposes: two communicators, each
  // formed once, under its own prefix.
  FakeFactory factory;
  CommunicatorCache cache(factory.AsFactory());
  const CommKey sp = Key({0, 1, 2, 3}, 1);
  const CommKey dp =
      *CommKey::Make({3, 2, 1, 0}, 1, CommPurpose::kDataParallel);
  EXPECT_NE(sp, dp);
  EXPECT_EQ(dp.ToString(), "[0,1,2,3]@1/dp");
  absl::StatusOr<Communicator*> a = cache.Get(sp, "g/");
  absl::StatusOr<Communicator*> b = cache.Get(dp, "dp/");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(*a, *b);
  EXPECT_EQ(*cache.Get(dp, "dp/"), *b);
  EXPECT_EQ(cache.stats().misses, 2);
  EXPECT_EQ(cache.stats().hits, 1);
}

TEST(CommunicatorCacheTest, RejectsMalformedKeyWithoutCallingTheFactory) {
  FakeFactory factory;
  CommunicatorCache cache(factory.AsFactory());
  EXPECT_EQ(cache.Get(CommKey{{2, 1}, 0}, "p/").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.Warm({{CommKey{{}, 0}, "p/"}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(factory.total_calls(), 0);
}

TEST(CommunicatorCacheTest, FailedFormationIsReturnedCountedAndRetried) {
  FakeFactory factory;
  CommunicatorCache cache(factory.AsFactory());
  const CommKey key = Key({0, 3}, 0);
  factory.FailNext();
  absl::StatusOr<Communicator*> failed = cache.Get(key, "try1/");
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(cache.stats().build_failures, 1);
  EXPECT_EQ(cache.stats().live, 0);
  absl::StatusOr<Communicator*> retried = cache.Get(key, "try2/");
  EXPECT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(factory.calls(key), 2);
}

TEST(CommunicatorCacheTest, WarmFormsInBackgroundAndGetWaitsForIt) {
  FakeFactory factory;
  CommunicatorCache cache(factory.AsFactory());
  const CommKey a = Key({0, 1}, 3);
  const CommKey b = Key({0, 1, 2, 3}, 3);
  absl::Notification release_a;
  factory.Gate(a, &release_a);
  ASSERT_TRUE(cache.Warm({{a, "a/"}, {b, "b/"}}).ok());

  // Get(a) must wait for the warm-up under way, not form a second group
  // (which would call the factory again, and block at the gate).
  ASSERT_TRUE(factory.AwaitCalls(a, 1));
  absl::Notification getting;
  absl::StatusOr<Communicator*> got = absl::UnknownError("not run");
  std::thread getter([&] {
    getting.Notify();
    got = cache.Get(a, "a/");
  });
  getting.WaitForNotification();
  release_a.Notify();
  getter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(factory.calls(a), 1);
  // A Get of a group still warming waits for it too: either way, a hit.
  ASSERT_TRUE(factory.AwaitCalls(b, 1));
  absl::StatusOr<Communicator*> got_b = cache.Get(b, "b/");
  ASSERT_TRUE(got_b.ok());
  EXPECT_EQ(factory.calls(b), 1);
  CommunicatorCache::Stats stats = cache.stats();
  EXPECT_EQ(stats.warmed, 2);
  EXPECT_EQ(stats.hits, 2);
  EXPECT_EQ(stats.misses, 0);
  // Warming what is held already forms nothing: the warm-up queued after it
  // is formed, and `a` was not formed again before it.
  const CommKey c = Key({0, 2}, 3);
  ASSERT_TRUE(cache.Warm({{a, "a/"}, {c, "c/"}}).ok());
  ASSERT_TRUE(factory.AwaitCalls(c, 1));
  EXPECT_EQ(factory.calls(a), 1);
}

TEST(CommunicatorCacheTest, QuiesceWaitsForFormationsAndDropsQueuedOnes) {
  FakeFactory factory;
  CommunicatorCache cache(factory.AsFactory());
  const CommKey a = Key({0, 1}, 0);
  const CommKey b = Key({0, 2}, 0);
  absl::Notification release_a;
  factory.Gate(a, &release_a);
  ASSERT_TRUE(cache.Warm({{a, "a/"}, {b, "b/"}}).ok());
  ASSERT_TRUE(factory.AwaitCalls(a, 1));
  // `a` is forming: not quiet yet; `b` is dropped from the queue.
  EXPECT_FALSE(cache.Quiesce(absl::ZeroDuration()));
  release_a.Notify();
  EXPECT_TRUE(cache.Quiesce(kGuard));
  EXPECT_EQ(cache.stats().warmed, 1);
  EXPECT_EQ(factory.calls(b), 0);
  // `b` forms on demand, as any group does.
  EXPECT_TRUE(cache.Get(b, "b/").ok());
  EXPECT_TRUE(cache.Quiesce(absl::ZeroDuration()));
}

TEST(CommunicatorCacheTest, FailedWarmUpIsReportedOnceThenFormedAgain) {
  FakeFactory factory;
  CommunicatorCache cache(factory.AsFactory(), {/*warm_in_background=*/false});
  const CommKey key = Key({1, 2}, 0);
  factory.FailNext();
  ASSERT_TRUE(cache.Warm({{key, "w1/"}}).ok());
  EXPECT_EQ(cache.stats().build_failures, 1);
  absl::Status reported = cache.Get(key, "w1/").status();
  EXPECT_EQ(reported.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(reported.message(), HasSubstr("warm-up of group [1,2]@0"));
  EXPECT_TRUE(cache.Get(key, "w2/").ok());
  EXPECT_EQ(factory.calls(key), 2);
}

TEST(CommunicatorCacheTest, EvictBeforeDestroysOldEpochsAndRefusesThem) {
  FakeFactory factory;
  CommunicatorCache cache(factory.AsFactory());
  ASSERT_TRUE(cache.Get(Key({0, 1}, 1), "e1/").ok());
  ASSERT_TRUE(cache.Get(Key({2, 3}, 1), "e1b/").ok());
  absl::StatusOr<Communicator*> kept = cache.Get(Key({0, 1}, 2), "e2/");
  ASSERT_TRUE(kept.ok());

  EXPECT_EQ(cache.EvictBefore(2), 2);
  EXPECT_EQ(factory.stats().destroyed, 2);
  EXPECT_EQ(factory.stats().aborts, 0);
  EXPECT_EQ(cache.stats().live, 1);
  EXPECT_EQ(cache.stats().evicted, 2);
  EXPECT_EQ(cache.Get(Key({0, 1}, 1), "e1/").status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<Communicator*> still = cache.Get(Key({0, 1}, 2), "e2/");
  ASSERT_TRUE(still.ok());
  EXPECT_EQ(*still, *kept);
  EXPECT_EQ(cache.EvictBefore(1), 0);  // The watermark never goes back.
}

TEST(CommunicatorCacheTest, GroupEvictedWhileFormingIsDestroyedWhenFormed) {
  FakeFactory factory;
  CommunicatorCache cache(factory.AsFactory());
  const CommKey key = Key({0, 1}, 4);
  absl::Notification release;
  factory.Gate(key, &release);
  ASSERT_TRUE(cache.Warm({{key, "f/"}}).ok());
  ASSERT_TRUE(factory.AwaitCalls(key, 1));
  EXPECT_EQ(cache.EvictBefore(5), 0);
  release.Notify();
  ASSERT_TRUE(factory.AwaitDestroyed(1));
  EXPECT_EQ(cache.stats().live, 0);
  EXPECT_EQ(cache.Get(key, "f/").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(CommunicatorCacheTest, AbortAllAbortsEachGroupOnceEvenAtDestruction) {
  FakeFactory factory;
  {
    CommunicatorCache cache(factory.AsFactory());
    const CommKey a = Key({0, 1}, 0);
    ASSERT_TRUE(cache.Get(a, "a/").ok());
    ASSERT_TRUE(cache.Get(Key({0, 2}, 0), "b/").ok());
    ASSERT_TRUE(cache.Get(Key({0, 1, 2}, 0), "c/").ok());
    cache.AbortAll();
    EXPECT_EQ(factory.stats().aborts, 3);
    cache.AbortAll();  // Nothing left to abort.
    EXPECT_EQ(factory.stats().aborts, 3);
    EXPECT_EQ(cache.Get(a, "a/").status().code(), absl::StatusCode::kAborted);
    EXPECT_EQ(factory.calls(a), 1);
    // A new epoch forms fresh groups.
    EXPECT_TRUE(cache.Get(Key({0, 1}, 1), "a1/").ok());
  }
  EXPECT_EQ(factory.stats().aborts, 3);
  EXPECT_EQ(factory.stats().destroyed, 4);
}

TEST(CommunicatorCacheTest, DestructionDestroysWithoutAborting) {
  FakeFactory factory;
  {
    CommunicatorCache cache(factory.AsFactory());
    ASSERT_TRUE(cache.Get(Key({0, 1}, 0), "a/").ok());
    ASSERT_TRUE(cache.Get(Key({1, 2}, 0), "b/").ok());
  }
  EXPECT_EQ(factory.stats().destroyed, 2);
  EXPECT_EQ(factory.stats().aborts, 0);
}

TEST(CommunicatorCacheTest, GroupFormedAfterAbortAllIsAborted) {
  FakeFactory factory;
  CommunicatorCache cache(factory.AsFactory());
  const CommKey key = Key({0, 1}, 0);
  absl::Notification release;
  factory.Gate(key, &release);
  absl::Status status;
  std::thread getter([&] { status = cache.Get(key, "g/").status(); });
  ASSERT_TRUE(factory.AwaitCalls(key, 1));
  cache.AbortAll();
  release.Notify();
  getter.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
  EXPECT_EQ(factory.stats().aborts, 1);
}

TEST(CommunicatorCacheTest, DestructionDropsQueuedWarmUps) {
  FakeFactory factory;
  const CommKey first = Key({0, 1}, 0);
  absl::Notification release;
  factory.Gate(first, &release);
  {
    CommunicatorCache cache(factory.AsFactory());
    ASSERT_TRUE(
        cache
            .Warm(
                {{first, "1/"}, {Key({0, 2}, 0), "2/"}, {Key({0, 3}, 0), "3/"}})
            .ok());
    ASSERT_TRUE(factory.AwaitCalls(first, 1));
    // The release must come once the destructor has dropped the queue, and
    // nothing outside the cache can see that moment: the delay only keeps
    // a correct cache from forming `2/` before it, it cannot hide a cache
    // that forms the queued groups (they would be formed either way).
    std::thread releaser([&] {
      absl::SleepFor(absl::Milliseconds(50));
      release.Notify();
    });
    releaser.detach();
  }  // Waits for `first`, never forms the other two.
  EXPECT_EQ(factory.total_calls(), 1);
  EXPECT_EQ(factory.stats().destroyed, 1);
}

TEST(CommunicatorCacheTest, ConcurrentGetsFormEachGroupOnce) {
  FakeFactory factory;
  CommunicatorCache cache(factory.AsFactory());
  std::vector<CommKey> keys;
  for (int i = 1; i < 6; ++i) keys.push_back(Key({0, i}, 0));
  ASSERT_TRUE(cache.Warm({{keys[0], "k0/"}, {keys[1], "k1/"}}).ok());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const CommKey& key = keys[(i * 7 + t) % keys.size()];
        if (!cache.Get(key, "k/").ok()) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  for (const CommKey& key : keys) EXPECT_EQ(factory.calls(key), 1);
  CommunicatorCache::Stats stats = cache.stats();
  EXPECT_EQ(stats.hits + stats.misses, 8 * 200);
  EXPECT_EQ(stats.live, 5);
}

}  // namespace
}  // namespace dcp
