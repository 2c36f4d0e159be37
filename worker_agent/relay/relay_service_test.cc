// RelayService over real gRPC: agents' calls into an in-process relay, the
// relay's calls into an in-process fake scheduler that answers only the
// methods the relay sends upstream.

#include "worker_agent/relay/relay_service.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/scheduler_service.grpc.pb.h"

namespace dcp {
namespace {

// How long a test waits for what must happen before calling it a hang.
constexpr absl::Duration kGuard = absl::Seconds(30);
constexpr absl::Duration kWindow = absl::Milliseconds(20);
constexpr absl::Duration kLinger = absl::Milliseconds(5);

// What the fake scheduler puts in each rank's drain message, so that a
// caller can tell its own part from another rank's.
int64_t LastStepFor(int32_t rank) { return 100 + rank; }

std::string AnswerFor(const v1::TimingReport& report) {
  return absl::StrCat("rank ", report.rank(), " step ", report.step());
}

// The scheduler's side of the relay: StreamNodePlans sends each rank a
// drain message of its own then ends every part OK (or fails the call with
// `plans_status`), StreamNodeReports answers each report with a result
// naming it (or fails the call with `reports_status` on its first batch),
// StoreGet answers `store_status`. Records what it was sent.
class FakeScheduler final : public v1::Scheduler::Service {
 public:
  void set_plans_status(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    plans_status_ = std::move(status);
  }
  void set_reports_status(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    reports_status_ = std::move(status);
  }
  void set_store_status(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    store_status_ = std::move(status);
  }
  std::vector<v1::NodePlansRequest> plan_calls() {
    absl::MutexLock lock(&mu_);
    return plan_calls_;
  }
  int report_calls() {
    absl::MutexLock lock(&mu_);
    return report_calls_;
  }
  std::vector<v1::TimingReport> reports() {
    absl::MutexLock lock(&mu_);
    return reports_;
  }
  /// The size of each batch read, in order.
  std::vector<int> batch_sizes() {
    absl::MutexLock lock(&mu_);
    return batch_sizes_;
  }
  std::vector<v1::StoreGetRequest> store_gets() {
    absl::MutexLock lock(&mu_);
    return store_gets_;
  }

  grpc::Status StreamNodePlans(
      grpc::ServerContext* /*context*/, const v1::NodePlansRequest* request,
      grpc::ServerWriter<v1::NodePlanUpdate>* writer) override {
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      plan_calls_.push_back(*request);
      status = plans_status_;
    }
    if (!status.ok()) return status;
    v1::NodePlanUpdate steps, ends;
    for (const v1::StreamPlansRequest& rank : request->ranks()) {
      v1::RankPlanUpdate* step = steps.add_updates();
      step->set_rank(rank.rank());
      step->mutable_update()->mutable_drain()->set_last_step(
          LastStepFor(rank.rank()));
      v1::RankPlanUpdate* end = ends.add_updates();
      end->set_rank(rank.rank());
      end->mutable_end()->set_code(0);
    }
    writer->Write(steps);
    writer->Write(ends);
    return grpc::Status::OK;
  }

  grpc::Status StreamNodeReports(
      grpc::ServerContext* /*context*/,
      grpc::ServerReaderWriter<v1::ReportResultBatch, v1::TimingReportBatch>*
          stream) override {
    {
      absl::MutexLock lock(&mu_);
      ++report_calls_;
    }
    v1::TimingReportBatch batch;
    while (stream->Read(&batch)) {
      {
        absl::MutexLock lock(&mu_);
        if (!reports_status_.ok()) return reports_status_;
        batch_sizes_.push_back(batch.reports_size());
      }
      v1::ReportResultBatch results;
      for (const v1::TimingReport& report : batch.reports()) {
        v1::ReportResult* result = results.add_results();
        result->set_step(report.step());
        result->set_rank(report.rank());
        result->set_code(0);
        result->set_message(AnswerFor(report));
        result->mutable_ack();
        absl::MutexLock lock(&mu_);
        reports_.push_back(report);
      }
      if (!stream->Write(results)) break;
    }
    return grpc::Status::OK;
  }

  grpc::Status StoreGet(grpc::ServerContext* /*context*/,
                        const v1::StoreGetRequest* request,
                        v1::StoreGetResponse* response) override {
    absl::MutexLock lock(&mu_);
    store_gets_.push_back(*request);
    if (!store_status_.ok()) return store_status_;
    for (const std::string& key : request->keys()) {
      response->add_values(absl::StrCat("value of ", key));
    }
    return grpc::Status::OK;
  }

