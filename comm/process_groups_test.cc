#include "comm/process_groups.h"

#include <signal.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "comm/comm_key.h"
#include "comm/rendezvous_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"
#include "torch/torch.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;

std::unique_ptr<ProcessGroups> MakeGroups(RendezvousStoreInterface* store,
                                          int rank, absl::Duration timeout) {
  ProcessGroups::Options options;
  options.rank = rank;
  options.timeout = timeout;
  absl::StatusOr<std::unique_ptr<ProcessGroups>> groups =
      ProcessGroups::Create(store, options);
  EXPECT_TRUE(groups.ok()) << groups.status();
  return groups.ok() ? *std::move(groups) : nullptr;
}

CommKey Key(std::vector<int> ranks, int64_t epoch = 0) {
  return *CommKey::Make(std::move(ranks), epoch);
}

// Sum of `value` over the group, through an all-reduce of a small tensor.
absl::StatusOr<float> AllReduce(c10d::ProcessGroup* group, float value) {
  try {
    std::vector<at::Tensor> tensors = {torch::full({8}, value)};
    group->allreduce(tensors)->wait();
    return tensors[0][7].item<float>();
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  }
}

float SumOfMembers(const std::vector<int>& ranks) {
  float sum = 0;
  for (int r : ranks) sum += r + 1.0f;
  return sum;
}

