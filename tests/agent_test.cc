// Tests of the agent against a real in-process SchedulerServer on
// 127.0.0.1:0. The cc_test is //tests:agent_test (the server's target is
// visible to //tests only).

#include "worker_agent/agent.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/collectives.h"
#include "common/clock.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/control/state_store.h"
#include "scheduler/server/scheduler_server.h"

namespace dcp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

/// Bounds a real wait that ends on a condition: a hang fails the test
/// instead of blocking it.
constexpr absl::Duration kGuard = absl::Seconds(30);

ModelSpec TinyModel() {
  ModelSpec model;
  model.name = "tiny";
  model.layers = 2;
  model.hidden = 512;
  model.heads = 8;
  model.kv_heads = 8;
  model.ffn = 1024;
  model.vocab = 1000;
  return model;
}

/// Every eighth sample is long enough that the planner splits it over two
/// ranks, so a world of two uses the group [0, 1].
std::vector<int32_t> Lengths() {
  std::vector<int32_t> lengths;
  for (int i = 0; i < 64; ++i) {
    lengths.push_back(i % 8 == 0 ? 32768 : 256 + (i * 97) % 2048);
  }
  return lengths;
}

SchedulerServerOptions ServerOptions(int world, int lookahead,
                                     int64_t max_steps) {
  SchedulerServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.stop_grace = absl::Seconds(5);
  ControlPlaneOptions& cp = options.control_plane;
  cp.lengths = Lengths();
  cp.window = 32768;
  cp.tokens_per_step = 65536;
  cp.model = TinyModel();
  cp.world_size = world;
  cp.lookahead_steps = lookahead;
  cp.max_steps = max_steps;
  return options;
}