 private:
  absl::Mutex mu_;
  grpc::Status plans_status_ ABSL_GUARDED_BY(mu_);
  grpc::Status reports_status_ ABSL_GUARDED_BY(mu_);
  grpc::Status store_status_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::NodePlansRequest> plan_calls_ ABSL_GUARDED_BY(mu_);
  int report_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::TimingReport> reports_ ABSL_GUARDED_BY(mu_);
  std::vector<int> batch_sizes_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::StoreGetRequest> store_gets_ ABSL_GUARDED_BY(mu_);
};

// A FakeClock that counts its readings: the relay reads the clock when it
// takes a StreamPlans call's subscription or a report, so a test can know
// that a call or report has been taken before it moves time past the
// gather window or the linger.
class CountingClock final : public Clock {
 public:
  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    ++reads_;
    return fake_.Now();
  }
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) override {
    return fake_.AwaitWithDeadline(mu, cond, deadline);
  }

  int reads() {
    absl::MutexLock lock(&mu_);
    return reads_;
  }
  /// Waits (up to kGuard of real time) until the clock was read `count`
  /// times; returns whether it was.
  bool AwaitReads(int count) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, count]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return reads_ >= count;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), kGuard);
  }
  FakeClock& fake() { return fake_; }

 private:
  FakeClock fake_;
  absl::Mutex mu_;
  int reads_ ABSL_GUARDED_BY(mu_) = 0;
};

class RelayServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int upstream_port = 0;
    grpc::ServerBuilder upstream_builder;
    upstream_builder.AddListeningPort(
        "127.0.0.1:0", grpc::InsecureServerCredentials(), &upstream_port);
    upstream_builder.RegisterService(&scheduler_);
    upstream_server_ = upstream_builder.BuildAndStart();
    ASSERT_NE(upstream_server_, nullptr);
    ASSERT_GT(upstream_port, 0);

    relay_ = std::make_unique<RelayService>(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", upstream_port),
                            grpc::InsecureChannelCredentials()),
        RelayServiceOptions{kWindow, &clock_, kLinger});
    int relay_port = 0;
    grpc::ServerBuilder relay_builder;
    relay_builder.AddListeningPort(
        "127.0.0.1:0", grpc::InsecureServerCredentials(), &relay_port);
    relay_builder.RegisterService(relay_.get());
    relay_server_ = relay_builder.BuildAndStart();
    ASSERT_NE(relay_server_, nullptr);
    ASSERT_GT(relay_port, 0);
    agent_ = v1::Scheduler::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", relay_port),
                            grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (relay_ != nullptr) relay_->Shutdown();
    if (relay_server_ != nullptr) relay_server_->Shutdown();
    if (upstream_server_ != nullptr) upstream_server_->Shutdown();
  }

  static void Guard(grpc::ClientContext& context) {
    context.set_deadline(absl::ToChronoTime(absl::Now() + kGuard));
  }

  static v1::StreamPlansRequest Subscription(int32_t rank) {
    v1::StreamPlansRequest request;
    request.set_rank(rank);
    request.set_session_id("session");
    request.set_from_step(3);
    return request;
  }

  FakeScheduler scheduler_;
  std::unique_ptr<grpc::Server> upstream_server_;
  CountingClock clock_;
  std::unique_ptr<RelayService> relay_;
  std::unique_ptr<grpc::Server> relay_server_;
  std::unique_ptr<v1::Scheduler::Stub> agent_;
};

TEST_F(RelayServiceTest, PlanCallsInOneWindowShareOneUpstreamCall) {
  grpc::ClientContext context0, context1;
  Guard(context0);
  Guard(context1);
  auto stream0 = agent_->StreamPlans(&context0, Subscription(0));
  // The gathering waits for the window once the first call is taken.
  ASSERT_TRUE(
      clock_.fake().AwaitSleeperUntil(clock_.fake().Now() + kWindow, kGuard));
  const int reads = clock_.reads();
  auto stream1 = agent_->StreamPlans(&context1, Subscription(1));
  ASSERT_TRUE(clock_.AwaitReads(reads + 1));
  clock_.fake().Advance(kWindow);

  for (int32_t rank : {0, 1}) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    auto& stream = rank == 0 ? stream0 : stream1;
    v1::PlanUpdate update;
    ASSERT_TRUE(stream->Read(&update));
    ASSERT_TRUE(update.has_drain()) << update.DebugString();
    EXPECT_EQ(update.drain().last_step(), LastStepFor(rank));
    EXPECT_FALSE(stream->Read(&update)) << update.DebugString();
    const grpc::Status status = stream->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
  }

  const std::vector<v1::NodePlansRequest> calls = scheduler_.plan_calls();
  ASSERT_EQ(calls.size(), 1u);
  ASSERT_EQ(calls[0].ranks_size(), 2);
  std::vector<int32_t> ranks;
  for (const v1::StreamPlansRequest& rank : calls[0].ranks()) {
    EXPECT_EQ(rank.session_id(), "session");
    EXPECT_EQ(rank.from_step(), 3);
    ranks.push_back(rank.rank());
  }
  std::sort(ranks.begin(), ranks.end());
  EXPECT_EQ(ranks, (std::vector<int32_t>{0, 1}));
}

