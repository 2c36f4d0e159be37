#include "scheduler/control/control_plane.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "scheduler/eval/simulator.h"
#include "scheduler/planner/plan_proto.h"
#include "scheduler/planner/test_data.h"

namespace dcp {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

constexpr int kWorld = 4;

std::vector<int32_t> Trace(int n) {
  return testing_data::SkewedTrace(n, /*seed=*/12345);
}

class ControlPlaneTest : public ::testing::Test {
 protected:
  ControlPlaneOptions Options() {
    ControlPlaneOptions o;
    o.lengths = Trace(4000);
    o.window = 32768;
    o.model = *BuiltinModel("llama3-8b");
    o.world_size = kWorld;
    o.tokens_per_step = 65536;
    o.seed = 7;
    o.lookahead_steps = 3;
    o.refit_every = 8;
    o.session_id = "sess";
    o.start_planner_thread = false;
    o.clock = &clock_;
    return o;
  }

  std::unique_ptr<ControlPlane> Start(ControlPlaneOptions options) {
    absl::StatusOr<std::unique_ptr<ControlPlane>> cp =
        ControlPlane::Start(std::move(options));
    EXPECT_TRUE(cp.ok()) << cp.status();
    return cp.ok() ? *std::move(cp) : nullptr;
  }

  static v1::RegisterRequest Hello(int rank, const std::string& host = "h") {
    v1::RegisterRequest r;
    r.set_rank(rank);
    r.set_host(host);
    r.set_gpu(rank % 8);
    r.set_pid(1000 + rank);
    r.set_world_size(kWorld);
    return r;
  }

  static void RegisterAll(ControlPlane& cp) {
    for (int r = 0; r < kWorld; ++r) ASSERT_TRUE(cp.Register(Hello(r)).ok());
  }

  /// Every rank's plan stream, opened (ranks registered).
  static std::vector<int64_t> OpenAllStreams(ControlPlane& cp) {
    std::vector<int64_t> streams;
    for (int r = 0; r < kWorld; ++r) {
      absl::StatusOr<int64_t> id = cp.OpenStream(r, "sess", 0, [] {});
      EXPECT_TRUE(id.ok()) << id.status();
      streams.push_back(id.value_or(-1));
    }
    return streams;
  }

  /// The reference cluster the reports' times come from.
  static const ReferenceCluster& Cluster() {
    static const ReferenceCluster* cluster = new ReferenceCluster(
        ClusterSpec::H200(), *BuiltinModel("llama3-8b"), kWorld);
    return *cluster;
  }

  /// Rank `rank`'s timings of `view`'s step: the reference cluster's task
  /// times scaled by `slowdown`, and its gradient sync scaled by
  /// `sync_slowdown` (by `slowdown` when unset).
  static v1::TimingReport Report(
      const v1::RankStep& view, double slowdown = 1.0,
      std::optional<double> sync_slowdown = std::nullopt) {
    const ReferenceCluster* cluster = &Cluster();
    v1::TimingReport report;
    report.set_epoch(view.epoch());
    report.set_step(view.step());
    report.set_rank(view.rank());
    for (int i = 0; i < view.tasks_size(); ++i) {
      const v1::Task& task = view.tasks(i);
      std::vector<int> ranks(task.ranks().begin(), task.ranks().end());
      std::vector<int64_t> lengths(task.lengths().begin(),
                                   task.lengths().end());
      v1::TaskTiming* t = report.add_tasks();
      t->set_task_index(task.task_index());
      t->set_micro_step(i);
      t->set_group_size(task.ranks_size());
      int64_t tokens = 0;
      for (int64_t l : lengths) tokens += l;
      t->set_tokens(tokens);
      t->mutable_sample_lengths()->Add(lengths.begin(), lengths.end());
      t->set_recompute(task.recompute());
      t->set_seconds(
          cluster->Cost(ranks, lengths, task.recompute(), task.ulysses())
              .total_s *
          slowdown);
    }
    report.set_sync_seconds(cluster->SyncSeconds() *
                            sync_slowdown.value_or(slowdown));
    return report;
  }

  /// Every rank reports `step` (taken from the kept plan).
  static void ReportStep(ControlPlane& cp, int64_t step,
                         double slowdown = 1.0) {
    absl::StatusOr<v1::StepPlan> plan = cp.PlannedStep(step);
    ASSERT_TRUE(plan.ok()) << plan.status();
    for (int r = 0; r < kWorld; ++r) {
      absl::StatusOr<v1::ReportAck> ack =
          cp.ReportTimings(Report(RankView(*plan, r), slowdown));
      ASSERT_TRUE(ack.ok()) << ack.status();
    }
  }

  /// Everything stream `id` has to send right now.
  static std::vector<StreamNext> Pull(ControlPlane& cp, int64_t id) {
    std::vector<StreamNext> out;
    while (true) {
      StreamNext next = cp.NextForStream(id);
      if (next.kind == StreamNext::Kind::kWait) return out;
      out.push_back(next);
      if (next.kind == StreamNext::Kind::kEnd) return out;
    }
  }

