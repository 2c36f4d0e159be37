#include "worker_agent/report_stream.h"

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/model_spec.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "scheduler/planner/plan_proto.h"
#include "scheduler/server/scheduler_server.h"
#include "scheduler/planner/test_data.h"

namespace dcp {
namespace {

constexpr int kWorld = 2;

/// The answers a test's reports got, in the order they came.
class Answers {
 public:
  ReportStream::Done Slot(int i) {
    return [this, i](absl::Status status) {
      absl::MutexLock lock(&mu_);
      got_.push_back({i, status});
    };
  }
  struct Answer {
    int index;
    absl::Status status;
  };
  std::vector<Answer> WaitFor(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return got_.size() >= n;
    };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(20));
    return got_;
  }

 private:
  absl::Mutex mu_;
  std::vector<Answer> got_ ABSL_GUARDED_BY(mu_);
};

class ReportStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SchedulerServerOptions o;
    o.listen_address = "127.0.0.1:0";
    o.shutdown_grace = absl::Seconds(1);
    ControlPlaneOptions& cp = o.control_plane;
    cp.lengths = testing_data::SkewedTrace(2000, /*seed=*/5);
    cp.window = 16384;
    cp.model = testing_data::TinyModel();
    cp.world_size = kWorld;
    cp.tokens_per_step = 32768;
    cp.lookahead_steps = 3;
    absl::StatusOr<std::unique_ptr<SchedulerServer>> server =
        SchedulerServer::Start(std::move(o));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = v1::Scheduler::NewStub(grpc::CreateChannel(
        server_->address(), grpc::InsecureChannelCredentials()));
    for (int r = 0; r < kWorld; ++r) {
      v1::RegisterRequest request;
      request.set_rank(r);
      request.set_world_size(kWorld);
      ASSERT_TRUE(server_->control_plane().Register(request).ok());
    }
    ASSERT_TRUE(server_->control_plane().AwaitPlanned(3, absl::Seconds(10)));
  }

  /// A valid report of `rank` for `step`: one second a task.
  v1::TimingReport Report(int64_t step, int rank) {
    absl::StatusOr<v1::StepPlan> plan =
        server_->control_plane().PlannedStep(step);
    EXPECT_TRUE(plan.ok()) << plan.status();
    const v1::RankStep view = RankView(*plan, rank);
    v1::TimingReport report;
    report.set_epoch(view.epoch());
    report.set_step(step);
    report.set_rank(rank);
    for (int i = 0; i < view.tasks_size(); ++i) {
      v1::TaskTiming* t = report.add_tasks();
      t->set_task_index(view.tasks(i).task_index());
      t->set_micro_step(i);
      t->set_group_size(view.tasks(i).ranks_size());
      t->set_recompute(view.tasks(i).recompute());
      t->set_seconds(1.0);
    }
    return report;
  }

  std::unique_ptr<SchedulerServer> server_;
  std::unique_ptr<v1::Scheduler::Stub> stub_;
};

TEST_F(ReportStreamTest, AnswersComeBackInOrderAndRejectionsDoNotEndIt) {
  std::shared_ptr<ReportStream> stream = ReportStream::Open(stub_.get());
  v1::TimingReport other_rank = Report(0, 0);
  other_rank.set_rank(7);  // Outside the world.
  Answers answers;
  ASSERT_TRUE(stream->Send(Report(0, 0), answers.Slot(0)));
  ASSERT_TRUE(stream->Send(other_rank, answers.Slot(1)));
  ASSERT_TRUE(stream->Send(Report(0, 0), answers.Slot(2)));
  ASSERT_TRUE(stream->Send(Report(0, 1), answers.Slot(3)));
  const std::vector<Answers::Answer> got = answers.WaitFor(4);
  ASSERT_EQ(got.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i].index, i);
  EXPECT_TRUE(got[0].status.ok()) << got[0].status;
  EXPECT_EQ(got[1].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(got[2].status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(got[3].status.ok()) << got[3].status;
  EXPECT_EQ(server_->control_plane().Status().completed_steps(), 1);

  stream->Close();
  EXPECT_FALSE(stream->Send(Report(1, 0), answers.Slot(4)));
  EXPECT_TRUE(stream->AwaitDone(absl::Seconds(10)));
  EXPECT_TRUE(stream->ended());
}

TEST_F(ReportStreamTest, AStreamThatEndsFailsWhatWaitsAndTakesNoMore) {
  std::shared_ptr<ReportStream> stream = ReportStream::Open(stub_.get());
  Answers answers;
  ASSERT_TRUE(stream->Send(Report(0, 0), answers.Slot(0)));
  ASSERT_TRUE(answers.WaitFor(1)[0].status.ok());
  server_->Shutdown();
  ASSERT_TRUE(stream->AwaitDone(absl::Seconds(10)));
  EXPECT_TRUE(stream->ended());
  EXPECT_FALSE(stream->Send(Report(1, 0), answers.Slot(1)));
}

TEST_F(ReportStreamTest, CancelFailsUnansweredReportsWithUnavailable) {
  std::shared_ptr<ReportStream> stream = ReportStream::Open(stub_.get());
  Answers answers;
  // Cancelled at once: each of these is either answered or failed, once.
  // Built first: answered reports complete steps, which the scheduler then
  // no longer keeps.
  std::vector<v1::TimingReport> reports;
  for (int i = 0; i < 8; ++i) reports.push_back(Report(i % 3, i % 2));
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(stream->Send(reports[i], answers.Slot(i)));
  }
  stream->Cancel();
  ASSERT_TRUE(stream->AwaitDone(absl::Seconds(10)));
  const std::vector<Answers::Answer> got = answers.WaitFor(8);
  ASSERT_EQ(got.size(), 8u);
  for (const Answers::Answer& a : got) {
    EXPECT_TRUE(a.status.ok() || absl::IsAlreadyExists(a.status) ||
                absl::IsUnavailable(a.status))
        << a.index << ": " << a.status;
  }
}

}  // namespace
}  // namespace dcp
