#include "scheduler/server/scheduler_server.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpc_status.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/health.grpc.pb.h"
#include "proto/scheduler_service.grpc.pb.h"
#include "scheduler/eval/simulator.h"
#include "scheduler/planner/plan_proto.h"
#include "scheduler/planner/test_data.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;

constexpr int kWorld = 4;

std::vector<int32_t> Trace(int n) {
  return testing_data::SkewedTrace(n, /*seed=*/99);
}

/// Polls `done` until it holds or `timeout` passes.
bool Eventually(const std::function<bool()>& done,
                absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

void SetDeadline(grpc::ClientContext& context,
                 absl::Duration timeout = absl::Seconds(20)) {
  context.set_deadline(std::chrono::system_clock::now() +
                       absl::ToChronoMilliseconds(timeout));
}

/// Timings of `view` on the reference cluster, 1.5x slower.
v1::TimingReport Timings(const v1::RankStep& view) {
  static const ReferenceCluster* cluster = new ReferenceCluster(
      ClusterSpec::H200(), *BuiltinModel("llama3-8b"), kWorld);
  v1::TimingReport report;
  report.set_epoch(view.epoch());
  report.set_step(view.step());
  report.set_rank(view.rank());
  for (int i = 0; i < view.tasks_size(); ++i) {
    const v1::Task& task = view.tasks(i);
    const std::vector<int> ranks(task.ranks().begin(), task.ranks().end());
    const std::vector<int64_t> lengths(task.lengths().begin(),
                                       task.lengths().end());
    v1::TaskTiming* t = report.add_tasks();
    t->set_task_index(task.task_index());
    t->set_micro_step(i);
    t->set_group_size(task.ranks_size());
    t->set_recompute(task.recompute());
    t->set_seconds(
        1.5 * cluster->Cost(ranks, lengths, task.recompute(), task.ulysses())
                  .total_s);
  }
  report.set_sync_seconds(1.5 * cluster->SyncSeconds());
  return report;
}

/// What one simulated agent saw on its plan stream.
struct AgentLog {
  std::vector<int64_t> steps;
  bool drained = false;
  int64_t drain_last_step = -2;
  grpc::Status finish;
  std::vector<std::string> errors;
};

class SchedulerServerTest : public ::testing::Test {
 protected:
  SchedulerServerOptions Options() {
    SchedulerServerOptions o;
    o.listen_address = "127.0.0.1:0";
    ControlPlaneOptions& cp = o.control_plane;
    cp.lengths = Trace(4000);
    cp.window = 32768;
    cp.model = *BuiltinModel("llama3-8b");
    cp.world_size = kWorld;
    cp.tokens_per_step = 65536;
    cp.seed = 3;
    cp.lookahead_steps = 2;
    cp.refit_every = 4;
    cp.max_message_bytes = 1 << 20;
    o.stop_grace = absl::Seconds(10);
    o.shutdown_grace = absl::Seconds(1);
    return o;
  }

  void StartServer(SchedulerServerOptions options) {
    absl::StatusOr<std::unique_ptr<SchedulerServer>> server =
        SchedulerServer::Start(std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_GT(server_->port(), 0);
    channel_ = grpc::CreateChannel(server_->address(),
                                   grpc::InsecureChannelCredentials());
  }

  std::unique_ptr<v1::Scheduler::Stub> Stub() {
    return v1::Scheduler::NewStub(channel_);
  }

  absl::StatusOr<v1::RegisterResponse> Register(int rank, int world = kWorld) {
    v1::RegisterRequest request;
    request.set_rank(rank);
    request.set_host(absl::StrCat("host-", rank));
    request.set_gpu(rank);
    request.set_pid(100 + rank);
    request.set_world_size(world);
    v1::RegisterResponse response;
    grpc::ClientContext context;
    SetDeadline(context);
    absl::Status s =
        FromGrpcStatus(Stub()->Register(&context, request, &response));
    if (!s.ok()) return s;
    return response;
  }

  v1::StatusResponse Status() {
    v1::StatusResponse status;
    grpc::ClientContext context;
    SetDeadline(context);
    EXPECT_TRUE(Stub()->GetStatus(&context, {}, &status).ok());
    return status;
  }

  /// Registers `rank`, streams its plans from `from_step` and (with
  /// `report`) reports timings for every step, until the stream ends. With
  /// `cancel_after` >= 0, cancels the stream after that many messages.
  AgentLog RunAgent(int rank, bool report = true, int64_t from_step = 0,
                    int cancel_after = -1) {
    AgentLog log;
    absl::StatusOr<v1::RegisterResponse> hello = Register(rank);
    if (!hello.ok()) {
      log.errors.push_back(hello.status().ToString());
      return log;
    }
    std::unique_ptr<v1::Scheduler::Stub> stub = Stub();
    grpc::ClientContext context;
    SetDeadline(context);
    v1::StreamPlansRequest request;
    request.set_rank(rank);
    request.set_session_id(hello->session_id());
    request.set_from_step(from_step);
    auto reader = stub->StreamPlans(&context, request);
    v1::PlanUpdate update;
    int64_t last = -1;
    int messages = 0;
    while (reader->Read(&update)) {
      ++messages;
      if (update.has_step()) {
        const v1::RankStep& step = update.step();
        if (step.epoch() != 0 || step.step() <= last || step.rank() != rank ||
            log.drained) {
          log.errors.push_back(absl::StrCat("out of order: step ", step.step(),
                                            " after ", last));
        }
        last = step.step();
        log.steps.push_back(step.step());
        if (report) {
          grpc::ClientContext report_context;
          SetDeadline(report_context);
          v1::ReportAck ack;
          grpc::Status s =
              stub->ReportTimings(&report_context, Timings(step), &ack);
          if (!s.ok()) log.errors.push_back(s.error_message());
        }
      } else if (update.has_drain()) {
        log.drained = true;
        log.drain_last_step = update.drain().last_step();
      }
      if (messages == cancel_after) context.TryCancel();
    }
    log.finish = reader->Finish();
    return log;
  }

  std::vector<AgentLog> RunAgents(int first_rank = 0) {
    std::vector<AgentLog> logs(kWorld);
    std::vector<std::thread> threads;
    for (int r = first_rank; r < kWorld; ++r) {
      threads.emplace_back([this, r, &logs] { logs[r] = RunAgent(r); });
    }
    for (std::thread& t : threads) t.join();
    return logs;
  }

  static std::vector<int64_t> Steps(int64_t from, int64_t to) {
    std::vector<int64_t> steps;
    for (int64_t s = from; s <= to; ++s) steps.push_back(s);
    return steps;
  }

  /// Every rank got steps 0..`last` in order, then the drain marker naming
  /// `last`, and its stream ended OK.
  static void ExpectStepsThenDrain(const std::vector<AgentLog>& logs,
                                   int64_t last) {
    for (int r = 0; r < kWorld; ++r) {
      SCOPED_TRACE(absl::StrCat("rank ", r));
      EXPECT_TRUE(logs[r].errors.empty()) << logs[r].errors.front();
      EXPECT_EQ(logs[r].steps, Steps(0, last));
      EXPECT_TRUE(logs[r].drained);
      EXPECT_EQ(logs[r].drain_last_step, last);
      EXPECT_TRUE(logs[r].finish.ok()) << logs[r].finish.error_message();
    }
  }

  std::unique_ptr<SchedulerServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(SchedulerServerTest, StreamsTenStepsToFourRanksAndLearns) {
  SchedulerServerOptions o = Options();
  o.control_plane.max_steps = 10;
  StartServer(std::move(o));

  ExpectStepsThenDrain(RunAgents(), 9);

  v1::StatusResponse status = Status();
  EXPECT_EQ(status.planned_steps(), 10);
  EXPECT_EQ(status.completed_steps(), 10);
  EXPECT_TRUE(status.draining());
  EXPECT_EQ(status.timing_reports(), 40);
  EXPECT_GT(status.refits(), 0);
  EXPECT_GT(status.observations(), 0);
  ASSERT_EQ(status.ranks_size(), kWorld);
  for (const v1::RankStatus& rank : status.ranks()) {
    EXPECT_EQ(rank.lag_steps(), 0);
    EXPECT_EQ(rank.last_reported_step(), 9);
    EXPECT_EQ(rank.last_sent_step(), 9);
    EXPECT_EQ(rank.host(), absl::StrCat("host-", rank.rank()));
  }
  // Every stream's OnDone has told the control plane.
  EXPECT_TRUE(Eventually([&] {
    const v1::StatusResponse s = Status();
    return std::none_of(s.ranks().begin(), s.ranks().end(),
                        [](const v1::RankStatus& r) { return r.connected(); });
  }));
}

TEST_F(SchedulerServerTest, FanOutPoolsServeEveryStreamInOrder) {
  // Every wake goes through the pool's queues, where repeated wakes of a
  // queued stream coalesce: every step must still arrive, in order, then the
  // drain message. One thread: all streams share a queue; three: shards.
  for (int threads : {1, 3}) {
    SCOPED_TRACE(absl::StrCat(threads, " fan-out threads"));
    SchedulerServerOptions o = Options();
    o.control_plane.max_steps = 10;
    o.fanout_threads = threads;
    StartServer(std::move(o));

    const std::vector<AgentLog> logs = RunAgents();
    ExpectStepsThenDrain(logs, 9);
    // Destroying the server stops and joins the fan-out pool.
    server_.reset();
  }
}

TEST_F(SchedulerServerTest, ReportStreamAnswersEveryReportInOrder) {
  StartServer(Options());
  for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(Register(r).ok());
  ASSERT_TRUE(server_->control_plane().AwaitPlanned(2, absl::Seconds(10)));
  auto view = [&](int64_t step, int rank) {
    absl::StatusOr<v1::StepPlan> plan =
        server_->control_plane().PlannedStep(step);
    EXPECT_TRUE(plan.ok()) << plan.status();
    return RankView(*plan, rank);
  };
  v1::TimingReport unplanned = Timings(view(0, 0));
  unplanned.set_step(99);

  std::unique_ptr<v1::Scheduler::Stub> stub = Stub();
  grpc::ClientContext context;
  SetDeadline(context);
  auto stream = stub->StreamReports(&context);
  // Good, never planned, repeated, good: a rejected report does not end the
  // stream, and the results come back in the order written.
  for (const v1::TimingReport& report :
       {Timings(view(0, 0)), unplanned, Timings(view(0, 0)),
        Timings(view(1, 0))}) {
    ASSERT_TRUE(stream->Write(report));
  }
  ASSERT_TRUE(stream->WritesDone());
  std::vector<v1::ReportResult> results;
  v1::ReportResult result;
  while (stream->Read(&result)) results.push_back(result);
  const grpc::Status end = stream->Finish();
  EXPECT_TRUE(end.ok()) << end.error_message();

  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0].step(), 0);
  EXPECT_EQ(results[0].code(), 0) << results[0].message();
  EXPECT_EQ(results[1].step(), 99);
  EXPECT_EQ(results[1].code(), static_cast<int>(grpc::INVALID_ARGUMENT));
  EXPECT_THAT(results[1].message(), HasSubstr("99"));
  EXPECT_EQ(results[2].code(), static_cast<int>(grpc::ALREADY_EXISTS));
  EXPECT_EQ(results[3].step(), 1);
  EXPECT_EQ(results[3].code(), 0) << results[3].message();
  // Only the two good reports were taken.
  const v1::StatusResponse status = Status();
  EXPECT_EQ(status.timing_reports(), 2);
  ASSERT_EQ(status.ranks_size(), kWorld);
  EXPECT_EQ(status.ranks(0).last_reported_step(), 1);
}

// A node stream carries, per rank, what that rank's own StreamPlans stream
// would (every step in order, as planned, then the drain and an OK end),
// and a node report stream answers each batch with one result per report,
// in order.
TEST_F(SchedulerServerTest, NodeStreamsCarryEveryRanksStepsAndReports) {
  SchedulerServerOptions o = Options();
  o.control_plane.max_steps = 10;
  StartServer(std::move(o));
  absl::StatusOr<v1::RegisterResponse> hello;
  for (int r = 0; r < kWorld; ++r) ASSERT_TRUE((hello = Register(r)).ok());

  std::unique_ptr<v1::Scheduler::Stub> stub = Stub();
  grpc::ClientContext plans_context, reports_context;
  SetDeadline(plans_context);
  SetDeadline(reports_context);
  v1::NodePlansRequest request;
  for (int r = 0; r < kWorld; ++r) {
    v1::StreamPlansRequest* one = request.add_ranks();
    one->set_rank(r);
    one->set_session_id(hello->session_id());
  }
  auto plans = stub->StreamNodePlans(&plans_context, request);
  auto reports = stub->StreamNodeReports(&reports_context);
  std::vector<AgentLog> logs(kWorld);
  std::vector<bool> ended(kWorld, false);
  int messages = 0;
  v1::NodePlanUpdate update;
  while (plans->Read(&update)) {
    ++messages;
    v1::TimingReportBatch batch;
    for (const v1::RankPlanUpdate& part : update.updates()) {
      ASSERT_GE(part.rank(), 0);
      ASSERT_LT(part.rank(), kWorld);
      AgentLog& log = logs[part.rank()];
      if (part.has_end()) {
        EXPECT_EQ(part.end().code(), 0) << part.end().message();
        ended[part.rank()] = true;
      } else if (part.update().has_drain()) {
        log.drained = true;
        log.drain_last_step = part.update().drain().last_step();
      } else if (part.update().has_step()) {
        v1::RankStep step = part.update().step();
        absl::StatusOr<v1::StepPlan> plan =
            server_->control_plane().PlannedStep(step.step());
        ASSERT_TRUE(plan.ok()) << plan.status();
        v1::RankStep expected = RankView(*plan, part.rank());
        step.clear_planned_at_unix_micros();
        expected.clear_planned_at_unix_micros();
        EXPECT_EQ(step.SerializeAsString(), expected.SerializeAsString())
            << "rank " << part.rank() << " step " << step.step();
        log.steps.push_back(step.step());
        *batch.add_reports() = Timings(part.update().step());
      }
    }
    if (batch.reports().empty()) continue;
    ASSERT_TRUE(reports->Write(batch));
    v1::ReportResultBatch results;
    ASSERT_TRUE(reports->Read(&results));
    ASSERT_EQ(results.results_size(), batch.reports_size());
    for (int i = 0; i < batch.reports_size(); ++i) {
      EXPECT_EQ(results.results(i).rank(), batch.reports(i).rank());
      EXPECT_EQ(results.results(i).step(), batch.reports(i).step());
      EXPECT_EQ(results.results(i).code(), 0) << results.results(i).message();
    }
  }
  const grpc::Status end = plans->Finish();
  EXPECT_TRUE(end.ok()) << end.error_message();
  ASSERT_TRUE(reports->WritesDone());
  EXPECT_TRUE(reports->Finish().ok());
  for (int r = 0; r < kWorld; ++r) {
    logs[r].finish = end;
    EXPECT_TRUE(ended[r]) << "rank " << r;
  }
  ExpectStepsThenDrain(logs, 9);
  // Coalesced: fewer messages than the ranks' own streams would send (ten
  // steps and a drain each).
  EXPECT_LT(messages, kWorld * 11);
  const v1::StatusResponse status = Status();
  EXPECT_EQ(status.timing_reports(), 10 * kWorld);
  EXPECT_EQ(status.completed_steps(), 10);
}

// One rank of a node stream replaced by its own StreamPlans stream ends in
// its part (ABORTED); the other ranks' parts go on.
TEST_F(SchedulerServerTest, NodeStreamEndsOneRanksPartAlone) {
  StartServer(Options());
  absl::StatusOr<v1::RegisterResponse> hello;
  for (int r = 0; r < kWorld; ++r) ASSERT_TRUE((hello = Register(r)).ok());
  ASSERT_TRUE(server_->control_plane().AwaitPlanned(2, absl::Seconds(10)));
  std::unique_ptr<v1::Scheduler::Stub> stub = Stub();
  grpc::ClientContext node_context, own_context;
  SetDeadline(node_context);
  SetDeadline(own_context);
  v1::NodePlansRequest request;
  for (int r : {0, 1}) {
    v1::StreamPlansRequest* one = request.add_ranks();
    one->set_rank(r);
    one->set_session_id(hello->session_id());
  }
  auto node = stub->StreamNodePlans(&node_context, request);
  v1::NodePlanUpdate update;
  ASSERT_TRUE(node->Read(&update));
  v1::StreamPlansRequest own = request.ranks(1);
  own.set_from_step(1);
  auto replacement = stub->StreamPlans(&own_context, own);
  v1::PlanUpdate first;
  ASSERT_TRUE(replacement->Read(&first));
  EXPECT_EQ(first.step().step(), 1);
  bool rank1_ended = false;
  while (!rank1_ended && node->Read(&update)) {
    for (const v1::RankPlanUpdate& part : update.updates()) {
      if (!part.has_end()) continue;
      EXPECT_EQ(part.rank(), 1);
      EXPECT_EQ(part.end().code(), static_cast<int>(grpc::ABORTED));
      rank1_ended = true;
    }
  }
  EXPECT_TRUE(rank1_ended);
  // Rank 0's part is still open: the status shows its stream connected.
  const v1::StatusResponse status = Status();
  EXPECT_TRUE(status.ranks(0).connected());
  node_context.TryCancel();
  own_context.TryCancel();
  node->Finish().ok();
  replacement->Finish().ok();
}

TEST_F(SchedulerServerTest, UnaryCallsTranslateStatuses) {
  StartServer(Options());
  absl::StatusOr<v1::RegisterResponse> bad = Register(9);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("rank 9"));
  EXPECT_EQ(Register(0, /*world=*/8).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<v1::RegisterResponse> hello = Register(0);
  ASSERT_TRUE(hello.ok()) << hello.status();
  EXPECT_EQ(hello->world_size(), kWorld);
  EXPECT_EQ(hello->max_message_bytes(), 1 << 20);
  const std::string session = hello->session_id();
  auto stub = Stub();

  v1::StoreSetRequest set;
  set.set_session_id(session);
  set.set_key(session + "/e0/g0-1/nccl_id");
  set.set_value(std::string("\0\1\2", 3));
  v1::StoreSetResponse set_response;
  {
    grpc::ClientContext context;
    SetDeadline(context);
    ASSERT_TRUE(stub->StoreSet(&context, set, &set_response).ok());
  }
  v1::StoreGetRequest get;
  get.set_session_id(session);
  get.add_keys(set.key());
  v1::StoreGetResponse got;
  {
    grpc::ClientContext context;
    SetDeadline(context);
    ASSERT_TRUE(stub->StoreGet(&context, get, &got).ok());
    ASSERT_EQ(got.values_size(), 1);
    EXPECT_EQ(got.values(0), set.value());
  }
  get.add_keys(session + "/e0/missing");
  {
    grpc::ClientContext context;
    SetDeadline(context);
    const grpc::Status s = stub->StoreGet(&context, get, &got);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_THAT(s.error_message(), HasSubstr("missing"));
  }
  set.set_session_id("not-the-session");
  {
    grpc::ClientContext context;
    SetDeadline(context);
    EXPECT_EQ(stub->StoreSet(&context, set, &set_response).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }
  // Messages over max_message_bytes never reach the control plane.
  set.set_session_id(session);
  set.set_value(std::string(2 << 20, 'x'));
  {
    grpc::ClientContext context;
    SetDeadline(context);
    EXPECT_EQ(stub->StoreSet(&context, set, &set_response).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  v1::TimingReport report;
  report.set_rank(0);
  report.set_step(1000);
  v1::ReportAck ack;
  {
    grpc::ClientContext context;
    SetDeadline(context);
    const grpc::Status s = stub->ReportTimings(&context, report, &ack);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("not been planned"));
  }
  // A stream for an unregistered rank ends at once with the reason.
  {
    grpc::ClientContext context;
    SetDeadline(context);
    v1::StreamPlansRequest request;
    request.set_rank(3);
    request.set_session_id(session);
    auto reader = stub->StreamPlans(&context, request);
    v1::PlanUpdate update;
    EXPECT_FALSE(reader->Read(&update));
    const grpc::Status s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(s.error_message(), HasSubstr("has not registered"));
  }
}

TEST_F(SchedulerServerTest, DrainEndsEveryStreamAfterTheLastStep) {
  StartServer(Options());  // unlimited steps
  std::vector<AgentLog> logs;
  std::thread agents([&] { logs = RunAgents(); });
  ASSERT_TRUE(Eventually([&] { return Status().completed_steps() >= 3; }));
  v1::DrainRequest request;
  v1::DrainResponse response;
  {
    grpc::ClientContext context;
    SetDeadline(context);
    ASSERT_TRUE(Stub()->Drain(&context, request, &response).ok());
  }
  agents.join();
  const int64_t last = response.last_step();
  EXPECT_GE(last, 2);
  ExpectStepsThenDrain(logs, last);
  EXPECT_EQ(Status().planned_steps(), last + 1);
}

TEST_F(SchedulerServerTest, CancelledStreamDoesNotDisturbTheOthers) {
  SchedulerServerOptions o = Options();
  o.control_plane.max_steps = 6;
  StartServer(std::move(o));

  // Rank 0 cancels its stream after the first step, without reporting.
  const AgentLog cancelled =
      RunAgent(0, /*report=*/false, /*from_step=*/0, /*cancel_after=*/1);
  EXPECT_EQ(cancelled.finish.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(Eventually([&] { return !Status().ranks(0).connected(); }));

  std::vector<AgentLog> logs;
  std::thread others([&] { logs = RunAgents(/*first_rank=*/1); });
  // The others get and report every step the look-ahead allows...
  ASSERT_TRUE(Eventually([&] {
    const v1::StatusResponse s = Status();
    return s.ranks(1).last_reported_step() == 1 &&
           s.ranks(2).last_reported_step() == 1 &&
           s.ranks(3).last_reported_step() == 1;
  }));
  // ...and rank 0, back with a new stream, lets the job finish.
  const AgentLog back = RunAgent(0);
  others.join();
  EXPECT_TRUE(back.errors.empty());
  EXPECT_EQ(back.steps, Steps(0, 5));
  EXPECT_TRUE(back.finish.ok()) << back.finish.error_message();
  for (int r = 1; r < kWorld; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_TRUE(logs[r].errors.empty());
    EXPECT_EQ(logs[r].steps, Steps(0, 5));
    EXPECT_EQ(logs[r].drain_last_step, 5);
    EXPECT_TRUE(logs[r].finish.ok()) << logs[r].finish.error_message();
  }
  EXPECT_EQ(Status().completed_steps(), 6);
}

TEST_F(SchedulerServerTest, ReRegistrationClosesTheOldStream) {
  StartServer(Options());
  AgentLog old_log;
  std::thread old_agent([&] { old_log = RunAgent(2, /*report=*/false); });
  ASSERT_TRUE(Eventually([&] {
    const v1::StatusResponse s = Status();
    return s.ranks(2).connected() && s.ranks(2).last_sent_step() == 1;
  }));
  ASSERT_TRUE(Register(2).ok());
  old_agent.join();
  EXPECT_EQ(old_log.steps, Steps(0, 1));
  EXPECT_EQ(old_log.finish.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_THAT(old_log.finish.error_message(), HasSubstr("registered again"));
}

TEST_F(SchedulerServerTest, StopDrainsThenWaitReturns) {
  StartServer(Options());
  std::vector<AgentLog> logs;
  std::thread agents([&] { logs = RunAgents(); });
  ASSERT_TRUE(Eventually([&] { return Status().completed_steps() >= 2; }));
  v1::DrainRequest request;
  request.set_stop(true);
  v1::DrainResponse response;
  {
    grpc::ClientContext context;
    SetDeadline(context);
    ASSERT_TRUE(Stub()->Drain(&context, request, &response).ok());
  }
  server_->Wait();  // returns once every stream has ended
  EXPECT_TRUE(server_->control_plane().stopped());
  agents.join();
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(logs[r].drained);
    EXPECT_EQ(logs[r].drain_last_step, response.last_step());
    EXPECT_TRUE(logs[r].finish.ok());
  }
  server_->Shutdown();
}

TEST_F(SchedulerServerTest, ShutdownEndsOpenStreamsQuickly) {
  SchedulerServerOptions o = Options();
  // gRPC would wait this long for calls still open.
  o.shutdown_grace = absl::Seconds(30);
  StartServer(std::move(o));
  // A report stream the agent keeps open (one report answered, so the
  // call is surely up on the server).
  std::unique_ptr<v1::Scheduler::Stub> report_stub = Stub();
  grpc::ClientContext report_context;
  SetDeadline(report_context);
  auto reports = report_stub->StreamReports(&report_context);
  v1::TimingReport bogus;
  bogus.set_rank(99);
  ASSERT_TRUE(reports->Write(bogus));
  v1::ReportResult result;
  ASSERT_TRUE(reports->Read(&result));
  EXPECT_EQ(result.code(), static_cast<int>(grpc::INVALID_ARGUMENT));
  std::vector<AgentLog> logs(kWorld);
  std::vector<std::thread> agents;
  for (int r = 0; r < kWorld; ++r) {
    // Agents that never report: their streams stall at the look-ahead.
    agents.emplace_back([&, r] { logs[r] = RunAgent(r, /*report=*/false); });
  }
  ASSERT_TRUE(Eventually([&] {
    const v1::StatusResponse s = Status();
    return std::all_of(
        s.ranks().begin(), s.ranks().end(),
        [](const v1::RankStatus& r) { return r.last_sent_step() == 1; });
  }));
  const absl::Time start = absl::Now();
  server_->Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  for (std::thread& t : agents) t.join();
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(logs[r].steps, Steps(0, 1));
    EXPECT_EQ(logs[r].finish.error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  EXPECT_FALSE(reports->Read(&result));
  EXPECT_EQ(reports->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  server_->Wait();      // returns at once after a shutdown
  server_->Shutdown();  // idempotent
  EXPECT_EQ(Register(0).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(SchedulerServerTest, BadOptionsAndBusyPortsFail) {
  SchedulerServerOptions o = Options();
  o.control_plane.world_size = 0;
  EXPECT_EQ(SchedulerServer::Start(std::move(o)).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = Options();
  o.fanout_threads = -2;
  EXPECT_EQ(SchedulerServer::Start(std::move(o)).status().code(),
            absl::StatusCode::kInvalidArgument);
  StartServer(Options());
  o = Options();
  o.listen_address = server_->address();
  EXPECT_EQ(SchedulerServer::Start(std::move(o)).status().code(),
            absl::StatusCode::kUnavailable);
}

// ------------------------------------------------------------ health

using HealthStatus = grpc::health::v1::HealthCheckResponse;

/// One Check of `service` over the wire: its status, or the call's error.
absl::StatusOr<HealthStatus::ServingStatus> CheckHealth(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& service) {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  HealthStatus response;
  grpc::ClientContext context;
  SetDeadline(context);
  const grpc::Status s = grpc::health::v1::Health::NewStub(channel)->Check(
      &context, request, &response);
  if (!s.ok()) return FromGrpcStatus(s);
  return response.status();
}

/// A Watch of the readiness name "": each status the server sends, in order.
class HealthWatch {
 public:
  explicit HealthWatch(const std::shared_ptr<grpc::Channel>& channel)
      : stub_(grpc::health::v1::Health::NewStub(channel)) {
    SetDeadline(context_);
    reader_ = stub_->Watch(&context_, grpc::health::v1::HealthCheckRequest());
  }
  ~HealthWatch() {
    context_.TryCancel();
    reader_->Finish();  // CANCELLED, or how the server ended it
  }

  /// The next status sent; UNKNOWN when the stream ended.
  HealthStatus::ServingStatus Next() {
    HealthStatus response;
    return reader_->Read(&response) ? response.status() : HealthStatus::UNKNOWN;
  }

 private:
  std::unique_ptr<grpc::health::v1::Health::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<HealthStatus>> reader_;
};

TEST_F(SchedulerServerTest, HealthIsServingUntilDrainedAndLivenessAfter) {
  SchedulerServerOptions o = Options();
  // The profile stage holds planning back: no agent answers it here, so
  // nothing is planned and the server is ready all the same.
  o.control_plane.profile_at_start = true;
  absl::Mutex mu;
  std::vector<std::string> intercepted;
  o.on_rpc_done = [&](absl::string_view method, absl::StatusCode) {
    absl::MutexLock lock(&mu);
    intercepted.emplace_back(method);
  };
  StartServer(std::move(o));

  for (const std::string service :
       {"", "dcp.v1.Scheduler", kLivenessHealthService}) {
    SCOPED_TRACE(service);
    absl::StatusOr<HealthStatus::ServingStatus> status =
        CheckHealth(channel_, service);
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_EQ(*status, HealthStatus::SERVING);
  }
  EXPECT_EQ(CheckHealth(channel_, "dcp.v1.NoSuchService").status().code(),
            absl::StatusCode::kNotFound);

  HealthWatch watch(channel_);
  EXPECT_EQ(watch.Next(), HealthStatus::SERVING);
  v1::DrainRequest request;  // what `dcp-ctl drain` sends
  v1::DrainResponse response;
  {
    grpc::ClientContext context;
    SetDeadline(context);
    ASSERT_TRUE(Stub()->Drain(&context, request, &response).ok());
  }
  EXPECT_EQ(watch.Next(), HealthStatus::NOT_SERVING);
  EXPECT_EQ(CheckHealth(channel_, "").value(), HealthStatus::NOT_SERVING);
  EXPECT_EQ(CheckHealth(channel_, "dcp.v1.Scheduler").value(),
            HealthStatus::NOT_SERVING);
  // Draining is no reason to restart the scheduler.
  EXPECT_EQ(CheckHealth(channel_, kLivenessHealthService).value(),
            HealthStatus::SERVING);

  // Health checks are not the service's RPCs: only the Drain was counted.
  absl::MutexLock lock(&mu);
  EXPECT_THAT(intercepted, ::testing::ElementsAre("Drain"));
}

TEST_F(SchedulerServerTest, HealthIsNotServingOnceStoppedOrAllStepsPlanned) {
  {
    StartServer(Options());
    HealthWatch watch(channel_);
    EXPECT_EQ(watch.Next(), HealthStatus::SERVING);
    server_->control_plane().Drain(/*stop=*/true);  // what SIGTERM does
    EXPECT_EQ(watch.Next(), HealthStatus::NOT_SERVING);
    EXPECT_EQ(CheckHealth(channel_, kLivenessHealthService).value(),
              HealthStatus::SERVING);
    server_->Wait();  // no stream open: returns at once
  }
  server_->Shutdown();
  EXPECT_EQ(CheckHealth(channel_, kLivenessHealthService).status().code(),
            absl::StatusCode::kUnavailable);

  // --max_steps: the last step planned is a drain of its own.
  SchedulerServerOptions o = Options();
  o.control_plane.max_steps = 1;
  StartServer(std::move(o));
  HealthWatch watch(channel_);
  HealthStatus::ServingStatus status = watch.Next();
  if (status == HealthStatus::SERVING) status = watch.Next();
  EXPECT_EQ(status, HealthStatus::NOT_SERVING);
  EXPECT_EQ(Status().planned_steps(), 1);
}

}  // namespace
}  // namespace dcp
