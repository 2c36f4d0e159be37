#include "comm/rendezvous_store.h"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/scheduler_service.grpc.pb.h"
#include "comm/scheduler_rendezvous_store.h"

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

TEST(InMemoryRendezvousStoreTest, WaitBlocksUntilTheLastKeyIsSet) {
  InMemoryRendezvousStore store;
  ASSERT_TRUE(store.Set("k/0", "x").ok());
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(store.Set("k/1", "y").ok());
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<std::string>> values =
      store.Wait({"k/0", "k/1"}, absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_THAT(*values, ElementsAre("x", "y"));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(40));
}

TEST(InMemoryRendezvousStoreTest, WaitTimesOutNamingTheMissingKeys) {
  InMemoryRendezvousStore store;
  ASSERT_TRUE(store.Set("k/0", "x").ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<std::string>> values =
      store.Wait({"k/0", "k/1", "k/2"}, absl::Milliseconds(50));
  EXPECT_EQ(values.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(values.status().message(), HasSubstr("k/1, k/2"));
  EXPECT_THAT(values.status().message(), ::testing::Not(HasSubstr("k/0")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
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

  std::unique_ptr<SchedulerRendezvousStore> NewStore(std::string session) {
    SchedulerRendezvousStore::Options options;
    options.session_id = std::move(session);
    absl::StatusOr<std::unique_ptr<SchedulerRendezvousStore>> store =
        SchedulerRendezvousStore::Create(channel_, options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  FakeStoreService service_{"s1"};
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(SchedulerRendezvousStoreTest, WaitPollsUntilEveryKeyIsSet) {
  std::unique_ptr<SchedulerRendezvousStore> store = NewStore("s1");
  ASSERT_TRUE(store->Set("s1/g/0", "addr0").ok());
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(150));
    EXPECT_TRUE(store->Set("s1/g/1", std::string("\0\1", 2)).ok());
  });
  absl::StatusOr<std::vector<std::string>> values =
      store->Wait({"s1/g/0", "s1/g/1"}, absl::Seconds(10));
  late.join();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_THAT(*values, ElementsAre("addr0", std::string("\0\1", 2)));
  // Backoff doubles 1 ms -> 50 ms: ~150 ms of waiting takes a handful of
  // polls, not one per millisecond.
  EXPECT_GE(service_.gets(), 3);
  EXPECT_LE(service_.gets(), 30);
}

TEST_F(SchedulerRendezvousStoreTest, WaitTimesOutWithDeadlineExceeded) {
  std::unique_ptr<SchedulerRendezvousStore> store = NewStore("s1");
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<std::string>> values =
      store->Wait({"s1/never"}, absl::Milliseconds(200));
  const absl::Duration elapsed = absl::Now() - start;
  EXPECT_EQ(values.status().code(), absl::StatusCode::kDeadlineExceeded)
      << values.status();
  EXPECT_THAT(values.status().message(), HasSubstr("s1/never"));
  EXPECT_GE(elapsed, absl::Milliseconds(190));
  EXPECT_LT(elapsed, absl::Seconds(3));
}

TEST_F(SchedulerRendezvousStoreTest, OtherErrorsEndTheWaitAtOnce) {
  std::unique_ptr<SchedulerRendezvousStore> store = NewStore("stale-session");
  EXPECT_EQ(store->Set("s1/x", "v").code(),
            absl::StatusCode::kFailedPrecondition);
  const absl::Time start = absl::Now();
  EXPECT_EQ(store->Wait({"s1/x"}, absl::Seconds(10)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
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

TEST(SchedulerRendezvousStoreCreateTest, UnreachableSchedulerTimesOut) {
  // Nothing listens on port 1: every poll is UNAVAILABLE, retried until the
  // deadline.
  SchedulerRendezvousStore::Options options;
  options.session_id = "s";
  auto store = SchedulerRendezvousStore::Create(
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()),
      options);
  ASSERT_TRUE(store.ok());
  const absl::Time start = absl::Now();
  absl::Status status = (*store)->Wait({"k"}, absl::Milliseconds(300)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

}  // namespace
}  // namespace dcp
