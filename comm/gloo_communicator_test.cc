#include "comm/gloo_communicator.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "comm/rendezvous_store.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

// Runs `body(global_rank)` for each member rank on its own thread.
void RunRanks(const std::vector<int>& ranks,
              const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int rank : ranks) threads.emplace_back(body, rank);
  for (std::thread& t : threads) t.join();
}

// Forms the group `ranks` on threads; every member must succeed.
std::vector<std::unique_ptr<Communicator>> FormGroup(
    const std::vector<int>& ranks, RendezvousStoreInterface* store,
    const std::string& prefix, const GlooCommunicator::Options& options) {
  absl::StatusOr<CommKey> key = CommKey::Make(ranks, /*epoch=*/1);
  EXPECT_TRUE(key.ok()) << key.status();
  std::vector<std::unique_ptr<Communicator>> comms(ranks.size());
  RunRanks(ranks, [&](int global_rank) {
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        GlooCommunicator::Create(*key, global_rank, prefix, store, options);
    ASSERT_TRUE(comm.ok()) << comm.status();
    comms[key->GroupRank(global_rank)] = *std::move(comm);
  });
  return comms;
}

std::vector<std::unique_ptr<Communicator>> FormGroup(
    const std::vector<int>& ranks, RendezvousStoreInterface* store,
    const std::string& prefix, absl::Duration timeout = absl::Seconds(20)) {
  GlooCommunicator::Options options;
  options.timeout = timeout;
  return FormGroup(ranks, store, prefix, options);
}

class GlooCommunicatorTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooCommunicatorTest, AllToAllDeliversEveryBlockToItsRank) {
  const int p = GetParam();
  std::vector<int> ranks;
  for (int i = 0; i < p; ++i) ranks.push_back(10 + 3 * i);  // Not 0..p-1.
  InMemoryRendezvousStore store;
  auto comms = FormGroup(ranks, &store, "a2a/");
  ASSERT_EQ(comms.size(), p);

  constexpr size_t kCount = 5;
  std::vector<std::vector<float>> recv(p, std::vector<float>(kCount * p, -1));
  RunRanks(ranks, [&](int global_rank) {
    const int me = (global_rank - 10) / 3;
    Communicator& comm = *comms[me];
    EXPECT_EQ(comm.rank(), me);
    EXPECT_EQ(comm.size(), p);
    // Element i of the block for rank `to`: 1000 * me + 100 * to + i.
    std::vector<float> send(kCount * p);
    for (int to = 0; to < p; ++to) {
      for (size_t i = 0; i < kCount; ++i) {
        send[to * kCount + i] = 1000.0f * me + 100.0f * to + i;
      }
    }
    EXPECT_TRUE(comm.AllToAll(send.data(), recv[me].data(), kCount).ok());
  });
  for (int me = 0; me < p; ++me) {
    for (int from = 0; from < p; ++from) {
      for (size_t i = 0; i < kCount; ++i) {
        EXPECT_EQ(recv[me][from * kCount + i], 1000.0f * from + 100.0f * me + i)
            << "rank " << me << " block from " << from << " element " << i;
      }
    }
  }
}

TEST_P(GlooCommunicatorTest, AllReduceSumAndBarrierAreExact) {
  const int p = GetParam();
  std::vector<int> ranks;
  for (int i = 0; i < p; ++i) ranks.push_back(i);
  InMemoryRendezvousStore store;
  auto comms = FormGroup(ranks, &store, "ar/");

  // Big enough to take several segments of Gloo's ring; small integers keep
  // float sums exact in any order.
  constexpr size_t kCount = 300001;
  std::vector<std::vector<float>> data(p, std::vector<float>(kCount));
  RunRanks(ranks, [&](int me) {
    for (size_t i = 0; i < kCount; ++i) data[me][i] = (me + 1) * (i % 7);
    EXPECT_TRUE(comms[me]->AllReduceSum(data[me].data(), kCount).ok());
    EXPECT_TRUE(comms[me]->Barrier().ok());
    // A second round on the same communicator.
    EXPECT_TRUE(comms[me]->AllReduceSum(data[me].data(), kCount).ok());
  });
  const float rank_sum = p * (p + 1) / 2.0f;
  for (int me = 0; me < p; ++me) {
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(data[me][i], rank_sum * p * (i % 7)) << me << " " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(GroupSizes, GlooCommunicatorTest,
                         ::testing::Values(1, 2, 4));

// A guard against a test that hangs, never a step of one.
constexpr absl::Duration kGuard = absl::Seconds(30);

// A store that lets a test wait until waits for a key have begun.
class WatchedStore final : public RendezvousStoreInterface {
 public:
  explicit WatchedStore(RendezvousStoreInterface* store) : store_(store) {}

  absl::Status Set(absl::string_view key, absl::string_view value) override {
    return store_->Set(key, value);
  }
  absl::StatusOr<std::vector<std::string>> Wait(
      absl::Span<const std::string> keys, absl::Duration timeout) override {
    {
      absl::MutexLock lock(&mu_);
      for (const std::string& key : keys) {
        ++waits_[key];
        longest_[key] = std::max(longest_[key], timeout);
      }
    }
    return store_->Wait(keys, timeout);
  }

  // The longest timeout a Wait including `key` was given.
  absl::Duration Longest(const std::string& key) {
    absl::MutexLock lock(&mu_);
    return longest_[key];
  }

  // Waits until `n` Wait calls that include `key` have begun.
  bool AwaitWaits(const std::string& key, int n) {
    absl::MutexLock lock(&mu_);
    auto begun = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return waits_[key] >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&begun), kGuard);
  }

 private:
  RendezvousStoreInterface* const store_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> waits_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::Duration> longest_
      ABSL_GUARDED_BY(mu_);
};