// Ranks 0..3 as one task group of Ulysses degree 2 (a ring of 2): member m
// is in the subgroup {2 (m / 2), 2 (m / 2) + 1} at rank m % 2 and in the ring
// {m % 2, m % 2 + 2} at rank m / 2; asking again returns the cached groups.
// With u = 1 the same members form rings of 4 and no subgroup.
TEST(ProcessGroupsTest, HybridGroupsHoldTheSpecsMembers) {
  InMemoryRendezvousStore store;
  constexpr int kWorld = 4;
  struct Result {
    absl::Status status = absl::UnknownError("not run");
    int ulysses_rank = -1, ring_rank = -1, held = -1;
    float ulysses_sum = 0, ring_sum = 0, long_ring_sum = 0;
    bool cached = false, no_subgroup = false;
  };
  std::vector<Result> results(kWorld);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kWorld; ++rank) {
    ranks.emplace_back([&, rank] {
      Result& r = results[rank];
      std::unique_ptr<ProcessGroups> groups =
          MakeGroups(&store, rank, absl::Seconds(60));
      if (groups == nullptr) return;
      absl::StatusOr<ProcessGroups::HybridGroups> hybrid =
          groups->Hybrid(Key({0, 1, 2, 3}), 2, "task/7");
      absl::StatusOr<ProcessGroups::HybridGroups> again =
          groups->Hybrid(Key({0, 1, 2, 3}), 2, "task/7");
      absl::StatusOr<ProcessGroups::HybridGroups> rings =
          groups->Hybrid(Key({0, 1, 2, 3}), 1, "task/8");
      r.status = hybrid.ok() ? (again.ok() ? rings.status() : again.status())
                             : hybrid.status();
      if (!r.status.ok()) return;
      r.held = groups->size();
      r.cached =
          again->ulysses == hybrid->ulysses && again->ring == hybrid->ring;
      r.no_subgroup = rings->ulysses == nullptr && rings->ring != nullptr &&
                      rings->ring->getSize() == 4;
      r.ulysses_rank = hybrid->ulysses->getRank();
      r.ring_rank = hybrid->ring->getRank();
      absl::StatusOr<float> u = AllReduce(hybrid->ulysses, rank + 1.0f);
      absl::StatusOr<float> c = AllReduce(hybrid->ring, rank + 1.0f);
      absl::StatusOr<float> l = AllReduce(rings->ring, rank + 1.0f);
      if (!u.ok() || !c.ok() || !l.ok()) {
        r.status = absl::InternalError("an all-reduce failed");
        return;
      }
      r.ulysses_sum = *u;
      r.ring_sum = *c;
      r.long_ring_sum = *l;
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int m = 0; m < kWorld; ++m) {
    const Result& r = results[m];
    ASSERT_TRUE(r.status.ok()) << "rank " << m << ": " << r.status;
    EXPECT_EQ(r.ulysses_rank, m % 2);
    EXPECT_EQ(r.ring_rank, m / 2);
    EXPECT_EQ(r.ulysses_sum, SumOfMembers({2 * (m / 2), 2 * (m / 2) + 1}));
    EXPECT_EQ(r.ring_sum, SumOfMembers({m % 2, m % 2 + 2}));
    EXPECT_EQ(r.long_ring_sum, SumOfMembers({0, 1, 2, 3}));
    EXPECT_TRUE(r.cached);
    EXPECT_TRUE(r.no_subgroup);
    EXPECT_EQ(r.held, 3);  // subgroup, ring of 2, ring of 4
  }
}

// u = 2 then u = 1 under one task prefix (a group whose tasks differ in
// their degree): the second forms its own ring of all four, not the pairs'
// ring {0, 2} or {1, 3} the first formed.
TEST(ProcessGroupsTest, HybridFormsEachUlyssesDegreeUnderOnePrefixApart) {
  InMemoryRendezvousStore store;
  constexpr int kWorld = 4;
  std::vector<absl::Status> status(kWorld, absl::UnknownError("not run"));
  std::vector<float> pair_ring(kWorld), long_ring(kWorld);
  std::vector<int> held(kWorld, -1);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kWorld; ++rank) {
    ranks.emplace_back([&, rank] {
      std::unique_ptr<ProcessGroups> groups =
          MakeGroups(&store, rank, absl::Seconds(60));
      if (groups == nullptr) return;
      absl::StatusOr<ProcessGroups::HybridGroups> first =
          groups->Hybrid(Key({0, 1, 2, 3}), 2, "task/3");
      absl::StatusOr<ProcessGroups::HybridGroups> second =
          groups->Hybrid(Key({0, 1, 2, 3}), 1, "task/3");
      if (!first.ok() || !second.ok()) {
        status[rank] = first.ok() ? second.status() : first.status();
        return;
      }
      absl::StatusOr<float> pair = AllReduce(first->ring, rank + 1.0f);
      absl::StatusOr<float> all = AllReduce(second->ring, rank + 1.0f);
      if (!pair.ok() || !all.ok()) {
        status[rank] = pair.ok() ? all.status() : pair.status();
        return;
      }
      status[rank] = absl::OkStatus();
      pair_ring[rank] = *pair;
      long_ring[rank] = *all;
      held[rank] = groups->size();
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_TRUE(status[rank].ok()) << "rank " << rank << ": " << status[rank];
    EXPECT_EQ(pair_ring[rank], SumOfMembers({rank % 2, rank % 2 + 2}));
    EXPECT_EQ(long_ring[rank], SumOfMembers({0, 1, 2, 3}));
    EXPECT_EQ(held[rank], 3);  // subgroup, ring of 2, ring of 4
  }
}

TEST(ProcessGroupsTest, HybridRefusesAUlyssesDegreeThatDoesNotDivide) {
  InMemoryRendezvousStore store;
  std::unique_ptr<ProcessGroups> groups =
      MakeGroups(&store, 0, absl::Seconds(5));
  ASSERT_NE(groups, nullptr);
  absl::StatusOr<ProcessGroups::HybridGroups> hybrid =
      groups->Hybrid(Key({0, 1, 2}), 2, "task/9");
  EXPECT_EQ(hybrid.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(hybrid.status().message(),
              AllOf(HasSubstr("u = 2"), HasSubstr("p = 3")));
  EXPECT_EQ(groups->size(), 0);
}

// Ranks 0..3 as threads: the pairs {0,1} and {2,3}, the sequence-parallel
// group of all four and the data-parallel world, all formed at once (each
// rank asks for its groups from two threads), then an all-reduce on each.
TEST(ProcessGroupsTest, ConcurrentGroupsFormAndAllReduce) {
  InMemoryRendezvousStore store;
  constexpr int kWorld = 4;
  struct Result {
    absl::StatusOr<float> pair = absl::UnknownError("not run");
    absl::StatusOr<float> all = absl::UnknownError("not run");
    absl::StatusOr<float> dp = absl::UnknownError("not run");
    bool distinct = false;
  };
  std::vector<Result> results(kWorld);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kWorld; ++rank) {
    ranks.emplace_back([&, rank] {
      std::unique_ptr<ProcessGroups> groups =
          MakeGroups(&store, rank, absl::Seconds(60));
      if (groups == nullptr) return;
      const std::vector<int> pair =
          rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
      absl::StatusOr<c10d::ProcessGroup*> pair_group;
      std::thread pair_former([&] {
        pair_group = groups->Get(
            Key(pair), absl::StrCat("sess/e0/g", pair[0], "-", pair[1]));
      });
      absl::StatusOr<c10d::ProcessGroup*> all_group =
          groups->Get(Key({0, 1, 2, 3}), "sess/e0/g0-1-2-3");
      pair_former.join();
      absl::StatusOr<c10d::ProcessGroup*> dp_group =
          groups->DataParallel(kWorld, 0, "sess/e0/dp");
      Result& out = results[rank];
      if (!pair_group.ok()) out.pair = pair_group.status();
      if (!all_group.ok()) out.all = all_group.status();
      if (!dp_group.ok()) out.dp = dp_group.status();
      if (!pair_group.ok() || !all_group.ok() || !dp_group.ok()) return;
      out.pair = AllReduce(*pair_group, rank + 1.0f);
      out.all = AllReduce(*all_group, rank + 1.0f);
      out.dp = AllReduce(*dp_group, rank + 1.0f);
      // Same ranks, other purpose: another group.
      out.distinct = *all_group != *dp_group;
      // A second ask is served from the cache.
      absl::StatusOr<c10d::ProcessGroup*> again =
          groups->Get(Key({0, 1, 2, 3}), "sess/e0/g0-1-2-3");
      out.distinct = out.distinct && again.ok() && *again == *all_group &&
                     groups->size() == 3;
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < kWorld; ++rank) {
    SCOPED_TRACE(rank);
    const Result& r = results[rank];
    ASSERT_TRUE(r.pair.ok()) << r.pair.status();
    ASSERT_TRUE(r.all.ok()) << r.all.status();
    ASSERT_TRUE(r.dp.ok()) << r.dp.status();
    EXPECT_EQ(*r.pair, SumOfMembers(rank < 2 ? std::vector<int>{0, 1}
                                             : std::vector<int>{2, 3}));
    EXPECT_EQ(*r.all, SumOfMembers({0, 1, 2, 3}));
    EXPECT_EQ(*r.dp, SumOfMembers({0, 1, 2, 3}));
    EXPECT_TRUE(r.distinct);
  }
}

// Two threads of rank 0 ask for {0,1} at once: it is formed once (rank 1
// asks once, so a second formation would fail) and both threads get it.
TEST(ProcessGroupsTest, ConcurrentGetsOfOneGroupFormItOnce) {
  InMemoryRendezvousStore store;
  std::unique_ptr<ProcessGroups> rank0 =
      MakeGroups(&store, 0, absl::Seconds(60));
  std::unique_ptr<ProcessGroups> rank1 =
      MakeGroups(&store, 1, absl::Seconds(60));
  ASSERT_TRUE(rank0 != nullptr && rank1 != nullptr);
  absl::StatusOr<c10d::ProcessGroup*> a, b, peer;
  std::thread first([&] { a = rank0->Get(Key({0, 1}), "sess/once"); });
  std::thread second([&] { b = rank0->Get(Key({0, 1}), "sess/once"); });
  std::thread other([&] { peer = rank1->Get(Key({0, 1}), "sess/once"); });
  first.join();
  second.join();
  other.join();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(rank0->size(), 1);
  absl::StatusOr<float> sum0, sum1;
  std::thread reduce1([&] { sum1 = AllReduce(*peer, 2.0f); });
  sum0 = AllReduce(*a, 1.0f);
  reduce1.join();
  ASSERT_TRUE(sum0.ok() && sum1.ok());
  EXPECT_EQ(*sum0, 3.0f);
  EXPECT_EQ(*sum1, 3.0f);
}

// Both ranks warm {0,1}, wait until their warm-up formed it, and then ask
// for it: each Get is served by the warmed group (a hit, no formation of
// its own) and the group all-reduces.
TEST(ProcessGroupsTest, AWarmedGroupServesTheGetsThatFollow) {
  InMemoryRendezvousStore store;
  std::vector<std::unique_ptr<ProcessGroups>> groups;
  absl::Notification formed[2];
  for (int rank = 0; rank < 2; ++rank) {
    ProcessGroups::Options options;
    options.rank = rank;
    options.timeout = absl::Seconds(60);
    options.on_formed = [&formed, rank](absl::Duration) {
      formed[rank].Notify();
    };
    absl::StatusOr<std::unique_ptr<ProcessGroups>> made =
        ProcessGroups::Create(&store, options);
    ASSERT_TRUE(made.ok()) << made.status();
    groups.push_back(*std::move(made));
  }
  const CommGroupSpec spec{Key({0, 1}), "sess/e0/warm"};
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(groups[rank]->Warm({spec}).ok());
  }
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(formed[rank].WaitForNotificationWithTimeout(absl::Seconds(60)))
        << "rank " << rank << "'s warm-up did not form the group";
  }
  std::vector<absl::StatusOr<float>> sums(2, absl::UnknownError("not run"));
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      absl::StatusOr<c10d::ProcessGroup*> group =
          groups[rank]->Get(spec.key, spec.prefix);
      sums[rank] = group.ok() ? AllReduce(*group, rank + 1.0f)
                              : absl::StatusOr<float>(group.status());
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(rank);
    ASSERT_TRUE(sums[rank].ok()) << sums[rank].status();
    EXPECT_EQ(*sums[rank], SumOfMembers({0, 1}));
    const ProcessGroups::Stats stats = groups[rank]->stats();
    EXPECT_EQ(stats.warmed, 1);
    EXPECT_EQ(stats.hits, 1);
    EXPECT_EQ(stats.misses, 0);
    EXPECT_EQ(stats.live, 1);
    // Warming a group held already queues nothing.
    ASSERT_TRUE(groups[rank]->Warm({spec}).ok());
    EXPECT_TRUE(groups[rank]->Quiesce(absl::Seconds(30)));
    EXPECT_EQ(groups[rank]->stats().warmed, 1);
  }
}

// A store that says when the first key was set: a formation has begun.
class NotifyingStore final : public RendezvousStoreInterface {
 public:
  absl::Status Set(absl::string_view key, absl::string_view value) override {
    absl::Status status = store_.Set(key, value);
    if (!first_set_.HasBeenNotified()) first_set_.Notify();
    return status;
  }
  absl::StatusOr<std::vector<std::string>> Wait(
      absl::Span<const std::string> keys, absl::Duration timeout) override {
    return store_.Wait(keys, timeout);
  }
  absl::Notification& first_set() { return first_set_; }

 private:
  InMemoryRendezvousStore store_;
  absl::Notification first_set_;
};

// A warm-up whose peer never comes fails by its timeout; the next Get of the
// group is told so (the error names the group), and nothing stays held.
TEST(ProcessGroupsTest, AFailedWarmUpIsTheNextGetsError) {
  NotifyingStore store;
  std::unique_ptr<ProcessGroups> groups =
      MakeGroups(&store, 0, absl::Milliseconds(300));
  ASSERT_NE(groups, nullptr);
  const CommGroupSpec spec{Key({0, 1}, 2), "sess/e2/lonely"};
  ASSERT_TRUE(groups->Warm({spec}).ok());
  // The warm-up thread has claimed the group once it sets a key; Quiesce
  // then waits for the formation to fail.
  ASSERT_TRUE(store.first_set().WaitForNotificationWithTimeout(
      absl::Seconds(30)));
  ASSERT_TRUE(groups->Quiesce(absl::Seconds(30)));
  EXPECT_EQ(groups->stats().failures, 1);
  EXPECT_EQ(groups->size(), 0);
  absl::StatusOr<c10d::ProcessGroup*> got = groups->Get(spec.key, spec.prefix);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded)
      << got.status();
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("[0,1]@2"));
  // Told, not formed again: neither a hit nor a miss.
  EXPECT_EQ(groups->stats().hits + groups->stats().misses, 0);
}

