#include "comm/c10d_store.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "c10/util/Exception.h"
#include "comm/rendezvous_store.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torch/csrc/distributed/c10d/PrefixStore.hpp"
#include "torch/csrc/distributed/c10d/ProcessGroupGloo.hpp"
#include "torch/csrc/distributed/c10d/exception.h"
#include "torch/torch.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::vector<uint8_t> Bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

c10::intrusive_ptr<C10dRendezvousStore> MakeStore(
    RendezvousStoreInterface* store,
    C10dRendezvousStore::Options options = {}) {
  absl::StatusOr<c10::intrusive_ptr<C10dRendezvousStore>> made =
      C10dRendezvousStore::Create(store, options);
  EXPECT_TRUE(made.ok()) << made.status();
  return *made;
}

TEST(C10dRendezvousStoreTest, SetThenGetPassesBytesThrough) {
  InMemoryRendezvousStore dcp_store;
  auto store = MakeStore(&dcp_store);
  const std::vector<uint8_t> value = {0, 1, 255, 0, 7};
  store->set("k", value);
  EXPECT_EQ(store->get("k"), value);
  // The key reached dcp's store unchanged.
  absl::StatusOr<std::vector<std::string>> raw =
      dcp_store.Wait({"k"}, absl::ZeroDuration());
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(raw->front(), std::string("\0\1\xff\0\7", 5));
  EXPECT_TRUE(store->last_error().ok());
}

TEST(C10dRendezvousStoreTest, GetWaitsForAnotherThreadsSet) {
  InMemoryRendezvousStore dcp_store;
  auto store = MakeStore(&dcp_store);
  std::vector<uint8_t> got;
  std::thread reader([&] { got = store->get("late"); });
  store->set("late", Bytes("v"));
  reader.join();
  EXPECT_EQ(got, Bytes("v"));
}

TEST(C10dRendezvousStoreTest, PrefixStoreKeysLandUnderThePrefix) {
  InMemoryRendezvousStore dcp_store;
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("job/e3/g0-1",
                                                         MakeStore(&dcp_store));
  prefixed->set("0", Bytes("addr"));
  EXPECT_TRUE(dcp_store.Wait({"job/e3/g0-1/0"}, absl::ZeroDuration()).ok());
  EXPECT_EQ(prefixed->get("0"), Bytes("addr"));
}