TEST_F(RelayServiceTest, UpstreamStatusEndsThePlanCalls) {
  const grpc::Status refused(grpc::StatusCode::UNAUTHENTICATED,
                             "the relay's token is not known");
  scheduler_.set_plans_status(refused);
  grpc::ClientContext context0, context1;
  Guard(context0);
  Guard(context1);
  auto stream0 = agent_->StreamPlans(&context0, Subscription(0));
  ASSERT_TRUE(
      clock_.fake().AwaitSleeperUntil(clock_.fake().Now() + kWindow, kGuard));
  const int reads = clock_.reads();
  auto stream1 = agent_->StreamPlans(&context1, Subscription(1));
  ASSERT_TRUE(clock_.AwaitReads(reads + 1));
  clock_.fake().Advance(kWindow);

  for (auto* stream : {stream0.get(), stream1.get()}) {
    v1::PlanUpdate update;
    EXPECT_FALSE(stream->Read(&update)) << update.DebugString();
    const grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), refused.error_code());
    EXPECT_EQ(status.error_message(), refused.error_message());
  }
  EXPECT_EQ(scheduler_.plan_calls().size(), 1u);
}

v1::TimingReport ReportOf(int32_t rank, int64_t step) {
  v1::TimingReport report;
  report.set_epoch(1);
  report.set_step(step);
  report.set_rank(rank);
  return report;
}

// Reads `stream`'s next result and checks it answers `report`.
template <typename Stream>
void ExpectAnswer(Stream& stream, const v1::TimingReport& report) {
  v1::ReportResult result;
  ASSERT_TRUE(stream->Read(&result));
  EXPECT_EQ(result.rank(), report.rank());
  EXPECT_EQ(result.step(), report.step());
  EXPECT_EQ(result.code(), 0);
  EXPECT_EQ(result.message(), AnswerFor(report));
}

TEST_F(RelayServiceTest, ReportCallsShareOneUpstreamCall) {
  grpc::ClientContext context0, context1;
  Guard(context0);
  Guard(context1);
  auto stream0 = agent_->StreamReports(&context0);
  auto stream1 = agent_->StreamReports(&context1);
  std::vector<v1::TimingReport> sent = {ReportOf(0, 5), ReportOf(1, 5)};
  // The fake clock stands still: a report that waited for the other call's
  // would never go alone.
  ASSERT_TRUE(stream0->Write(sent[0]));
  ASSERT_TRUE(stream1->Write(sent[1]));
  ExpectAnswer(stream0, sent[0]);
  ExpectAnswer(stream1, sent[1]);
  for (auto* stream : {stream0.get(), stream1.get()}) {
    ASSERT_TRUE(stream->WritesDone());
    const grpc::Status status = stream->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
  }

  EXPECT_EQ(scheduler_.report_calls(), 1);
  std::vector<v1::TimingReport> received = scheduler_.reports();
  ASSERT_EQ(received.size(), sent.size());
  std::sort(received.begin(), received.end(),
            [](const v1::TimingReport& a, const v1::TimingReport& b) {
              return a.rank() < b.rank();
            });
  for (size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(received[i].rank(), sent[i].rank());
    EXPECT_EQ(received[i].step(), sent[i].step());
  }
}

