#include "comm/rendezvous_store.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "comm/scheduler_rendezvous_store.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/scheduler_service.grpc.pb.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(InMemoryRendezvousStoreTest, WaitReturnsValuesInKeyOrder) {
  InMemoryRendezvousStore store;
  ASSERT_TRUE(store.Set("g/1", std::string("b\0b", 3)).ok());
  ASSERT_TRUE(store.Set("g/0", "a").ok());
  absl::StatusOr<std::vector<std::string>> values =
      store.Wait({"g/0", "g/1"}, absl::Seconds(1));
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_THAT(*values, ElementsAre("a", std::string("b\0b", 3)));
  EXPECT_EQ(store.size(), 2);
}

// A guard against a test that hangs, never a step of one: every wait below
// ends by a fake clock's step or a notification long before it.
constexpr absl::Duration kGuard = absl::Seconds(30);

// Runs `store->Wait(keys, timeout)` on its own thread, so that the test can
// step the fake clock the wait is measured on.
class AsyncWait {
 public:
  AsyncWait(RendezvousStoreInterface* store, std::vector<std::string> keys,
            absl::Duration timeout)
      : thread_([this, store, keys = std::move(keys), timeout] {
          result_ = store->Wait(keys, timeout);
          done_.Notify();
        }) {}
  ~AsyncWait() {
    if (thread_.joinable()) thread_.join();
  }

  const absl::Notification& done() const { return done_; }
  absl::StatusOr<std::vector<std::string>> Join() {
    thread_.join();
    return result_;
  }

 private:
  absl::StatusOr<std::vector<std::string>> result_ =
      absl::UnknownError("not run");
  absl::Notification done_;
  std::thread thread_;
};

TEST(InMemoryRendezvousStoreTest, WaitBlocksUntilTheLastKeyIsSet) {
  FakeClock clock;  // Never moves: only the Set can end the wait.
  InMemoryRendezvousStore store({&clock});
  ASSERT_TRUE(store.Set("k/0", "x").ok());
  AsyncWait wait(&store, {"k/0", "k/1"}, absl::Seconds(10));
  // The waiter found k/1 missing and is blocked.
  ASSERT_TRUE(clock.AwaitSleepers(1, kGuard));
  EXPECT_EQ(clock.NextDeadline(), absl::UnixEpoch() + absl::Seconds(10));
  EXPECT_FALSE(wait.done().HasBeenNotified());
  ASSERT_TRUE(store.Set("k/1", "y").ok());
  absl::StatusOr<std::vector<std::string>> values = wait.Join();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_THAT(*values, ElementsAre("x", "y"));
}

TEST(InMemoryRendezvousStoreTest, WaitTimesOutNamingTheMissingKeys) {
  FakeClock clock;
  InMemoryRendezvousStore store({&clock});
  ASSERT_TRUE(store.Set("k/0", "x").ok());
  AsyncWait wait(&store, {"k/0", "k/1", "k/2"}, absl::Milliseconds(50));
  ASSERT_TRUE(clock.AwaitSleepers(1, kGuard));
  // Just short of the timeout the wait goes on; at it, it ends.
  EXPECT_EQ(clock.NextDeadline(), absl::UnixEpoch() + absl::Milliseconds(50));
  clock.Advance(absl::Milliseconds(49));
  ASSERT_TRUE(clock.AwaitSleepers(1, kGuard));
  EXPECT_FALSE(wait.done().HasBeenNotified());
  clock.Advance(absl::Milliseconds(1));
  absl::StatusOr<std::vector<std::string>> values = wait.Join();
  EXPECT_EQ(values.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(values.status().message(), HasSubstr("k/1, k/2"));
  EXPECT_THAT(values.status().message(), ::testing::Not(HasSubstr("k/0")));
}

// A scheduler that implements only the rendezvous store, with the callback
// API and the server's contract: StoreGet never blocks, NOT_FOUND until every
// key is set; requests of another session are FAILED_PRECONDITION.
class FakeStoreService final : public v1::Scheduler::CallbackService {
 public:
  explicit FakeStoreService(std::string session) : session_(session) {}

  grpc::ServerUnaryReactor* StoreSet(grpc::CallbackServerContext* context,
                                     const v1::StoreSetRequest* request,
                                     v1::StoreSetResponse*) override {
    auto* reactor = context->DefaultReactor();
    if (request->session_id() != session_) {
      reactor->Finish(
          grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "bad session"));
      return reactor;
    }
    absl::MutexLock lock(&mu_);
    values_[request->key()] = request->value();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* StoreGet(grpc::CallbackServerContext* context,
                                     const v1::StoreGetRequest* request,
                                     v1::StoreGetResponse* response) override {
    auto* reactor = context->DefaultReactor();
    if (request->session_id() != session_) {
      reactor->Finish(
          grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "bad session"));
      return reactor;
    }
    absl::MutexLock lock(&mu_);
    ++gets_;
    for (const std::string& key : request->keys()) {
      auto it = values_.find(key);
      if (it == values_.end()) {
        response->Clear();
        reactor->Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, key));
        return reactor;
      }
      response->add_values(it->second);
    }
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  int gets() const {
    absl::MutexLock lock(&mu_);
    return gets_;
  }

 private:
  const std::string session_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  int gets_ ABSL_GUARDED_BY(mu_) = 0;
};