TEST(C10dRendezvousStoreTest, MissingKeyThrowsTimeoutErrorNamingIt) {
  InMemoryRendezvousStore dcp_store;
  C10dRendezvousStore::Options options;
  options.timeout = absl::Milliseconds(50);
  auto store = MakeStore(&dcp_store, options);
  store->set("here", Bytes("x"));
  const absl::Time start = absl::Now();
  try {
    store->wait({"here", "never"});
    FAIL() << "wait returned without the key";
  } catch (const c10d::TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("never"));
    EXPECT_THAT(e.what(), Not(HasSubstr("here")));
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(store->last_error().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THROW(store->get("never"), c10d::TimeoutError);
}

TEST(C10dRendezvousStoreTest, ExplicitTimeoutAndZeroTimeoutAreBounded) {
  FakeClock clock;
  InMemoryRendezvousStore::Options store_options;
  store_options.clock = &clock;
  InMemoryRendezvousStore dcp_store(store_options);
  C10dRendezvousStore::Options options;
  options.timeout = absl::Seconds(30);
  auto store = MakeStore(&dcp_store, options);
  bool timed_out = false;
  std::thread waiter([&] {
    try {
      // c10d's "no timeout" is the store's timeout here, never unbounded.
      store->wait({"never"}, c10d::Store::kNoTimeout);
    } catch (const c10d::TimeoutError&) {
      timed_out = true;
    }
  });
  ASSERT_TRUE(clock.AwaitSleepers(1, absl::Seconds(30)));
  EXPECT_EQ(clock.NextDeadline(), clock.Now() + absl::Seconds(30));
  clock.Advance(absl::Seconds(30));
  waiter.join();
  EXPECT_TRUE(timed_out);
}

TEST(C10dRendezvousStoreTest, DeadlineBoundsEveryWait) {
  FakeClock clock;
  InMemoryRendezvousStore::Options store_options;
  store_options.clock = &clock;
  InMemoryRendezvousStore dcp_store(store_options);
  C10dRendezvousStore::Options options;
  options.timeout = absl::Hours(1);
  options.deadline = clock.Now() + absl::Seconds(5);
  options.clock = &clock;
  auto store = MakeStore(&dcp_store, options);
  bool timed_out = false;
  std::thread waiter([&] {
    try {
      store->wait({"never"}, std::chrono::hours(1));
    } catch (const c10d::TimeoutError&) {
      timed_out = true;
    }
  });
  ASSERT_TRUE(clock.AwaitSleepers(1, absl::Seconds(30)));
  EXPECT_EQ(clock.NextDeadline(), options.deadline);
  clock.Advance(absl::Seconds(5));
  waiter.join();
  EXPECT_TRUE(timed_out);
  // Past the deadline a present key is still read; a missing one fails now.
  store->set("k", Bytes("v"));
  EXPECT_EQ(store->get("k"), Bytes("v"));
  EXPECT_THROW(store->get("other"), c10d::TimeoutError);
}

// A store whose Set fails, as the scheduler's does for a key outside the
// session.
class RejectingStore final : public RendezvousStoreInterface {
 public:
  absl::Status Set(absl::string_view key, absl::string_view) override {
    return absl::InvalidArgumentError(absl::StrCat("bad key ", key));
  }
  absl::StatusOr<std::vector<std::string>> Wait(absl::Span<const std::string>,
                                                absl::Duration) override {
    return absl::UnavailableError("scheduler away");
  }
};

TEST(C10dRendezvousStoreTest, OtherFailuresThrowC10dErrorAndKeepTheStatus) {
  RejectingStore dcp_store;
  auto store = MakeStore(&dcp_store);
  try {
    store->set("x", Bytes("v"));
    FAIL() << "set succeeded";
  } catch (const c10d::TimeoutError&) {
    FAIL() << "a rejected set is no timeout";
  } catch (const c10d::C10dError& e) {
    EXPECT_THAT(e.what(), HasSubstr("bad key x"));
  }
  EXPECT_EQ(store->last_error().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THROW(store->get("x"), c10d::C10dError);
  EXPECT_EQ(store->last_error().code(), absl::StatusCode::kUnavailable);
}

TEST(C10dRendezvousStoreTest, RefusesWhatAWriteOnceStoreCannotDo) {
  InMemoryRendezvousStore dcp_store;
  auto store = MakeStore(&dcp_store);
  try {
    store->add("counter", 1);
    FAIL() << "add succeeded";
  } catch (const c10::NotImplementedError& e) {
    EXPECT_THAT(e.what(), HasSubstr("add is not supported"));
  }
  EXPECT_THROW(store->deleteKey("k"), c10::NotImplementedError);
  EXPECT_THROW(store->check({"k"}), c10::NotImplementedError);
  EXPECT_THROW(store->getNumKeys(), c10::NotImplementedError);
  EXPECT_THROW(store->compareSet("k", {}, {}), c10::NotImplementedError);
  // Through a PrefixStore, as a process group would call it.
  c10d::PrefixStore prefixed("p", store);
  EXPECT_THROW(prefixed.add("counter", 1), c10::NotImplementedError);
  EXPECT_EQ(dcp_store.size(), 0u);
}

TEST(C10dRendezvousStoreTest, CreateAndSetTimeoutRefuseUnboundedWaits) {
  InMemoryRendezvousStore dcp_store;
  EXPECT_EQ(C10dRendezvousStore::Create(nullptr, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  C10dRendezvousStore::Options zero;
  zero.timeout = absl::ZeroDuration();
  EXPECT_EQ(C10dRendezvousStore::Create(&dcp_store, zero).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto store = MakeStore(&dcp_store);
  EXPECT_THROW(store->setTimeout(c10d::Store::kNoTimeout), c10::Error);
  store->setTimeout(std::chrono::milliseconds(1234));
  EXPECT_EQ(store->getTimeout(), std::chrono::milliseconds(1234));
}

// Records the keys a process group sets and waits for.
class RecordingStore final : public RendezvousStoreInterface {
 public:
  absl::Status Set(absl::string_view key, absl::string_view value) override {
    {
      absl::MutexLock lock(&mu_);
      set_.insert(std::string(key));
    }
    return inner_.Set(key, value);
  }
  absl::StatusOr<std::vector<std::string>> Wait(
      absl::Span<const std::string> keys, absl::Duration timeout) override {
    return inner_.Wait(keys, timeout);
  }
  absl::flat_hash_set<std::string> set_keys() {
    absl::MutexLock lock(&mu_);
    return set_;
  }

 private:
  InMemoryRendezvousStore inner_;
  absl::Mutex mu_;
  absl::flat_hash_set<std::string> set_ ABSL_GUARDED_BY(mu_);
};

// ProcessGroupGloo forms over the store with set/get/wait alone: a refused
// method would throw out of its constructor.
TEST(C10dRendezvousStoreTest, ProcessGroupGlooFormsAndAllReducesOverIt) {
  RecordingStore dcp_store;
  constexpr int kSize = 3;
  std::vector<float> sums(kSize, 0.0f);
  std::vector<std::string> errors(kSize);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kSize; ++rank) {
    ranks.emplace_back([&, rank] {
      try {
        auto store = c10::make_intrusive<c10d::PrefixStore>(
            "sess/e0/g0-1-2", MakeStore(&dcp_store));
        auto options =
            c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(30));
        options->devices.push_back(
            c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
        c10d::ProcessGroupGloo group(store, rank, kSize, options);
        std::vector<at::Tensor> tensors = {torch::full({4}, rank + 1.0f)};
        group.allreduce(tensors)->wait();
        sums[rank] = tensors[0][3].item<float>();
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < kSize; ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
    EXPECT_EQ(sums[rank], 1.0f + 2.0f + 3.0f) << "rank " << rank;
  }
  // Gloo's full mesh (device 0): each member publishes its pair addresses
  // under its rank and its host under rank_<rank>, all under the prefix.
  absl::flat_hash_set<std::string> expected;
  for (int rank = 0; rank < kSize; ++rank) {
    expected.insert(absl::StrCat("sess/e0/g0-1-2/0/", rank));
    expected.insert(absl::StrCat("sess/e0/g0-1-2/0/rank_", rank));
  }
  EXPECT_EQ(dcp_store.set_keys(), expected);
}

}  // namespace
}  // namespace dcp