  FakeClock clock_{absl::FromUnixSeconds(1000)};
};

TEST_F(ControlPlaneTest, RejectsBadOptions) {
  ControlPlaneOptions o = Options();
  o.world_size = 0;
  EXPECT_EQ(ControlPlane::Start(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = Options();
  o.lengths.clear();
  EXPECT_THAT(ControlPlane::Start(o).status().message(), HasSubstr("empty"));
  o = Options();
  o.session_id = "a/b";
  EXPECT_THAT(ControlPlane::Start(o).status().message(), HasSubstr("'/'"));
  o = Options();
  o.lookahead_steps = 0;
  EXPECT_THAT(ControlPlane::Start(o).status().message(),
              HasSubstr("lookahead_steps"));
  o = Options();
  o.refit_error = -0.1;
  EXPECT_THAT(ControlPlane::Start(o).status().message(),
              HasSubstr("refit_error"));
}

TEST_F(ControlPlaneTest, RandomSessionIdIsHex) {
  ControlPlaneOptions o = Options();
  o.session_id.clear();
  auto cp = Start(o);
  ASSERT_NE(cp, nullptr);
  EXPECT_EQ(cp->session_id().size(), 16u);
  EXPECT_EQ(cp->session_id().find_first_not_of("0123456789abcdef"),
            std::string::npos);
}

TEST_F(ControlPlaneTest, PlansAheadUpToTheLookahead) {
  auto cp = Start(Options());
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  EXPECT_EQ(*cp->PlanAvailableSteps(), 3);
  EXPECT_EQ(*cp->PlanAvailableSteps(), 0);
  EXPECT_EQ(cp->Status().planned_steps(), 3);
  EXPECT_EQ(cp->Status().completed_steps(), 0);

  // Three of four ranks reporting does not complete a step.
  absl::StatusOr<v1::StepPlan> step0 = cp->PlannedStep(0);
  ASSERT_TRUE(step0.ok());
  for (int r = 0; r < kWorld - 1; ++r) {
    ASSERT_TRUE(cp->ReportTimings(Report(RankView(*step0, r))).ok());
  }
  EXPECT_EQ(*cp->PlanAvailableSteps(), 0);
  ASSERT_TRUE(cp->ReportTimings(Report(RankView(*step0, kWorld - 1))).ok());
  EXPECT_EQ(cp->Status().completed_steps(), 1);
  EXPECT_EQ(*cp->PlanAvailableSteps(), 1);
  EXPECT_EQ(cp->Status().planned_steps(), 4);
  // The completed step is dropped, the others kept.
  EXPECT_EQ(cp->PlannedStep(0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(cp->PlannedStep(3).ok());
  EXPECT_EQ(cp->Register(Hello(0)).value().next_step(), 1);
}

TEST_F(ControlPlaneTest, EverySampleInExactlyOneTaskOfOneStep) {
  auto cp = Start(Options());
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  const std::vector<int64_t> streams = OpenAllStreams(*cp);
  std::set<int64_t> all_samples;
  int64_t total_samples = 0;
  std::vector<std::map<int64_t, v1::RankStep>> received(kWorld);
  constexpr int kSteps = 8;
  for (int64_t step = 0; step < kSteps; ++step) {
    ASSERT_TRUE(cp->PlanAvailableSteps().ok());
    absl::StatusOr<v1::StepPlan> plan = cp->PlannedStep(step);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->step(), step);
    EXPECT_EQ(plan->epoch(), 0);

    std::multiset<int64_t> in_tasks;
    for (const v1::Task& task : plan->tasks()) {
      in_tasks.insert(task.samples().begin(), task.samples().end());
    }
    std::multiset<int64_t> in_step(plan->samples().begin(),
                                   plan->samples().end());
    EXPECT_EQ(in_tasks, in_step) << "step " << step;
    for (int64_t id : plan->samples()) {
      EXPECT_TRUE(all_samples.insert(id).second)
          << "sample " << id << " in two steps";
    }
    total_samples += plan->samples_size();
    EXPECT_GT(plan->predicted_makespan_s(), 0);

    for (const v1::CommGroup& group : plan->groups()) {
      EXPECT_EQ(group.rendezvous_prefix(),
                absl::StrCat("sess/e0/g", absl::StrJoin(group.ranks(), "-")));
    }

    for (int r = 0; r < kWorld; ++r) {
      // What the stream sends is the rank's view of the kept plan.
      for (const StreamNext& next : Pull(*cp, streams[r])) {
        ASSERT_EQ(next.kind, StreamNext::Kind::kSend);
        const int64_t sent_step = next.update->step().step();
        EXPECT_TRUE(received[r].emplace(sent_step, next.update->step()).second)
            << "step " << sent_step << " sent twice to rank " << r;
      }
      ASSERT_EQ(received[r].count(step), 1u) << "rank " << r;
      const v1::RankStep& view = received[r][step];
      EXPECT_TRUE(MessageDifferencer::Equals(view, RankView(*plan, r)));
      for (int i = 0; i < view.tasks_size(); ++i) {
        const v1::Task& task = view.tasks(i);
        auto it = std::find(task.ranks().begin(), task.ranks().end(), r);
        ASSERT_NE(it, task.ranks().end());
        EXPECT_EQ(task.micro_steps(it - task.ranks().begin()), i);
      }
      for (const v1::CommGroup& group : view.groups()) {
        EXPECT_NE(std::find(group.ranks().begin(), group.ranks().end(), r),
                  group.ranks().end());
      }
    }
    ReportStep(*cp, step);
  }
  EXPECT_EQ(static_cast<int64_t>(all_samples.size()), total_samples);
  EXPECT_EQ(cp->Status().completed_steps(), kSteps);
}

TEST_F(ControlPlaneTest, PlanningWakesTheStreamsAndReRegistrationEndsThem) {
  // The stream semantics are StepWindow's (step_window_test); here, that the
  // facade wakes a stream for every step it plans, never under its locks.
  auto cp = Start(Options());
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  std::atomic<int> wakes{0};
  const int64_t s2 = *cp->OpenStream(2, "sess", 0, [&] {
    ++wakes;
    // A wake may ask the control plane at once (no lock of it is held).
    EXPECT_GE(cp->Status().planned_steps(), 1);
  });
  EXPECT_TRUE(Pull(*cp, s2).empty());
  ASSERT_EQ(*cp->PlanAvailableSteps(), 3);
  EXPECT_EQ(wakes.load(), 3);
  std::vector<StreamNext> sent = Pull(*cp, s2);
  ASSERT_EQ(sent.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sent[i].update->step().step(), i);
    EXPECT_EQ(sent[i].update->step().rank(), 2);
  }
  ASSERT_TRUE(cp->Register(Hello(2)).ok());
  EXPECT_EQ(wakes.load(), 4);
  sent = Pull(*cp, s2);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].end_status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(cp->OpenStream(7, "sess", 0, [] {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cp->OpenStream(2, "other", 0, [] {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(ControlPlaneTest, TimingReportsAreValidatedBeforeAnyChange) {
  auto cp = Start(Options());
  ASSERT_NE(cp, nullptr);
  for (int r = 0; r < kWorld - 1; ++r) ASSERT_TRUE(cp->Register(Hello(r)).ok());
  ASSERT_EQ(*cp->PlanAvailableSteps(), 3);
  const v1::StepPlan plan = *cp->PlannedStep(0);
  const v1::TimingReport good = Report(RankView(plan, 0));
  ASSERT_GT(good.tasks_size(), 0);
  absl::StatusOr<v1::ReportAck> ack = cp->ReportTimings(good);
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_EQ(ack->planned_through_step(), 2);
  const v1::StatusResponse before = cp->Status();
  EXPECT_EQ(before.timing_reports(), 1);
  EXPECT_EQ(before.ranks(0).last_reported_step(), 0);

  const v1::TimingReport good1 = Report(RankView(plan, 1));
  auto expect_rejected = [&](const v1::TimingReport& report,
                             absl::StatusCode code, const std::string& text) {
    const absl::Status s = cp->ReportTimings(report).status();
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_THAT(s.message(), HasSubstr(text));
    EXPECT_TRUE(MessageDifferencer::Equals(cp->Status(), before))
        << "state changed after: " << s;
  };

  v1::TimingReport r = good1;
  r.set_rank(9);
  expect_rejected(r, absl::StatusCode::kInvalidArgument, "rank 9");
  expect_rejected(Report(RankView(plan, 3)),
                  absl::StatusCode::kFailedPrecondition, "not registered");
  r = good1;
  r.set_epoch(1);
  expect_rejected(r, absl::StatusCode::kFailedPrecondition, "epoch 1");
  r = good1;
  r.set_step(3);
  expect_rejected(r, absl::StatusCode::kInvalidArgument, "not been planned");
  r.set_step(-1);
  expect_rejected(r, absl::StatusCode::kInvalidArgument, "not been planned");
  expect_rejected(good, absl::StatusCode::kAlreadyExists, "already reported");
  r = good1;
  r.mutable_tasks(0)->set_task_index(999);
  expect_rejected(r, absl::StatusCode::kInvalidArgument, "task_index 999");
  // A task of the step that does not run on rank 1.
  for (const v1::Task& task : plan.tasks()) {
    if (std::find(task.ranks().begin(), task.ranks().end(), 1) !=
        task.ranks().end()) {
      continue;
    }
    r = good1;
    r.mutable_tasks(0)->set_task_index(task.task_index());
    expect_rejected(r, absl::StatusCode::kInvalidArgument, "not on rank 1");
    break;
  }
  if (good1.tasks_size() > 0) {
    r = good1;
    *r.add_tasks() = good1.tasks(0);
    expect_rejected(r, absl::StatusCode::kInvalidArgument, "twice");
    r = good1;
    r.mutable_tasks()->RemoveLast();
    expect_rejected(r, absl::StatusCode::kInvalidArgument, "reported");
    r = good1;
    r.mutable_tasks(0)->set_seconds(-1);
    expect_rejected(r, absl::StatusCode::kInvalidArgument, "seconds");
    r.mutable_tasks(0)->set_seconds(std::numeric_limits<double>::quiet_NaN());
    expect_rejected(r, absl::StatusCode::kInvalidArgument, "seconds");
    r = good1;
    r.mutable_tasks(0)->set_group_size(3);
    expect_rejected(r, absl::StatusCode::kInvalidArgument, "group size 3");
    r = good1;
    r.mutable_tasks(0)->set_tokens(1);
    expect_rejected(r, absl::StatusCode::kInvalidArgument, "1 tokens");
  }
  r = good1;
  r.set_sync_seconds(std::numeric_limits<double>::infinity());
  expect_rejected(r, absl::StatusCode::kInvalidArgument, "sync_seconds");

  // Still takes good reports after all that.
  ASSERT_TRUE(cp->ReportTimings(good1).ok());
  EXPECT_EQ(cp->Status().timing_reports(), 2);
  EXPECT_EQ(cp->Status().ranks(1).lag_steps(), 2);
}

TEST_F(ControlPlaneTest, RefitLearnsASlowerCluster) {
  ControlPlaneOptions o = Options();
  std::vector<RefitEvent> refits;
  o.on_refit = [&](const RefitEvent& e) { refits.push_back(e); };
  auto cp = Start(o);
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  const v1::StatusResponse initial = cp->Status();
  EXPECT_EQ(initial.refits(), 0);

  // Relative error of the predicted step time against what the 1.5x slower
  // cluster measured, per step.
  std::vector<double> step_errors;
  constexpr int kSteps = 10;
  for (int64_t step = 0; step < kSteps; ++step) {
    ASSERT_TRUE(cp->PlanAvailableSteps().ok());
    const v1::StepPlan plan = *cp->PlannedStep(step);
    double measured = 0;
    for (int r = 0; r < kWorld; ++r) {
      const v1::TimingReport report = Report(RankView(plan, r), 1.5);
      double busy = report.sync_seconds();
      for (const v1::TaskTiming& t : report.tasks()) busy += t.seconds();
      measured = std::max(measured, busy);
    }
    step_errors.push_back(std::abs(plan.predicted_makespan_s() - measured) /
                          measured);
    ReportStep(*cp, step, 1.5);
  }

  const v1::StatusResponse after = cp->Status();
  EXPECT_GT(after.refits(), 0);
  ASSERT_EQ(static_cast<int64_t>(refits.size()), after.refits());
  EXPECT_EQ(refits.back().refits, after.refits());
  EXPECT_LT(after.refit_error_after(), after.refit_error_before());
  EXPECT_GT(initial.coefficients().at("lin"), 0);
  EXPECT_GT(after.coefficients().at("lin"),
            1.1 * initial.coefficients().at("lin"));
  EXPECT_LT(after.model_error(), 0.5 * refits.front().error_before);
  EXPECT_GT(after.step_error(), 0);
  // Plans made with the refitted model predict the slower steps better.
  EXPECT_LT(step_errors.back(), 0.6 * step_errors.front());
}

TEST_F(ControlPlaneTest, RefitsAtMostOncePerCompletedStep) {
  // A refit due after every observation: each step brings several, but the
  // model is refitted once per completed step. Reports only make it due; it
  // runs where planning does (here PlanAvailableSteps), before the next
  // step is planned, and refits due meanwhile are run as one.
  ControlPlaneOptions o = Options();
  o.refit_every = 1;
  // Steps too large for one pack over the world (the plan the planner picks
  // for small ones under the H200 data sheet), so each brings several tasks.
  o.tokens_per_step = 8 * 65536;
  std::vector<RefitEvent> refits;
  o.on_refit = [&](const RefitEvent& e) { refits.push_back(e); };
  auto cp = Start(o);
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  constexpr int kSteps = 5;
  int64_t tasks = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    const int64_t before = static_cast<int64_t>(refits.size());
    ASSERT_TRUE(cp->PlanAvailableSteps().ok());
    // The refit made due by the previous step's reports, if any.
    EXPECT_EQ(static_cast<int64_t>(refits.size()) - before, step == 0 ? 0 : 1)
        << "step " << step;
    tasks += cp->PlannedStep(step)->tasks_size();
    const int64_t planned = static_cast<int64_t>(refits.size());
    ReportStep(*cp, step);
    EXPECT_EQ(static_cast<int64_t>(refits.size()), planned)
        << "a report refitted on its own thread at step " << step;
  }
  EXPECT_GT(tasks, 2 * kSteps);                // Several observations a step.
  ASSERT_TRUE(cp->PlanAvailableSteps().ok());  // the last step's refit
  EXPECT_EQ(static_cast<int64_t>(refits.size()), kSteps);
  EXPECT_EQ(cp->Status().refits(), kSteps);
  EXPECT_EQ(refits.back().refits, kSteps);
}

TEST_F(ControlPlaneTest, RefitsRunOnThePlannerThreadNotTheReportingOne) {
  ControlPlaneOptions o = Options();
  o.start_planner_thread = true;
  o.refit_every = 1;
  o.max_steps = 1;  // Refits go on after planning has drained.
  absl::Mutex mu;
  std::vector<std::thread::id> refit_threads;
  std::optional<std::thread::id> planner_thread;
  absl::Notification refitted;
  o.on_step_planned = [&](const PlannedStepEvent&) {
    absl::MutexLock lock(&mu);
    planner_thread = std::this_thread::get_id();
  };
  o.on_refit = [&](const RefitEvent&) {
    absl::MutexLock lock(&mu);
    refit_threads.push_back(std::this_thread::get_id());
    if (!refitted.HasBeenNotified()) refitted.Notify();
  };
  auto cp = Start(std::move(o));
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  ASSERT_TRUE(cp->AwaitPlanned(1, absl::Seconds(20)));
  // The reports come from their own thread, as from a gRPC reactor.
  std::thread::id reporting_thread;
  std::thread reporter([&] {
    reporting_thread = std::this_thread::get_id();
    ReportStep(*cp, 0);
  });
  reporter.join();
  ASSERT_TRUE(refitted.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(cp->Status().completed_steps(), 1);
  absl::MutexLock lock(&mu);
  ASSERT_TRUE(planner_thread.has_value());
  ASSERT_FALSE(refit_threads.empty());
  for (const std::thread::id& id : refit_threads) {
    EXPECT_NE(id, reporting_thread);
    EXPECT_NE(id, std::this_thread::get_id());
    EXPECT_EQ(id, *planner_thread);
  }
}

TEST_F(ControlPlaneTest, RefitLearnsTheGradientSync) {
  // Tasks take the reference cluster's times, which the data-sheet prior
  // predicts exactly; only the gradient sync differs from the prior.
  constexpr double kSyncSlowdown = 3.0;
  constexpr int kSteps = 16;
  ControlPlaneOptions o = Options();
  o.step_error_window = o.lookahead_steps;  // The error of recent steps.
  const double prior_weight = o.prior_weight;
  const double prior_sync =
      CostModel::FromSpecs(o.cluster, o.model, o.world_size).SyncSeconds();
  const double reported_sync = Cluster().SyncSeconds() * kSyncSlowdown;
  ASSERT_GT(std::abs(reported_sync - prior_sync), 0.1 * prior_sync);
  std::unique_ptr<ControlPlane> cp;
  // At each refit, the sync learnt from the steps completed so far (every
  // one reported `reported_sync` on every rank): their median shrunk
  // towards the prior in log space (CostModel::FitSync).
  int checked_refits = 0;
  o.on_refit = [&](const RefitEvent& e) {
    const v1::StatusResponse now = cp->Status();
    const double k = static_cast<double>(now.completed_steps());
    EXPECT_NEAR(now.coefficients().at("grad_sync"),
                std::exp((k * std::log(reported_sync) +
                          prior_weight * std::log(prior_sync)) /
                         (k + prior_weight)),
                1e-9 * prior_sync)
        << "refit " << e.refits << " after " << k << " steps";
    EXPECT_DOUBLE_EQ(e.sync_error, now.sync_error());
    ++checked_refits;
  };
  cp = Start(o);
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  const v1::StatusResponse initial = cp->Status();
  EXPECT_EQ(initial.coefficients().at("grad_sync"), prior_sync);
  EXPECT_EQ(initial.sync_error(), 0);  // No step yet.

  std::vector<double> step_errors;
  std::vector<double> prior_sync_errors;  // The same plans, prior sync.
  std::vector<double> measured_steps;
  std::map<int64_t, double> planned_sync;  // grad_sync each step had.
  std::optional<v1::StatusResponse> first_steps;
  bool rejected_checked = false;
  for (int64_t step = 0; step < kSteps; ++step) {
    ASSERT_TRUE(cp->PlanAvailableSteps().ok());
    const v1::StatusResponse planned = cp->Status();
    for (int64_t s = planned_sync.size(); s < planned.planned_steps(); ++s) {
      planned_sync[s] = planned.coefficients().at("grad_sync");
    }
    const v1::StepPlan plan = *cp->PlannedStep(step);
    std::vector<v1::TimingReport> reports;
    double measured = 0;
    for (int r = 0; r < kWorld; ++r) {
      reports.push_back(Report(RankView(plan, r), 1.0, kSyncSlowdown));
      double busy = reports.back().sync_seconds();
      for (const v1::TaskTiming& t : reports.back().tasks()) {
        busy += t.seconds();
      }
      measured = std::max(measured, busy);
    }
    const double predicted = plan.predicted_makespan_s();
    measured_steps.push_back(measured);
    step_errors.push_back(std::abs(predicted - measured) / measured);
    prior_sync_errors.push_back(
        std::abs(predicted - planned_sync[step] + prior_sync - measured) /
        measured);

    for (int r = 0; r + 1 < kWorld; ++r) {
      ASSERT_TRUE(cp->ReportTimings(reports[r]).ok()) << "step " << step;
    }
    if (!rejected_checked && cp->Status().refits() > 0) {
      // The report that would complete the step (and add its sync), but
      // with a sync time beyond the limit: rejected, and nothing changes.
      const v1::StatusResponse before = cp->Status();
      v1::TimingReport bad = reports.back();
      bad.set_sync_seconds(2 * o.max_task_seconds);
      const absl::Status s = cp->ReportTimings(bad).status();
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_THAT(s.message(), HasSubstr("sync_seconds"));
      bad = reports.back();
      bad.mutable_tasks()->RemoveLast();
      EXPECT_EQ(cp->ReportTimings(bad).status().code(),
                absl::StatusCode::kInvalidArgument);
      EXPECT_TRUE(MessageDifferencer::Equals(cp->Status(), before))
          << cp->Status().DebugString() << "\nbefore\n"
          << before.DebugString();
      rejected_checked = true;
    }
    ASSERT_TRUE(cp->ReportTimings(reports.back()).ok()) << "step " << step;
    if (step + 1 == o.step_error_window) first_steps = cp->Status();
  }
  EXPECT_TRUE(rejected_checked);
  ASSERT_TRUE(first_steps.has_value());
  // The first steps were planned before any refit, with the prior's sync.
  for (int64_t s = 0; s < o.step_error_window; ++s) {
    EXPECT_EQ(planned_sync[s], prior_sync) << "step " << s;
  }

  const v1::StatusResponse after = cp->Status();
  EXPECT_GT(after.refits(), 0);
  EXPECT_EQ(checked_refits, after.refits());
  const double learnt = after.coefficients().at("grad_sync");
  EXPECT_LT(std::abs(learnt - reported_sync),
            0.5 * std::abs(prior_sync - reported_sync));
  // The step error (over the last steps) fell with the refits.
  EXPECT_GT(first_steps->step_error(), 0);
  EXPECT_LT(after.step_error(), 0.5 * first_steps->step_error());
  // The sync error is the learnt sync's error relative to each step's
  // time, and less than the prior's on the same steps.
  double learnt_sync_error = 0;
  double prior_sync_error = 0;
  for (double m : measured_steps) {
    learnt_sync_error += std::abs(learnt - reported_sync) / m / kSteps;
    prior_sync_error += std::abs(prior_sync - reported_sync) / m / kSteps;
  }
  EXPECT_NEAR(after.sync_error(), learnt_sync_error, 1e-9);
  EXPECT_LT(after.sync_error(), 0.5 * prior_sync_error);
  // Step by step: the last plan predicts its step better than its first
  // and than the same plan would with the prior's sync.
  EXPECT_LT(step_errors.back(), 0.5 * step_errors.front());
  EXPECT_LT(step_errors.back(), 0.5 * prior_sync_errors.back());
  // The task times matched the prior all along.
  EXPECT_LT(after.model_error(), 1e-6);
}

TEST_F(ControlPlaneTest, StepsWithoutASyncTimeLeaveTheSyncAtThePrior) {
  // Every rank reports a sync of 0 (proto3's "not measured"): the refits
  // learn the tasks (1.5x slower) but keep the prior's sync.
  ControlPlaneOptions o = Options();
  o.tokens_per_step = 8 * 65536;  // Several tasks a step, as above.
  const double prior_sync =
      CostModel::FromSpecs(o.cluster, o.model, o.world_size).SyncSeconds();
  auto cp = Start(o);
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  for (int64_t step = 0; step < 6; ++step) {
    ASSERT_TRUE(cp->PlanAvailableSteps().ok());
    const v1::StepPlan plan = *cp->PlannedStep(step);
    for (int r = 0; r < kWorld; ++r) {
      const v1::TimingReport report = Report(RankView(plan, r), 1.5, 0.0);
      ASSERT_EQ(report.sync_seconds(), 0);
      ASSERT_TRUE(cp->ReportTimings(report).ok());
    }
  }
  const v1::StatusResponse after = cp->Status();
  EXPECT_GT(after.refits(), 0);
  EXPECT_GT(after.coefficients().at("lin"),
            1.1 * CostModel::FromSpecs(o.cluster, o.model, o.world_size)
                      .coefficients()
                      .lin);
  EXPECT_EQ(after.coefficients().at("grad_sync"), prior_sync);
  EXPECT_EQ(after.sync_error(), 0);
}

TEST_F(ControlPlaneTest, ProfileReportsBecomeObservations) {
  auto cp = Start(Options());
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  v1::ProfileReport report;
  report.set_rank(0);
  for (int64_t length : {1024, 4096, 16384}) {
    for (int p : {1, 2, 4}) {
      v1::ProfileEntry* e = report.mutable_profile()->add_entries();
      e->set_length(length);
      e->set_group_size(p);
      e->set_recompute(0.5);
      e->set_seconds(1e-5 * length / p);
    }
  }
  v1::ProfileReport bad = report;
  bad.mutable_profile()->mutable_entries(1)->set_seconds(0);
  const absl::Status s = cp->ReportProfile(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("entry 1"));
  EXPECT_EQ(cp->Status().observations(), 0);
  bad = report;
  bad.mutable_profile()->mutable_entries(0)->set_group_size(5);
  EXPECT_EQ(cp->ReportProfile(bad).status().code(),
            absl::StatusCode::kInvalidArgument);

  ASSERT_TRUE(cp->ReportProfile(report).ok());
  EXPECT_EQ(cp->Status().observations(), 9);
  EXPECT_EQ(cp->Status().timing_reports(), 0);
  // Due (refit_every = 8), but run where planning runs, not by the report.
  EXPECT_EQ(cp->Status().refits(), 0);
  ASSERT_TRUE(cp->PlanAvailableSteps().ok());
  EXPECT_EQ(cp->Status().refits(), 1);
}

/// A profile of `rank` with one entry per (length, p) of a small grid.
v1::ProfileReport ProfileOf(int rank) {
  v1::ProfileReport report;
  report.set_rank(rank);
  for (int64_t length : {256, 1024, 4096}) {
    for (int p : {1, 2, 4}) {
      v1::ProfileEntry* e = report.mutable_profile()->add_entries();
      e->set_length(length);
      e->set_group_size(p);
      e->set_seconds(1e-5 * length / p);
    }
  }
  return report;
}

TEST_F(ControlPlaneTest, ProfileAtStartGatesPlanningUntilEveryRankAnswers) {
  ControlPlaneOptions o = Options();
  o.profile_at_start = true;
  o.refit_every = 1000;  // Only the end of the profile refits.
  o.refit_error = 0;
  std::vector<ProfileDoneEvent> done;
  o.on_profile_done = [&done](const ProfileDoneEvent& e) { done.push_back(e); };
  auto cp = Start(std::move(o));
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  std::vector<int64_t> streams;
  for (int r = 0; r < kWorld; ++r) {
    absl::StatusOr<int64_t> id = cp->OpenStream(r, "sess", 0, [] {});
    ASSERT_TRUE(id.ok()) << id.status();
    streams.push_back(*id);
  }
  // The first message of every stream is the request, and nothing else.
  for (int r = 0; r < kWorld; ++r) {
    std::vector<StreamNext> sent = Pull(*cp, streams[r]);
    ASSERT_EQ(sent.size(), 1u) << "rank " << r;
    ASSERT_TRUE(sent[0].update->has_profile());
    const v1::ProfileRequest& request = sent[0].update->profile();
    EXPECT_EQ(request.epoch(), 0);
    EXPECT_EQ(std::vector<int64_t>(request.lengths().begin(),
                                   request.lengths().end()),
              DefaultProfileLengths(32768));  // to the window
    // llama3-8b has 32 heads; 8 GPUs a node: every divisor of the world,
    // beyond 1 as plain Ulysses and as a ring of two.
    EXPECT_EQ(std::vector<int>(request.group_sizes().begin(),
                               request.group_sizes().end()),
              (std::vector<int>{1, 2, 2, 4, 4}));
    EXPECT_EQ(std::vector<int>(request.ulysses().begin(),
                               request.ulysses().end()),
              (std::vector<int>{1, 2, 1, 4, 2}));
    EXPECT_EQ(request.recompute_size(), 2);
    EXPECT_EQ(request.repetitions(), 2);
    ASSERT_EQ(request.groups_size(), 3);  // [0,1], [2,3], [0..3]
    EXPECT_EQ(request.groups(0).rendezvous_prefix(), "sess/e0/profile/g0-1");
    EXPECT_EQ(request.groups(1).rendezvous_prefix(), "sess/e0/profile/g2-3");
    EXPECT_EQ(request.groups(2).rendezvous_prefix(),
              "sess/e0/profile/g0-1-2-3");
  }
  ASSERT_TRUE(cp->PlanAvailableSteps().ok());
  EXPECT_EQ(cp->Status().planned_steps(), 0);

  for (int r = 0; r + 1 < kWorld; ++r) {
    ASSERT_TRUE(cp->ReportProfile(ProfileOf(r)).ok());
    // An answer again does not count twice.
    ASSERT_TRUE(cp->ReportProfile(ProfileOf(r)).ok());
  }
  EXPECT_EQ(*cp->PlanAvailableSteps(), 0);
  EXPECT_TRUE(Pull(*cp, streams[0]).empty());
  EXPECT_EQ(cp->Status().refits(), 0);
  EXPECT_TRUE(done.empty());

  ASSERT_TRUE(cp->ReportProfile(ProfileOf(kWorld - 1)).ok());
  EXPECT_EQ(cp->Status().observations(), 9 * (2 * kWorld - 1));
  // The last answer ends the stage where planning runs, not on its thread.
  EXPECT_EQ(cp->Status().refits(), 0);
  EXPECT_TRUE(done.empty());

  EXPECT_EQ(*cp->PlanAvailableSteps(), 3);  // lookahead_steps
  EXPECT_EQ(cp->Status().refits(), 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_FALSE(done[0].timed_out);
  EXPECT_EQ(done[0].answered, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(done[0].missing.empty());
  EXPECT_EQ(done[0].observations, 9 * (2 * kWorld - 1));
  std::vector<StreamNext> sent = Pull(*cp, streams[0]);
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_TRUE(sent[0].update->has_step());
  EXPECT_EQ(sent[0].update->step().step(), 0);
  // A stream opened now (a reconnection) gets steps only.
  absl::StatusOr<int64_t> again = cp->OpenStream(1, "sess", 0, [] {});
  ASSERT_TRUE(again.ok());
  sent = Pull(*cp, *again);
  ASSERT_FALSE(sent.empty());
  EXPECT_TRUE(sent[0].update->has_step());
}

TEST_F(ControlPlaneTest, ProfileTimeoutPlansWithoutTheMissingRanks) {
  ControlPlaneOptions o = Options();
  o.profile_at_start = true;
  o.profile_timeout = absl::Seconds(60);
  std::vector<ProfileDoneEvent> done;
  o.on_profile_done = [&done](const ProfileDoneEvent& e) { done.push_back(e); };
  auto cp = Start(std::move(o));
  ASSERT_NE(cp, nullptr);
  // Nothing is planned before anyone registers, however long it takes: the
  // timeout starts at the first registration.
  clock_.Advance(absl::Minutes(5));
  EXPECT_EQ(*cp->PlanAvailableSteps(), 0);
  RegisterAll(*cp);
  ASSERT_TRUE(cp->ReportProfile(ProfileOf(0)).ok());
  ASSERT_TRUE(cp->ReportProfile(ProfileOf(2)).ok());
  clock_.Advance(absl::Seconds(59));
  EXPECT_EQ(*cp->PlanAvailableSteps(), 0);
  EXPECT_TRUE(done.empty());
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(*cp->PlanAvailableSteps(), 3);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].timed_out);
  EXPECT_EQ(done[0].answered, (std::vector<int>{0, 2}));
  EXPECT_EQ(done[0].missing, (std::vector<int>{1, 3}));
  EXPECT_EQ(done[0].observations, 18);
  EXPECT_GE(cp->Status().refits(), 1);
  // A late rank gets no request, and its late profile is still taken.
  absl::StatusOr<int64_t> id = cp->OpenStream(3, "sess", 0, [] {});
  ASSERT_TRUE(id.ok());
  std::vector<StreamNext> sent = Pull(*cp, *id);
  ASSERT_FALSE(sent.empty());
  EXPECT_TRUE(sent[0].update->has_step());
  ASSERT_TRUE(cp->ReportProfile(ProfileOf(3)).ok());
  EXPECT_EQ(cp->Status().observations(), 27);
}

TEST_F(ControlPlaneTest, ProfileOptionsAreValidated) {
  ControlPlaneOptions o = Options();
  o.profile_at_start = true;
  o.profile_repetitions = 0;
  EXPECT_EQ(ControlPlane::Start(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = Options();
  o.profile_at_start = true;
  o.profile_lengths = {256, 0};
  EXPECT_EQ(ControlPlane::Start(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ControlPlaneTest, TheStoreIsTheSessionsAndShowsInStatus) {
  // The limits are KvStore's (kv_store_test).
  auto cp = Start(Options());
  ASSERT_NE(cp, nullptr);
  const std::string key = "sess/e0/g0-1/id";
  ASSERT_TRUE(cp->StoreSet("sess", key, "abc").ok());
  EXPECT_EQ(cp->StoreSet("other", key, "abc").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(cp->StoreGet("sess", {key}).value(),
            (std::vector<std::string>{"abc"}));
  EXPECT_EQ(cp->Status().store_keys(), 1);
  EXPECT_EQ(cp->Status().store_bytes(), static_cast<int64_t>(key.size() + 3));
  EXPECT_EQ(cp->PurgeStoreBefore(1), 1);
  EXPECT_EQ(cp->Status().store_keys(), 0);
}

TEST_F(ControlPlaneTest, DrainEndsStreamsAfterTheLastPlannedStep) {
  auto cp = Start(Options());
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  ASSERT_EQ(*cp->PlanAvailableSteps(), 3);
  const int64_t s0 = *cp->OpenStream(0, "sess", 0, [] {});
  ASSERT_EQ(cp->NextForStream(s0).update->step().step(), 0);

  EXPECT_EQ(cp->Drain(/*stop=*/false), 2);
  EXPECT_TRUE(cp->Status().draining());
  EXPECT_FALSE(cp->Status().stopping());
  ReportStep(*cp, 0);
  EXPECT_EQ(*cp->PlanAvailableSteps(), 0);  // no planning after a drain

  std::vector<StreamNext> sent = Pull(*cp, s0);
  ASSERT_EQ(sent.size(), 4u);
  EXPECT_EQ(sent[0].update->step().step(), 1);
  EXPECT_EQ(sent[1].update->step().step(), 2);
  ASSERT_TRUE(sent[2].update->has_drain());
  EXPECT_EQ(sent[2].update->drain().last_step(), 2);
  EXPECT_EQ(sent[3].kind, StreamNext::Kind::kEnd);
  EXPECT_TRUE(sent[3].end_status.ok());
  EXPECT_FALSE(cp->stopped());  // no stop was asked for

  // A stream opened after the drain gets the remaining steps, then drain.
  const int64_t s1 = *cp->OpenStream(1, "sess", 1, [] {});
  sent = Pull(*cp, s1);
  ASSERT_EQ(sent.size(), 4u);  // 1, 2, drain, end
  EXPECT_EQ(sent[2].update->drain().last_step(), 2);
}

TEST_F(ControlPlaneTest, PlanningErrorDrainsAndIsReported) {
  ControlPlaneOptions o = Options();
  o.lengths = {4 << 20};  // fits no group at any recompute
  o.window = 8 << 20;
  o.tokens_per_step = 8 << 20;
  auto cp = Start(o);
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  const absl::Status s = cp->PlanAvailableSteps().status();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("planning step 0"));
  const v1::StatusResponse status = cp->Status();
  EXPECT_TRUE(status.draining());
  EXPECT_THAT(status.planner_error(), HasSubstr("step 0"));
  const int64_t stream = *cp->OpenStream(0, "sess", 0, [] {});
  std::vector<StreamNext> sent = Pull(*cp, stream);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].update->drain().last_step(), -1);
}

TEST_F(ControlPlaneTest, PlannerThreadPlansAheadAndShutdownEndsStreams) {
  ControlPlaneOptions o = Options();
  o.start_planner_thread = true;
  o.clock = nullptr;
  std::atomic<int> planned{0};
  o.on_step_planned = [&](const PlannedStepEvent& e) {
    EXPECT_EQ(e.step, planned.load());
    EXPECT_GT(e.tokens, 0);
    ++planned;
  };
  auto cp = Start(o);
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  // The planner thread may plan the first steps before the stream opens
  // (planning needs no registration), so only the wake for the step the
  // report below lets it plan is certain.
  absl::Mutex wake_mu;
  int wakes = 0;
  const int64_t s = *cp->OpenStream(0, "sess", 0, [&] {
    absl::MutexLock lock(&wake_mu);
    ++wakes;
  });
  ASSERT_TRUE(cp->AwaitPlanned(3, absl::Seconds(20)));
  EXPECT_FALSE(cp->AwaitPlanned(4, absl::Milliseconds(50)));  // look-ahead
  EXPECT_EQ(Pull(*cp, s).size(), 3u);
  int wakes_before_report = 0;
  {
    absl::MutexLock lock(&wake_mu);
    wakes_before_report = wakes;
  }
  ReportStep(*cp, 0);
  ASSERT_TRUE(cp->AwaitPlanned(4, absl::Seconds(20)));
  {
    absl::MutexLock lock(&wake_mu);
    const auto woken = [&] { return wakes > wakes_before_report; };
    EXPECT_TRUE(
        wake_mu.AwaitWithTimeout(absl::Condition(&woken), absl::Seconds(20)))
        << "no wake for step 3";
  }
  std::vector<StreamNext> sent = Pull(*cp, s);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].update->step().step(), 3);

  cp->Shutdown();
  sent = Pull(*cp, s);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].end_status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(cp->OpenStream(1, "sess", 0, [] {}).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(cp->AwaitPlanned(100, absl::Seconds(20)));  // returns at once
  cp.reset();  // joins the planner thread
  EXPECT_GE(planned.load(), 4);
}

TEST_F(ControlPlaneTest, AWorldStuckInAStepIsFailedAtTheStepTimeout) {
  // Every rank has its stream open and was sent step 0, and none reports
  // it (a collective every rank waits in): no rank is behind another, so
  // only --step_timeout finds them; their streams end with the reason.
  ControlPlaneOptions o = Options();
  o.step_timeout = absl::Seconds(30);
  std::vector<RankFailureEvent> events;
  o.on_rank_event = [&](const RankFailureEvent& e) { events.push_back(e); };
  auto cp = Start(o);
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  const std::vector<int64_t> streams = OpenAllStreams(*cp);
  ASSERT_GT(*cp->PlanAvailableSteps(), 0);
  for (int r = 0; r < kWorld; ++r) {
    std::vector<StreamNext> sent = Pull(*cp, streams[r]);
    ASSERT_FALSE(sent.empty());
    EXPECT_EQ(sent[0].update->step().step(), 0);
  }
  clock_.Advance(o.step_timeout - absl::Milliseconds(1));
  ASSERT_TRUE(cp->PlanAvailableSteps().ok());
  EXPECT_TRUE(events.empty());
  clock_.Advance(absl::Milliseconds(1));
  ASSERT_TRUE(cp->PlanAvailableSteps().ok());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].failed, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_THAT(events[0].reasons[0], HasSubstr("--step_timeout"));
  std::vector<StreamNext> ended = Pull(*cp, streams[0]);
  ASSERT_FALSE(ended.empty());
  EXPECT_EQ(ended.back().end_status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(ended.back().end_status.message(), HasSubstr("step 0"));
}

// With 2 heads and 4 ranks a sequence over more than 2 ranks runs Ulysses
// inside a ring: the event names each task's Ulysses degree as its plan does
// (a plain Ulysses task, whose plan may leave the field 0, as its group
// size).
TEST_F(ControlPlaneTest, PlannedStepEventsNameEachTasksUlyssesDegree) {
  ControlPlaneOptions o = Options();
  o.model.heads = 2;
  o.model.kv_heads = 2;
  std::vector<PlannedStepEvent> events;
  o.on_step_planned = [&](const PlannedStepEvent& e) { events.push_back(e); };
  auto cp = Start(std::move(o));
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  ASSERT_TRUE(cp->PlanAvailableSteps().ok());
  ASSERT_FALSE(events.empty());
  int rings = 0;
  for (const PlannedStepEvent& e : events) {
    SCOPED_TRACE(absl::StrCat("step ", e.step));
    absl::StatusOr<v1::StepPlan> plan = cp->PlannedStep(e.step);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(e.task_ulysses.size(), static_cast<size_t>(plan->tasks_size()));
    ASSERT_EQ(e.task_group_sizes.size(), e.task_ulysses.size());
    for (int i = 0; i < plan->tasks_size(); ++i) {
      const v1::Task& task = plan->tasks(i);
      EXPECT_EQ(e.task_group_sizes[i], task.ranks_size());
      EXPECT_EQ(e.task_ulysses[i],
                task.ulysses() > 0 ? task.ulysses() : task.ranks_size());
      EXPECT_EQ(2 % e.task_ulysses[i], 0);
      EXPECT_EQ(e.task_group_sizes[i] % e.task_ulysses[i], 0);
      if (e.task_ulysses[i] < e.task_group_sizes[i]) ++rings;
    }
  }
  EXPECT_GT(rings, 0) << "no task over more ranks than heads";
}

TEST_F(ControlPlaneTest, ShrinkReplansTheOpenStepsForTheRemainingRanks) {
  ControlPlaneOptions o = Options();
  o.rank_timeout = absl::Seconds(10);
  o.on_rank_failure = RankFailurePolicy::kShrink;
  std::vector<RankFailureEvent> events;
  o.on_rank_event = [&](const RankFailureEvent& e) { events.push_back(e); };
  auto cp = Start(o);
  ASSERT_NE(cp, nullptr);
  RegisterAll(*cp);
  const std::vector<int64_t> streams = OpenAllStreams(*cp);
  ASSERT_EQ(*cp->PlanAvailableSteps(), 3);
  ReportStep(*cp, 0);
  ASSERT_EQ(*cp->PlanAvailableSteps(), 1);  // Steps 1..3 open.
  std::vector<std::vector<int64_t>> open;
  for (int64_t s = 1; s <= 3; ++s) {
    const v1::StepPlan plan = *cp->PlannedStep(s);
    open.emplace_back(plan.samples().begin(), plan.samples().end());
    std::sort(open.back().begin(), open.back().end());
  }
  const int lost = kWorld - 1;
  cp->CloseStream(streams[lost]);
  clock_.Advance(absl::Seconds(10));
  // The check runs before planning: steps 4..6 re-serve steps 1..3.
  ASSERT_EQ(*cp->PlanAvailableSteps(), 3);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].failed, std::vector<int>{lost});
  EXPECT_EQ(events[0].abandoned_from, 1);
  EXPECT_EQ(events[0].abandoned_to, 4);
  for (int64_t s = 4; s <= 6; ++s) {
    const v1::StepPlan plan = *cp->PlannedStep(s);
    EXPECT_EQ(plan.epoch(), 1);
    std::vector<int64_t> samples(plan.samples().begin(), plan.samples().end());
    std::sort(samples.begin(), samples.end());
    EXPECT_EQ(samples, open[s - 4]) << "step " << s;
    for (const v1::Task& task : plan.tasks()) {
      for (int r : task.ranks()) EXPECT_NE(r, lost) << "step " << s;
    }
    for (const v1::CommGroup& group : plan.groups()) {
      EXPECT_THAT(group.rendezvous_prefix(), HasSubstr("sess/e1/"));
    }
  }
  // A late report of an abandoned step is acknowledged and dropped.
  const v1::StepPlan abandoned_plan = [&] {
    v1::StepPlan p = *cp->PlannedStep(4);
    p.set_step(2);
    p.set_epoch(0);
    return p;
  }();
  absl::StatusOr<v1::ReportAck> late =
      cp->ReportTimings(Report(RankView(abandoned_plan, 0)));
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_TRUE(late->discarded());
  const v1::StatusResponse status = cp->Status();
  EXPECT_EQ(status.epoch(), 1);
  EXPECT_EQ(status.epoch_world_size(), kWorld - 1);
  EXPECT_EQ(status.abandoned_steps(), 3);
  EXPECT_EQ(status.on_rank_failure(), "shrink");
}

}  // namespace
}  // namespace dcp