std::unique_ptr<SchedulerServer> StartServer(SchedulerServerOptions options) {
  absl::StatusOr<std::unique_ptr<SchedulerServer>> server =
      SchedulerServer::Start(std::move(options));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

AgentOptions AgentFor(const SchedulerServer& server, int rank) {
  AgentOptions options;
  options.scheduler_address = server.address();
  options.rank = rank;
  options.host = "test";
  options.connect_timeout = absl::Seconds(10);
  options.rendezvous_timeout = absl::Seconds(20);
  options.initial_backoff = absl::Milliseconds(50);
  options.max_backoff = absl::Milliseconds(400);
  return options;
}

/// An empty report of `step` for `rank` (valid for a rank without tasks)
/// or with one timing per task.
v1::TimingReport ReportOf(const v1::RankStep& step) {
  v1::TimingReport report;
  report.set_epoch(step.epoch());
  report.set_step(step.step());
  report.set_rank(step.rank());
  for (int m = 0; m < step.tasks_size(); ++m) {
    v1::TaskTiming& t = *report.add_tasks();
    t.set_task_index(step.tasks(m).task_index());
    t.set_micro_step(m);
    t.set_seconds(0.01);
  }
  return report;
}

TEST(AgentTest, RejectsBadOptions) {
  AgentOptions options;
  options.rank = 0;
  EXPECT_EQ(Agent::Start(options).status().code(),
            absl::StatusCode::kInvalidArgument);  // No address.
  options.scheduler_address = "127.0.0.1:1";
  options.rank = -1;
  EXPECT_EQ(Agent::Start(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.rank = 0;
  options.prefetch_depth = 0;
  EXPECT_EQ(Agent::Start(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(AgentTest, UnreachableSchedulerFailsStartInTime) {
  AgentOptions options;
  options.scheduler_address = "127.0.0.1:1";  // Nothing listens there.
  options.rank = 0;
  options.connect_timeout = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  absl::Status status = Agent::Start(options).status();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("127.0.0.1:1"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(AgentTest, WorldSizeMismatchIsRefused) {
  auto server = StartServer(ServerOptions(2, 2, 4));
  ASSERT_NE(server, nullptr);
  AgentOptions options = AgentFor(*server, 0);
  options.world_size = 4;
  absl::Status status = Agent::Start(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("world"));
}

TEST(AgentTest, HandsOutStepsInOrderThenDrains) {
  auto server = StartServer(ServerOptions(1, 2, 5));
  ASSERT_NE(server, nullptr);
  auto agent = Agent::Start(AgentFor(*server, 0));
  ASSERT_TRUE(agent.ok()) << agent.status();
  EXPECT_EQ((*agent)->registration().world_size(), 1);
  EXPECT_EQ((*agent)->registration().model(), "tiny");

  std::vector<int64_t> steps;
  int64_t last = -1;
  while (true) {
    absl::StatusOr<NextStepResult> next = (*agent)->NextStep(last, kGuard);
    ASSERT_TRUE(next.ok()) << next.status();
    if (next->drained) break;
    EXPECT_EQ(next->step.rank(), 0);
    // Asking again (a lost answer) gives the same step.
    absl::StatusOr<NextStepResult> again =
        (*agent)->NextStep(last, absl::ZeroDuration());
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->step.step(), next->step.step());
    steps.push_back(next->step.step());
    ASSERT_TRUE((*agent)->ReportTimings(ReportOf(next->step)).ok());
    // A report that arrives twice (a retry after a lost ack) is fine.
    EXPECT_TRUE((*agent)->ReportTimings(ReportOf(next->step)).ok());
    last = next->step.step();
    ASSERT_LT(steps.size(), 10u);
  }
  EXPECT_THAT(steps, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_TRUE((*agent)->WaitForDrainDelivered(absl::ZeroDuration()).ok());
  // Drained is final.
  absl::StatusOr<NextStepResult> after =
      (*agent)->NextStep(last, absl::ZeroDuration());
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->drained);

  const AgentStats stats = (*agent)->Stats();
  EXPECT_EQ(stats.steps_received, 5);
  EXPECT_EQ(stats.steps_delivered, 5);
  EXPECT_EQ(stats.reports_sent, 10);
  // All of them on the report stream: none needed a ReportTimings call.
  EXPECT_EQ(stats.report_fallbacks, 0);
  EXPECT_EQ(stats.reconnects, 0);
  EXPECT_EQ(server->control_plane().Status().completed_steps(), 5);
}

TEST(AgentTest, WaitsForPlanningAndTimesOut) {
  // Look-ahead 1: step 1 is planned only once step 0 is reported.
  auto server = StartServer(ServerOptions(1, 1, 0));
  ASSERT_NE(server, nullptr);
  FakeClock clock;
  AgentOptions options = AgentFor(*server, 0);
  options.clock = &clock;
  auto agent = Agent::Start(options);
  ASSERT_TRUE(agent.ok()) << agent.status();
  absl::StatusOr<NextStepResult> first = (*agent)->NextStep(-1, kGuard);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->step.step(), 0);

  // The wait for step 1 ends when the agent's clock reaches its deadline.
  absl::StatusOr<NextStepResult> early = absl::UnknownError("not returned");
  absl::Notification returned;
  std::thread waiter([&] {
    early = (*agent)->NextStep(0, absl::Milliseconds(200));
    returned.Notify();
  });
  const absl::Time deadline = clock.Now() + absl::Milliseconds(200);
  // EXPECT, not ASSERT: the thread is joined either way.
  EXPECT_TRUE(clock.AwaitSleeperUntil(deadline, kGuard));
  EXPECT_FALSE(returned.HasBeenNotified());
  clock.Advance(absl::Milliseconds(200));
  ASSERT_TRUE(returned.WaitForNotificationWithTimeout(kGuard));
  waiter.join();
  EXPECT_EQ(early.status().code(), absl::StatusCode::kDeadlineExceeded);

  ASSERT_TRUE((*agent)->ReportTimings(ReportOf(first->step)).ok());
  absl::StatusOr<NextStepResult> second = (*agent)->NextStep(0, kGuard);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->step.step(), 1);
}

TEST(AgentTest, AsyncNextStepAnswersLaterTimesOutAndCancels) {
  auto server = StartServer(ServerOptions(1, 1, 0));
  ASSERT_NE(server, nullptr);
  FakeClock clock;
  AgentOptions options = AgentFor(*server, 0);
  options.clock = &clock;
  auto agent = Agent::Start(options);
  ASSERT_TRUE(agent.ok()) << agent.status();
  absl::StatusOr<NextStepResult> first = (*agent)->NextStep(-1, kGuard);
  ASSERT_TRUE(first.ok()) << first.status();

  // Step 1 is not planned before step 0 is reported: the call waits, on
  // the agent's thread, for the step or its deadline.
  absl::Notification answered;
  absl::StatusOr<NextStepResult> answer = absl::UnknownError("none");
  const absl::Time far = clock.Now() + absl::Seconds(20);
  const int64_t id = (*agent)->NextStepAsync(
      0, far, [&](absl::StatusOr<NextStepResult> result) {
        answer = std::move(result);
        answered.Notify();
      });
  EXPECT_NE(id, 0);
  ASSERT_TRUE(clock.AwaitSleeperUntil(far, kGuard));
  EXPECT_FALSE(answered.HasBeenNotified());
  ASSERT_TRUE((*agent)->ReportTimings(ReportOf(first->step)).ok());
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(kGuard));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->step.step(), 1);
  EXPECT_FALSE((*agent)->CancelNextStep(id));  // Already answered.

  // Already there: answered inline.
  bool inline_answer = false;
  EXPECT_EQ((*agent)->NextStepAsync(0, clock.Now() + absl::Seconds(1),
                                    [&](absl::StatusOr<NextStepResult> r) {
                                      inline_answer = r.ok();
                                    }),
            0);
  EXPECT_TRUE(inline_answer);

  // Nothing comes (step 1 is not reported): the deadline answers, once the
  // clock reaches it.
  absl::Notification timed_out;
  absl::Status late;
  const absl::Time soon = clock.Now() + absl::Milliseconds(150);
  (*agent)->NextStepAsync(1, soon, [&](absl::StatusOr<NextStepResult> r) {
    late = r.status();
    timed_out.Notify();
  });
  ASSERT_TRUE(clock.AwaitSleeperUntil(soon, kGuard));
  EXPECT_FALSE(timed_out.HasBeenNotified());
  clock.Advance(absl::Milliseconds(150));
  ASSERT_TRUE(timed_out.WaitForNotificationWithTimeout(kGuard));
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded);

  // Cancelled: the callback never runs, not even at shutdown.
  std::atomic<bool> ran{false};
  const int64_t cancelled = (*agent)->NextStepAsync(
      1, clock.Now() + absl::Seconds(30),
      [&](absl::StatusOr<NextStepResult>) { ran = true; });
  EXPECT_TRUE((*agent)->CancelNextStep(cancelled));

  // Pending at shutdown: answered UNAVAILABLE.
  absl::Notification shut;
  absl::Status at_shutdown;
  (*agent)->NextStepAsync(1, clock.Now() + absl::Seconds(30),
                          [&](absl::StatusOr<NextStepResult> r) {
                            at_shutdown = r.status();
                            shut.Notify();
                          });
  (*agent)->Shutdown();
  ASSERT_TRUE(shut.WaitForNotificationWithTimeout(kGuard));
  EXPECT_EQ(at_shutdown.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(ran.load());
  EXPECT_EQ((*agent)->NextStep(1, kGuard).status().code(),
            absl::StatusCode::kUnavailable);
}

// An agent of a one-rank job whose scheduler goes away after the first
// step, reconnecting hourly on a fake clock: it tries `attempts` times
// (each a sleep the clock must end: until then it has not given up), then
// NextStep fails naming `gave_up`.
void ExpectGivesUpAfter(int attempts, absl::Duration max_outage,
                        const std::string& gave_up) {
  auto server = StartServer(ServerOptions(1, 1, 0));
  ASSERT_NE(server, nullptr);
  FakeClock clock;
  AgentOptions options = AgentFor(*server, 0);
  options.clock = &clock;
  // In real time the test would wait an hour before each reconnection.
  options.initial_backoff = absl::Hours(1);
  options.max_backoff = absl::Hours(1);
  options.max_reconnect_attempts = 2;
  options.max_outage = max_outage;
  auto agent = Agent::Start(options);
  ASSERT_TRUE(agent.ok()) << agent.status();
  ASSERT_TRUE((*agent)->NextStep(-1, kGuard).ok());
  server->Shutdown();
  server.reset();

  for (int attempt = 1; attempt <= attempts; ++attempt) {
    ASSERT_TRUE(clock.AwaitSleeperUntil(clock.Now() + absl::Hours(1), kGuard))
        << "attempt " << attempt;
    EXPECT_EQ((*agent)->NextStep(0, absl::ZeroDuration()).status().code(),
              absl::StatusCode::kDeadlineExceeded)
        << "attempt " << attempt;
    clock.Advance(absl::Hours(1));
  }
  absl::StatusOr<NextStepResult> lost = (*agent)->NextStep(0, kGuard);
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(lost.status().message(), HasSubstr(gave_up));
}

TEST(AgentTest, ReconnectsBackOffOnTheAgentsClockThenGiveUp) {
  // No outage allowance: two failed reconnections end it.
  ExpectGivesUpAfter(2, absl::ZeroDuration(), "gave up after 2");
}

TEST(AgentTest, KeepsReconnectingUntilTheOutageDeadline) {
  // Two failures are allowed, but the scheduler may be away for 4 hours:
  // the agent tries on (hourly) until the outage has lasted that long.
  ExpectGivesUpAfter(4, absl::Hours(4),
                     "gave up after 4 reconnection attempts over 4h");
}

TEST(AgentTest, ReportsSentDuringAnOutageAreKeptUpToTheBound) {
  auto server = StartServer(ServerOptions(1, 1, 0));
  ASSERT_NE(server, nullptr);
  FakeClock clock;
  AgentOptions options = AgentFor(*server, 0);
  // The resend thread's back-off waits on this clock, which never moves:
  // the kept report stays kept.
  options.clock = &clock;
  options.max_pending_reports = 1;
  auto agent = Agent::Start(options);
  ASSERT_TRUE(agent.ok()) << agent.status();
  absl::StatusOr<NextStepResult> first = (*agent)->NextStep(-1, kGuard);
  ASSERT_TRUE(first.ok()) << first.status();
  server->Shutdown();
  server.reset();

  // What the sidecar's ReportTimings does: the answer comes back async.
  auto report_async = [&](const v1::TimingReport& report) {
    absl::Notification answered;
    absl::Status status;
    (*agent)->ReportTimingsAsync(report, [&](absl::Status s) {
      status = std::move(s);
      answered.Notify();
    });
    EXPECT_TRUE(answered.WaitForNotificationWithTimeout(kGuard));
    return status;
  };
  const v1::TimingReport report = ReportOf(first->step);
  EXPECT_TRUE(report_async(report).ok());
  const absl::Status full = report_async(report);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_THAT(full.message(), HasSubstr("max_pending_reports"));
}

TEST(AgentTest, ResumesAfterTheSchedulerComesBack) {
  SchedulerServerOptions first_options = ServerOptions(1, 1, 0);
  first_options.control_plane.session_id = "resume-test";
  auto first = StartServer(first_options);
  ASSERT_NE(first, nullptr);
  const int port = first->port();
  auto agent = Agent::Start(AgentFor(*first, 0));
  ASSERT_TRUE(agent.ok()) << agent.status();

  std::vector<int64_t> steps;
  int64_t last = -1;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<NextStepResult> next = (*agent)->NextStep(last, kGuard);
    ASSERT_TRUE(next.ok()) << next.status();
    steps.push_back(next->step.step());
    ASSERT_TRUE((*agent)->ReportTimings(ReportOf(next->step)).ok());
    last = next->step.step();
  }
  // The scheduler goes away and comes back on the same port and session
  // (a new process would have a new session: see the next test).
  first->Shutdown();
  first.reset();
  SchedulerServerOptions second_options = ServerOptions(1, 8, 6);
  second_options.control_plane.session_id = "resume-test";
  second_options.listen_address = absl::StrCat("127.0.0.1:", port);
  auto second = StartServer(second_options);
  ASSERT_NE(second, nullptr);

  while (true) {
    absl::StatusOr<NextStepResult> next = (*agent)->NextStep(last, kGuard);
    ASSERT_TRUE(next.ok()) << next.status();
    if (next->drained) break;
    steps.push_back(next->step.step());
    ASSERT_TRUE((*agent)->ReportTimings(ReportOf(next->step)).ok());
    last = next->step.step();
    ASSERT_LT(steps.size(), 10u);
  }
  EXPECT_THAT(steps, ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_GE((*agent)->Stats().reconnects, 1);
  // The first scheduler's report stream ended with it; every report still
  // got through (on a new stream, or over ReportTimings).
  EXPECT_EQ((*agent)->Stats().reports_sent, 6);
}

TEST(AgentTest, AReportWaitsForASchedulerThatRestartsOnItsState) {
  FakeStateStore first_state;
  SchedulerServerOptions first_options = ServerOptions(1, 2, 0);
  first_options.control_plane.state_store = &first_state;
  auto first = StartServer(first_options);
  ASSERT_NE(first, nullptr);
  const int port = first->port();
  FakeClock clock;
  AgentOptions options = AgentFor(*first, 0);
  options.clock = &clock;
  // Every back-off is an hour of the fake clock: nothing is retried before
  // the test moves it.
  options.initial_backoff = absl::Hours(1);
  options.max_backoff = absl::Hours(1);
  options.max_reconnect_attempts = 1000;
  // Long enough that no wait for a registration times out while the test
  // moves the clock.
  options.rpc_timeout = absl::Hours(1000);
  options.report_stream = false;
  auto agent = Agent::Start(options);
  ASSERT_TRUE(agent.ok()) << agent.status();
  absl::StatusOr<NextStepResult> step0 = (*agent)->NextStep(-1, kGuard);
  ASSERT_TRUE(step0.ok()) << step0.status();
  first->Shutdown();
  first.reset();

  absl::Status reported = absl::UnknownError("not answered");
  absl::Notification done;
  std::thread reporter([&] {
    reported = (*agent)->ReportTimings(ReportOf(step0->step));
    done.Notify();
  });
  // Well past its first few attempts the report still waits: the plan
  // stream (asleep beside it) is still reconnecting.
  for (int round = 0; round < 8; ++round) {
    ASSERT_TRUE(clock.AwaitSleepers(2, kGuard)) << "round " << round;
    EXPECT_FALSE(done.HasBeenNotified())
        << "round " << round << ": " << reported;
    clock.Advance(absl::Hours(1));
  }
  // The scheduler comes back on its state: the same session, step 0 kept.
  ASSERT_TRUE(clock.AwaitSleepers(2, kGuard));
  FakeStateStore second_state(first_state.state());
  SchedulerServerOptions second_options = ServerOptions(1, 2, 0);
  second_options.control_plane.state_store = &second_state;
  second_options.listen_address = absl::StrCat("127.0.0.1:", port);
  auto second = StartServer(second_options);
  ASSERT_NE(second, nullptr);
  // The first tries may find the agent's channel still backing off (in
  // real time) and sleep again: the clock moves an hour at a time until
  // the report is in.
  for (int round = 0;
       !done.WaitForNotificationWithTimeout(absl::Milliseconds(50)); ++round) {
    ASSERT_LT(round, 400) << "the report never got through";
    clock.Advance(absl::Hours(1));
  }
  reporter.join();
  EXPECT_TRUE(reported.ok()) << reported;
  EXPECT_EQ(second->control_plane().Status().completed_steps(), 1);
}

TEST(AgentTest, NewSchedulerSessionIsAnError) {
  SchedulerServerOptions first_options = ServerOptions(1, 1, 0);
  auto first = StartServer(first_options);
  ASSERT_NE(first, nullptr);
  const int port = first->port();
  auto agent = Agent::Start(AgentFor(*first, 0));
  ASSERT_TRUE(agent.ok()) << agent.status();
  absl::StatusOr<NextStepResult> step0 = (*agent)->NextStep(-1, kGuard);
  ASSERT_TRUE(step0.ok()) << step0.status();
  first->Shutdown();
  first.reset();
  SchedulerServerOptions second_options = ServerOptions(1, 1, 0);
  second_options.listen_address = absl::StrCat("127.0.0.1:", port);
  auto second = StartServer(second_options);
  ASSERT_NE(second, nullptr);
  absl::StatusOr<NextStepResult> next = (*agent)->NextStep(0, kGuard);
  EXPECT_EQ(next.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(next.status().message(), HasSubstr("restarted"));
}

TEST(AgentTest, TakenOverRankFails) {
  auto server = StartServer(ServerOptions(1, 1, 0));
  ASSERT_NE(server, nullptr);
  auto first = Agent::Start(AgentFor(*server, 0));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->NextStep(-1, kGuard).ok());
  auto second = Agent::Start(AgentFor(*server, 0));
  ASSERT_TRUE(second.ok()) << second.status();
  absl::StatusOr<NextStepResult> next = (*first)->NextStep(0, kGuard);
  EXPECT_EQ(next.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(next.status().message(), HasSubstr("taken over"));
  // The newcomer resumes where the rank stands: step 0 is not reported.
  absl::StatusOr<NextStepResult> resumed = (*second)->NextStep(-1, kGuard);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->step.step(), 0);
}

TEST(AgentTest, ReportOfAnotherRankIsRefused) {
  auto server = StartServer(ServerOptions(2, 2, 0));
  ASSERT_NE(server, nullptr);
  auto agent = Agent::Start(AgentFor(*server, 0));
  ASSERT_TRUE(agent.ok()) << agent.status();
  v1::TimingReport report;
  report.set_rank(1);
  EXPECT_EQ((*agent)->ReportTimings(report).code(),
            absl::StatusCode::kInvalidArgument);
  // A report the scheduler rejects comes back with its reason.
  report.set_rank(0);
  report.set_step(1000);
  absl::Status status = (*agent)->ReportTimings(report);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("not been planned"));
}

/// Two agents run every step's groups and the gradient sync with an
/// all-reduce of rank + 1 each, on host memory. What each rank saw:
/// its error, how many groups it used, its stats at the end.
struct GroupRun {
  std::vector<absl::Status> results;
  std::vector<int> groups_used;
  std::vector<AgentStats> stats;
};

GroupRun RunGroupsOnTwoAgents(std::vector<std::unique_ptr<Agent>>& agents) {
  GroupRun run{std::vector<absl::Status>(2), std::vector<int>(2, 0),
               std::vector<AgentStats>(2)};
  auto sum = [](c10d::ProcessGroup& group, int r) -> absl::Status {
    double value = r + 1;
    absl::Status s = AllReduceSum(group, absl::MakeSpan(&value, 1));
    if (!s.ok() || value != 1 + 2) {
      return absl::InternalError(
          absl::StrCat("all-reduce: ", s.ToString(), " ", value));
    }
    return absl::OkStatus();
  };
  auto loop = [&](int r) -> absl::Status {
    Agent& agent = *agents[r];
    int64_t last = -1;
    while (true) {
      absl::StatusOr<NextStepResult> next =
          agent.NextStep(last, absl::Seconds(30));
      if (!next.ok()) return next.status();
      if (next->drained) return absl::OkStatus();
      for (const v1::CommGroup& group : next->step.groups()) {
        absl::StatusOr<c10d::ProcessGroup*> comm = agent.Group(group);
        if (!comm.ok()) return comm.status();
        if (absl::Status s = sum(**comm, r); !s.ok()) return s;
        ++run.groups_used[r];
      }
      absl::StatusOr<c10d::ProcessGroup*> world = agent.DataParallelGroup();
      if (!world.ok()) return world.status();
      if (absl::Status s = sum(**world, r); !s.ok()) return s;
      if (absl::Status s = agent.ReportTimings(ReportOf(next->step)); !s.ok()) {
        return s;
      }
      last = next->step.step();
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] { run.results[r] = loop(r); });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) run.stats[r] = agents[r]->Stats();
  return run;
}

TEST(AgentTest, FormsEachGroupOnceAndHandsOutUsableProcessGroups) {
  auto server = StartServer(ServerOptions(2, 2, 2));
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<Agent>> agents(2);
  // What the agents tell their metrics: formations and received steps.
  std::atomic<int> formed[2] = {0, 0};
  std::atomic<int> received[2] = {0, 0};
  std::atomic<int> unstamped{0};
  for (int r = 0; r < 2; ++r) {
    AgentOptions options = AgentFor(*server, r);
    options.on_group_formed = [&formed, r](absl::Duration) { ++formed[r]; };
    options.on_step_received = [&, r](absl::Time planned, absl::Time) {
      ++received[r];
      if (planned <= absl::UnixEpoch()) ++unstamped;
    };
    auto agent = Agent::Start(std::move(options));
    ASSERT_TRUE(agent.ok()) << agent.status();
    agents[r] = *std::move(agent);
  }
  const GroupRun run = RunGroupsOnTwoAgents(agents);
  EXPECT_EQ(unstamped, 0);  // the scheduler stamps every step it plans
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(run.results[r].ok()) << "rank " << r << ": " << run.results[r];
    EXPECT_GE(run.groups_used[r], 1) << "rank " << r;
    const AgentStats& stats = run.stats[r];
    // The group [0, 1] is formed once (warmed or on first use), then reused,
    // and so is the data-parallel group of the same ranks.
    EXPECT_EQ(stats.groups_live, 2) << "rank " << r;
    EXPECT_EQ(formed[r], 2) << "rank " << r;
    EXPECT_EQ(received[r], stats.steps_received) << "rank " << r;
    EXPECT_EQ(stats.group_failures, 0);
    EXPECT_GE(stats.cache_hits + stats.cache_misses, run.groups_used[r]);
  }

  v1::CommGroup foreign;
  foreign.set_id(9);
  foreign.add_ranks(1);
  foreign.add_ranks(2);
  foreign.set_rendezvous_prefix("x/");
  EXPECT_EQ(agents[0]->Group(foreign).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dcp