// Waits until the code under test sleeps on `clock`, then moves the clock to
// the end of that sleep; returns how long the sleep was.
absl::Duration StepOneSleep(FakeClock& clock) {
  if (!clock.AwaitSleepers(1, kGuard)) {
    ADD_FAILURE() << "nothing slept on the clock";
    return absl::ZeroDuration();
  }
  const absl::Duration sleep = clock.NextDeadline() - clock.Now();
  clock.Advance(sleep);
  return sleep;
}

// Steps every sleep until the clock reads `until`; returns their lengths.
std::vector<absl::Duration> StepSleepsUntil(FakeClock& clock,
                                            absl::Time until) {
  std::vector<absl::Duration> sleeps;
  while (clock.Now() < until && !::testing::Test::HasFailure()) {
    sleeps.push_back(StepOneSleep(clock));
  }
  return sleeps;
}

std::vector<absl::Duration> Millis(std::vector<int> ms) {
  std::vector<absl::Duration> out;
  for (int m : ms) out.push_back(absl::Milliseconds(m));
  return out;
}

class SchedulerRendezvousStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override { server_->Shutdown(); }

  // A store on `clock_`, with the default back-off (1 ms doubling to 50 ms).
  std::unique_ptr<SchedulerRendezvousStore> NewStore(
      std::string session,
      std::shared_ptr<grpc::ChannelInterface> channel = nullptr) {
    SchedulerRendezvousStore::Options options;
    options.session_id = std::move(session);
    options.clock = &clock_;
    absl::StatusOr<std::unique_ptr<SchedulerRendezvousStore>> store =
        SchedulerRendezvousStore::Create(
            channel != nullptr ? channel : channel_, options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  FakeClock clock_;
  FakeStoreService service_{"s1"};
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(SchedulerRendezvousStoreTest, WaitPollsUntilEveryKeyIsSet) {
  std::unique_ptr<SchedulerRendezvousStore> store = NewStore("s1");
  ASSERT_TRUE(store->Set("s1/g/0", "addr0").ok());
  AsyncWait wait(store.get(), {"s1/g/0", "s1/g/1"}, absl::Seconds(10));
  std::vector<absl::Duration> sleeps;
  sleeps.push_back(StepOneSleep(clock_));
  sleeps.push_back(StepOneSleep(clock_));
  // Set while the store sleeps after its third poll: the fourth finds it.
  ASSERT_TRUE(clock_.AwaitSleepers(1, kGuard));
  ASSERT_TRUE(store->Set("s1/g/1", std::string("\0\1", 2)).ok());
  sleeps.push_back(StepOneSleep(clock_));
  absl::StatusOr<std::vector<std::string>> values = wait.Join();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_THAT(*values, ElementsAre("addr0", std::string("\0\1", 2)));
  EXPECT_EQ(sleeps, Millis({1, 2, 4}));
  EXPECT_EQ(service_.gets(), 4);
}

TEST_F(SchedulerRendezvousStoreTest, WaitBacksOffThenTimesOut) {
  std::unique_ptr<SchedulerRendezvousStore> store = NewStore("s1");
  const absl::Time deadline = clock_.Now() + absl::Milliseconds(200);
  AsyncWait wait(store.get(), {"s1/never"}, absl::Milliseconds(200));
  // Doubling from 1 ms, capped at 50 ms; the last sleep ends at the deadline.
  EXPECT_EQ(StepSleepsUntil(clock_, deadline),
            Millis({1, 2, 4, 8, 16, 32, 50, 50, 37}));
  absl::StatusOr<std::vector<std::string>> values = wait.Join();
  EXPECT_EQ(values.status().code(), absl::StatusCode::kDeadlineExceeded)
      << values.status();
  EXPECT_THAT(values.status().message(), HasSubstr("s1/never"));
  EXPECT_EQ(service_.gets(), 9);
}

TEST_F(SchedulerRendezvousStoreTest, OtherErrorsEndTheWaitAtOnce) {
  std::unique_ptr<SchedulerRendezvousStore> store = NewStore("stale-session");
  EXPECT_EQ(store->Set("s1/x", "v").code(),
            absl::StatusCode::kFailedPrecondition);
  AsyncWait wait(store.get(), {"s1/x"}, absl::Seconds(10));
  const bool ended = wait.done().WaitForNotificationWithTimeout(kGuard);
  // A wait that retried sleeps on the clock; free it before failing.
  if (!ended) clock_.Advance(absl::Seconds(10));
  EXPECT_TRUE(ended) << "FAILED_PRECONDITION was retried";
  EXPECT_EQ(wait.Join().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SchedulerRendezvousStoreTest,
       UnreachableSchedulerIsRetriedUntilTimeout) {
  // Nothing listens on port 1: every poll is UNAVAILABLE, retried until the
  // deadline on the same schedule as NOT_FOUND.
  std::unique_ptr<SchedulerRendezvousStore> store = NewStore(
      "s",
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()));
  const absl::Time deadline = clock_.Now() + absl::Milliseconds(100);
  AsyncWait wait(store.get(), {"k"}, absl::Milliseconds(100));
  EXPECT_EQ(StepSleepsUntil(clock_, deadline),
            Millis({1, 2, 4, 8, 16, 32, 37}));
  absl::Status status = wait.Join().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(), HasSubstr("UNAVAILABLE"));
}

TEST_F(SchedulerRendezvousStoreTest, SetRetriesAnUnreachableScheduler) {
  // A scheduler that is away (restarting): Set polls on the Wait schedule
  // until its retry timeout, then gives up with the last error.
  SchedulerRendezvousStore::Options options;
  options.session_id = "s";
  options.clock = &clock_;
  options.set_retry_timeout = absl::Milliseconds(60);
  absl::StatusOr<std::unique_ptr<SchedulerRendezvousStore>> store =
      SchedulerRendezvousStore::Create(
          grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()),
          options);
  ASSERT_TRUE(store.ok()) << store.status();
  const absl::Time deadline = clock_.Now() + options.set_retry_timeout;
  absl::Status set;
  std::thread setter([&] { set = (*store)->Set("s/k", "v"); });
  EXPECT_EQ(StepSleepsUntil(clock_, deadline), Millis({1, 2, 4, 8, 16, 29}));
  setter.join();
  EXPECT_EQ(set.code(), absl::StatusCode::kUnavailable) << set;
  EXPECT_THAT(set.message(), HasSubstr("StoreSet s/k"));

  // Other errors are not retried.
  std::unique_ptr<SchedulerRendezvousStore> stale = NewStore("stale");
  EXPECT_EQ(stale->Set("s1/x", "v").code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(SchedulerRendezvousStoreCreateTest, RejectsBadOptions) {
  SchedulerRendezvousStore::Options options;
  EXPECT_EQ(SchedulerRendezvousStore::Create(nullptr, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto channel =
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
  options.max_backoff = absl::Microseconds(10);
  EXPECT_EQ(SchedulerRendezvousStore::Create(channel, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dcp