TEST(ProcessGroupsTest, WarmRefusesAGroupWithoutThisRank) {
  InMemoryRendezvousStore store;
  std::unique_ptr<ProcessGroups> groups =
      MakeGroups(&store, 0, absl::Seconds(5));
  ASSERT_NE(groups, nullptr);
  absl::Status status =
      groups->Warm({{Key({0, 1}), "sess/a"}, {Key({1, 2}), "sess/b"}});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("[1,2]"));
  EXPECT_TRUE(groups->Quiesce(absl::Seconds(5)));
  EXPECT_EQ(groups->stats().warmed + groups->stats().failures, 0);
}

TEST(ProcessGroupsTest, CreateIgnoresSigpipeSoAPeersCloseCannotKillUs) {
  InMemoryRendezvousStore store;
  ASSERT_NE(MakeGroups(&store, 0, absl::Seconds(5)), nullptr);
  struct sigaction current;
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &current), 0);
  EXPECT_EQ(current.sa_handler, SIG_IGN);
}

// Ranks 0 and 1 of {0,1,2} form while rank 2 never comes: both fail within
// the timeout, naming the group and the key rank 2 never set.
TEST(ProcessGroupsTest, MissingMemberFailsTheOthersWithinTheTimeout) {
  InMemoryRendezvousStore store;
  const absl::Duration timeout = absl::Seconds(2);
  std::vector<absl::Status> errors(2);
  std::vector<absl::Duration> took(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      std::unique_ptr<ProcessGroups> groups = MakeGroups(&store, rank, timeout);
      if (groups == nullptr) return;
      const absl::Time start = absl::Now();
      errors[rank] = groups->Get(Key({0, 1, 2}, 5), "sess/e5/g0-1-2").status();
      took[rank] = absl::Now() - start;
      // Nothing is cached for a failed formation.
      if (groups->size() != 0) errors[rank] = absl::InternalError("cached");
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(rank);
    EXPECT_EQ(errors[rank].code(), absl::StatusCode::kDeadlineExceeded)
        << errors[rank];
    EXPECT_THAT(std::string(errors[rank].message()),
                AllOf(HasSubstr("[0,1,2]@5"),
                      ContainsRegex("sess/e5/g0-1-2/c10d/0/(rank_)?2")));
    // Bound as a whole: a little slack for the members' connections.
    EXPECT_LT(took[rank], timeout + absl::Seconds(1));
  }
}