// Forms `key` in a thread as the members `present` (not all of them, so
// that they wait for the others); member i's status goes to (*results)[i].
std::thread FormWith(const CommKey& key, std::vector<int> present,
                     const std::string& prefix, RendezvousStoreInterface* store,
                     const GlooCommunicator::Options& options,
                     std::vector<absl::Status>* results) {
  results->assign(present.size(), absl::OkStatus());
  return std::thread([=] {
    RunRanks(present, [&](int rank) {
      const auto at = std::find(present.begin(), present.end(), rank);
      (*results)[at - present.begin()] =
          GlooCommunicator::Create(key, rank, prefix, store, options).status();
    });
  });
}

TEST(GlooCommunicatorCreateTest, MissingRankMakesTheOthersTimeOut) {
  const std::vector<int> ranks = {0, 1, 2, 3};
  absl::StatusOr<CommKey> key = CommKey::Make(ranks, 2);
  ASSERT_TRUE(key.ok());
  FakeClock clock;
  InMemoryRendezvousStore memory({&clock});
  WatchedStore store(&memory);
  GlooCommunicator::Options options;
  options.timeout = absl::Seconds(20);
  std::vector<absl::Status> results;  // Rank 3 never shows up.
  std::thread members =
      FormWith(*key, {0, 1, 2}, "missing/", &store, options, &results);
  // Each member waits for rank 3 only once it has met the other two (each
  // is in one wait at a time), so when all three wait for it the clock's
  // three sleepers are those waits: their timeout is what passes.
  ASSERT_TRUE(store.AwaitWaits("missing/gloo/3", 3));
  ASSERT_TRUE(clock.AwaitSleepers(3, kGuard));
  clock.Advance(options.timeout);
  members.join();
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(results[rank].code(), absl::StatusCode::kDeadlineExceeded)
        << results[rank];
    EXPECT_THAT(results[rank].message(), HasSubstr("missing/gloo/3"));
  }
}

TEST(GlooCommunicatorCreateTest, AFormTimeoutBoundsTheFormationNotTheOps) {
  const std::vector<int> ranks = {0, 1, 2};
  absl::StatusOr<CommKey> key = CommKey::Make(ranks, 1);
  ASSERT_TRUE(key.ok());
  FakeClock clock;
  InMemoryRendezvousStore memory({&clock});
  WatchedStore store(&memory);
  GlooCommunicator::Options options;
  options.timeout = absl::Seconds(20);
  options.form_timeout = absl::Seconds(60);
  std::vector<absl::Status> results;  // Rank 2 never shows up.
  std::thread members =
      FormWith(*key, {0, 1}, "late/", &store, options, &results);
  ASSERT_TRUE(store.AwaitWaits("late/gloo/2", 2));
  ASSERT_TRUE(clock.AwaitSleepers(2, kGuard));
  // Their waits for the missing peer run to the form timeout (less the
  // real time the formation took so far), well past the ops' timeout.
  EXPECT_GT(store.Longest("late/gloo/2"), 2 * options.timeout);
  EXPECT_LE(store.Longest("late/gloo/2"), options.form_timeout);
  clock.Advance(options.form_timeout);
  members.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(results[rank].code(), absl::StatusCode::kDeadlineExceeded)
        << results[rank];
  }

  // Once formed, a collective's bound is `timeout`: a peer that never
  // joins it fails it long before the form timeout.
  InMemoryRendezvousStore real;
  options.timeout = absl::Milliseconds(800);
  auto comms = FormGroup({0, 1}, &real, "ops/", options);
  ASSERT_EQ(comms.size(), 2);
  std::vector<float> data(16, 1.0f);
  const absl::Time start = absl::Now();
  const absl::Status status = comms[0]->AllReduceSum(data.data(), data.size());
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_LT(absl::Now() - start, options.form_timeout / 2);
}