TEST_F(RelayServiceTest, AReportWaitsForTheNodesOtherCallsAtMostTheLinger) {
  grpc::ClientContext context0, context1;
  Guard(context0);
  Guard(context1);
  auto stream0 = agent_->StreamReports(&context0);
  auto stream1 = agent_->StreamReports(&context1);
  // After one answered report each, both calls are open at the relay.
  ASSERT_TRUE(stream0->Write(ReportOf(0, 5)));
  ASSERT_TRUE(stream1->Write(ReportOf(1, 5)));
  ExpectAnswer(stream0, ReportOf(0, 5));
  ExpectAnswer(stream1, ReportOf(1, 5));
  const size_t batches = scheduler_.batch_sizes().size();

  // Step 6: rank 0's report waits, the timer set for the linger, until
  // rank 1's comes; both go as one batch.
  ASSERT_TRUE(stream0->Write(ReportOf(0, 6)));
  ASSERT_TRUE(
      clock_.fake().AwaitSleeperUntil(clock_.fake().Now() + kLinger, kGuard));
  EXPECT_EQ(scheduler_.reports().size(), 2u);
  ASSERT_TRUE(stream1->Write(ReportOf(1, 6)));
  ExpectAnswer(stream0, ReportOf(0, 6));
  ExpectAnswer(stream1, ReportOf(1, 6));
  ASSERT_EQ(scheduler_.batch_sizes().size(), batches + 1);
  EXPECT_EQ(scheduler_.batch_sizes().back(), 2);

  // Step 7: rank 1 lags; rank 0's report goes alone once the linger is
  // over. (The timer still sleeps until the same time, set in step 6: the
  // relay's reading of the clock on taking the report shows it has it.)
  const int reads = clock_.reads();
  ASSERT_TRUE(stream0->Write(ReportOf(0, 7)));
  ASSERT_TRUE(clock_.AwaitReads(reads + 1));
  ASSERT_TRUE(
      clock_.fake().AwaitSleeperUntil(clock_.fake().Now() + kLinger, kGuard));
  EXPECT_EQ(scheduler_.reports().size(), 4u);
  clock_.fake().Advance(kLinger);
  ExpectAnswer(stream0, ReportOf(0, 7));
  ASSERT_EQ(scheduler_.batch_sizes().size(), batches + 2);
  EXPECT_EQ(scheduler_.batch_sizes().back(), 1);

  // Rank 1 half-closes: the node's reports wait for it no more.
  ASSERT_TRUE(stream1->WritesDone());
  EXPECT_TRUE(stream1->Finish().ok());
  ASSERT_TRUE(stream0->Write(ReportOf(0, 8)));
  ExpectAnswer(stream0, ReportOf(0, 8));
  ASSERT_TRUE(stream0->WritesDone());
  EXPECT_TRUE(stream0->Finish().ok());
}

TEST_F(RelayServiceTest, UpstreamStatusEndsReportCallsAwaitingResults) {
  const grpc::Status refused(grpc::StatusCode::PERMISSION_DENIED,
                             "job id other-job is not this scheduler's");
  scheduler_.set_reports_status(refused);
  grpc::ClientContext context;
  Guard(context);
  auto stream = agent_->StreamReports(&context);
  v1::TimingReport report;
  report.set_epoch(1);
  report.set_step(5);
  report.set_rank(0);
  ASSERT_TRUE(stream->Write(report));
  v1::ReportResult result;
  EXPECT_FALSE(stream->Read(&result)) << result.DebugString();
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), refused.error_code());
  EXPECT_EQ(status.error_message(), refused.error_message());
}

TEST_F(RelayServiceTest, UnaryCallsAreForwardedWithTheSchedulersStatus) {
  v1::StoreGetRequest request;
  request.set_session_id("session");
  request.add_keys("session/a");
  {
    grpc::ClientContext context;
    Guard(context);
    v1::StoreGetResponse response;
    const grpc::Status status = agent_->StoreGet(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.values_size(), 1);
    EXPECT_EQ(response.values(0), "value of session/a");
  }
  const grpc::Status missing(grpc::StatusCode::NOT_FOUND,
                             "key session/a is not set yet");
  scheduler_.set_store_status(missing);
  {
    grpc::ClientContext context;
    Guard(context);
    v1::StoreGetResponse response;
    const grpc::Status status = agent_->StoreGet(&context, request, &response);
    EXPECT_EQ(status.error_code(), missing.error_code());
    EXPECT_EQ(status.error_message(), missing.error_message());
  }
  const std::vector<v1::StoreGetRequest> gets = scheduler_.store_gets();
  ASSERT_EQ(gets.size(), 2u);
  for (const v1::StoreGetRequest& get : gets) {
    EXPECT_EQ(get.session_id(), "session");
    ASSERT_EQ(get.keys_size(), 1);
    EXPECT_EQ(get.keys(0), "session/a");
  }
}

}  // namespace
}  // namespace dcp