TEST(ProcessGroupsTest, RefusesWhatItCannotForm) {
  InMemoryRendezvousStore store;
  std::unique_ptr<ProcessGroups> groups =
      MakeGroups(&store, 1, absl::Seconds(5));
  ASSERT_NE(groups, nullptr);
  EXPECT_EQ(groups->Get(Key({0, 2}), "sess/e0/g0-2").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(groups->Get(Key({1, 2}), "").status().code(),
            absl::StatusCode::kInvalidArgument);
  CommKey unsorted{{2, 1}, 0};
  EXPECT_EQ(groups->Get(unsorted, "p").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(groups->DataParallel(0, 0, "p").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(groups->size(), 0);

  ProcessGroups::Options bad;
  EXPECT_EQ(ProcessGroups::Create(&store, bad).status().code(),
            absl::StatusCode::kInvalidArgument);  // No rank.
  bad.rank = 0;
  EXPECT_EQ(ProcessGroups::Create(nullptr, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad.timeout = absl::ZeroDuration();
  EXPECT_EQ(ProcessGroups::Create(&store, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ProcessGroupsTest, AGroupOfOneNeedsNoPeers) {
  InMemoryRendezvousStore store;
  std::unique_ptr<ProcessGroups> groups =
      MakeGroups(&store, 0, absl::Seconds(5));
  ASSERT_NE(groups, nullptr);
  absl::StatusOr<c10d::ProcessGroup*> world =
      groups->DataParallel(1, 0, "sess/e0/dp");
  ASSERT_TRUE(world.ok()) << world.status();
  absl::StatusOr<float> sum = AllReduce(*world, 4.0f);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(*sum, 4.0f);
}

// Rank 0 aborts its groups: rank 1's next collective on their pair fails at
// once instead of after the (long) timeout, and rank 0 refuses the group.
TEST(ProcessGroupsTest, AbortFailsThePeersCollectivesAtOnce) {
  InMemoryRendezvousStore store;
  const absl::Duration timeout = absl::Seconds(60);
  absl::Notification rank1_formed;
  absl::Notification aborted;
  absl::Notification rank1_done;
  absl::Status rank0_after_abort;
  absl::StatusOr<float> rank1_sum = absl::UnknownError("not run");
  absl::Duration rank1_took;
  std::thread rank0([&] {
    std::unique_ptr<ProcessGroups> groups = MakeGroups(&store, 0, timeout);
    if (groups == nullptr) {
      aborted.Notify();
      return;
    }
    absl::StatusOr<c10d::ProcessGroup*> g = groups->Get(Key({0, 1}), "sess/a");
    rank1_formed.WaitForNotification();
    if (!g.ok()) {
      aborted.Notify();
      return;
    }
    groups->AbortAll();
    aborted.Notify();
    rank0_after_abort = groups->Get(Key({0, 1}), "sess/a").status();
    // Keep the groups (and their sockets) alive: only the abort may fail
    // rank 1's collective, not this cache's destruction.
    rank1_done.WaitForNotification();
  });
  std::thread rank1([&] {
    std::unique_ptr<ProcessGroups> groups = MakeGroups(&store, 1, timeout);
    if (groups == nullptr) {
      rank1_formed.Notify();
      rank1_done.Notify();
      return;
    }
    absl::StatusOr<c10d::ProcessGroup*> g = groups->Get(Key({0, 1}), "sess/a");
    rank1_formed.Notify();
    if (!g.ok()) {
      rank1_sum = g.status();
      rank1_done.Notify();
      return;
    }
    aborted.WaitForNotification();
    const absl::Time start = absl::Now();
    rank1_sum = AllReduce(*g, 1.0f);
    rank1_took = absl::Now() - start;
    rank1_done.Notify();
  });
  rank0.join();
  rank1.join();
  EXPECT_EQ(rank0_after_abort.code(), absl::StatusCode::kAborted)
      << rank0_after_abort;
  EXPECT_FALSE(rank1_sum.ok());
  EXPECT_LT(rank1_took, timeout / 4);
}

TEST(ProcessGroupsTest, EvictionAndDestructionDestroyTheGroups) {
  InMemoryRendezvousStore store;
  std::unique_ptr<ProcessGroups> groups =
      MakeGroups(&store, 0, absl::Seconds(5));
  ASSERT_NE(groups, nullptr);
  absl::StatusOr<c10d::ProcessGroup*> old_group =
      groups->Get(Key({0}, 1), "sess/e1/g0");
  absl::StatusOr<c10d::ProcessGroup*> new_group =
      groups->Get(Key({0}, 2), "sess/e2/g0");
  ASSERT_TRUE(old_group.ok()) << old_group.status();
  ASSERT_TRUE(new_group.ok()) << new_group.status();
  // Watch both without owning them.
  auto watch = [](c10d::ProcessGroup* group) {
    return c10::weak_intrusive_ptr<c10d::ProcessGroup>(
        c10::intrusive_ptr<c10d::ProcessGroup>::unsafe_reclaim_from_nonowning(
            group));
  };
  c10::weak_intrusive_ptr<c10d::ProcessGroup> old_watch = watch(*old_group);
  c10::weak_intrusive_ptr<c10d::ProcessGroup> new_watch = watch(*new_group);
  EXPECT_FALSE(old_watch.expired());

  EXPECT_EQ(groups->EvictBefore(2), 1);
  EXPECT_TRUE(old_watch.expired());
  EXPECT_FALSE(new_watch.expired());
  EXPECT_EQ(groups->Get(Key({0}, 1), "sess/e1/g0-again").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(groups->size(), 1);

  groups.reset();
  EXPECT_TRUE(new_watch.expired());
}

}  // namespace
}  // namespace dcp