TEST(GlooCommunicatorCreateTest, PeerThatStopsMakesCollectiveTimeOut) {
  InMemoryRendezvousStore store;
  auto comms = FormGroup({0, 1}, &store, "stop/", absl::Milliseconds(800));
  ASSERT_EQ(comms.size(), 2);
  std::vector<float> data(16, 1.0f);
  const absl::Time start = absl::Now();
  // Rank 1 never joins the all-reduce.
  absl::Status status = comms[0]->AllReduceSum(data.data(), data.size());
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // The failed communicator refuses further work instead of hanging.
  EXPECT_EQ(comms[0]->Barrier().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(GlooCommunicatorCreateTest, AbortFailsThePeersAtOnce) {
  InMemoryRendezvousStore store;
  auto comms = FormGroup({0, 1}, &store, "abort/", absl::Seconds(20));
  ASSERT_EQ(comms.size(), 2);
  absl::Status peer_status;
  absl::Duration peer_elapsed;
  absl::Notification peer_started;
  std::thread peer([&] {
    const absl::Time start = absl::Now();
    peer_started.Notify();
    peer_status = comms[1]->Barrier();
    peer_elapsed = absl::Now() - start;
  });
  // Whether the peer is already blocked in its barrier or about to enter
  // it, it can complete only through rank 0: a peer that fails well before
  // its 20 s timeout was failed by the abort.
  peer_started.WaitForNotification();
  comms[0]->Abort();
  comms[0]->Abort();  // Idempotent.
  peer.join();
  EXPECT_FALSE(peer_status.ok());
  EXPECT_LT(peer_elapsed, absl::Seconds(10)) << "the peer waited its timeout";
  EXPECT_EQ(comms[0]->Barrier().code(), absl::StatusCode::kAborted);
}

TEST(GlooCommunicatorCreateTest, RejectsBadArguments) {
  InMemoryRendezvousStore store;
  absl::StatusOr<CommKey> key = CommKey::Make({0, 1}, 0);
  ASSERT_TRUE(key.ok());
  GlooCommunicator::Options options;
  EXPECT_EQ(
      GlooCommunicator::Create(*key, 5, "p/", &store, options).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      GlooCommunicator::Create(*key, 0, "p/", nullptr, options).status().code(),
      absl::StatusCode::kInvalidArgument);
  CommKey unsorted{{1, 0}, 0};
  EXPECT_EQ(GlooCommunicator::Create(unsorted, 0, "p/", &store, options)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  options.timeout = absl::ZeroDuration();
  EXPECT_EQ(
      GlooCommunicator::Create(*key, 0, "p/", &store, options).status().code(),
      absl::StatusCode::kInvalidArgument);
  options.timeout = absl::Seconds(1);
  options.form_timeout = absl::Seconds(-1);
  const absl::Status negative =
      GlooCommunicator::Create(*key, 0, "p/", &store, options).status();
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.message(), HasSubstr("form_timeout"));
}

TEST(GlooCommunicatorCreateTest, BadHostnamesAreErrorsNotCrashes) {
  InMemoryRendezvousStore store;
  absl::StatusOr<CommKey> key = CommKey::Make({0, 1}, 0);
  ASSERT_TRUE(key.ok());
  GlooCommunicator::Options options;
  options.timeout = absl::Seconds(1);

  // Does not resolve (INVALID_ARGUMENT, or UNAVAILABLE without a resolver).
  options.hostname = "no-such-host.invalid";
  absl::Status status =
      GlooCommunicator::Create(*key, 0, "host1/", &store, options).status();
  EXPECT_TRUE(status.code() == absl::StatusCode::kInvalidArgument ||
              status.code() == absl::StatusCode::kUnavailable)
      << status;
  EXPECT_THAT(status.message(), HasSubstr("no-such-host.invalid"));

  // Resolves, but is no address of this machine: nothing can listen on it.
  options.hostname = "192.0.2.1";
  status =
      GlooCommunicator::Create(*key, 0, "host2/", &store, options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;

  options.hostname = "";
  EXPECT_EQ(GlooCommunicator::Create(*key, 0, "host3/", &store, options)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.size(), 0) << "nothing published for a group never formed";
}

}  // namespace
}  // namespace dcp
