#include "scheduler/server/scheduler_metrics.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/clock.h"
#include "common/metrics/metrics.h"
#include "common/metrics/metrics_testing.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/scheduler_service.grpc.pb.h"
#include "scheduler/control/control_plane.h"
#include "scheduler/control/step_stats.h"
#include "scheduler/planner/cost_model.h"
#include "scheduler/planner/test_data.h"
#include "scheduler/server/scheduler_server.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;
using Labels = std::vector<std::pair<std::string, std::string>>;

std::string TmpDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir == nullptr ? "/tmp" : dir;
}

/// A status as ControlPlane::Status() gives it: 4 ranks, 3 registered
/// (lags 2, 5 and 5; rank 2 never registered), 2 connected.
v1::StatusResponse CannedStatus() {
  v1::StatusResponse s;
  s.set_session_id("0123abcd");
  s.set_epoch(1);
  s.set_world_size(4);
  s.set_model("tiny \"quoted\"");
  s.set_planned_steps(12);
  s.set_completed_steps(7);
  s.set_draining(true);
  s.set_model_error(0.25);
  s.set_timing_reports(29);
  s.set_refits(3);
  s.set_step_error(0.125);
  s.set_sync_error(0.0625);
  s.set_store_keys(6);
  s.set_store_bytes(1234);
  s.set_refit_error_before(0.5);
  s.set_refit_error_after(0.2);
  s.set_refit_error_since(0.3);
  s.set_unseen_task_error(0.375);
  s.set_observations(120);
  (*s.mutable_coefficients())["attn"] = 1.5e-12;
  (*s.mutable_coefficients())["fixed"] = 0.002;
  struct Rank {
    bool registered, connected;
    int64_t lag;
    double idle;
  };
  const Rank ranks[] = {{true, true, 2, 0.5},
                        {true, false, 5, 30},
                        {false, false, 12, 0},
                        {true, true, 5, 1}};
  for (int r = 0; r < 4; ++r) {
    v1::RankStatus* rank = s.add_ranks();
    rank->set_rank(r);
    rank->set_registered(ranks[r].registered);
    rank->set_connected(ranks[r].connected);
    rank->set_lag_steps(ranks[r].lag);
    rank->set_idle_seconds(ranks[r].idle);
  }
  return s;
}

/// 1 - mean/max of `busy`, derived here rather than with the code's own
/// IdleFraction.
double ExpectedIdle(const std::vector<double>& busy) {
  const double max = *std::max_element(busy.begin(), busy.end());
  const double mean =
      std::accumulate(busy.begin(), busy.end(), 0.0) / busy.size();
  return 1 - mean / max;
}

class SchedulerMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<SchedulerMetrics>> metrics =
        SchedulerMetrics::Create(&registry_, &clock_);
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = *std::move(metrics);
  }

  std::optional<double> Value(const std::string& name,
                              const Labels& labels = {}) {
    return FindSample(registry_.Collect(), name, labels);
  }

  FakeClock clock_{absl::FromUnixSeconds(1700000000)};
  MetricsRegistry registry_;
  std::unique_ptr<SchedulerMetrics> metrics_;
};

TEST_F(SchedulerMetricsTest, SnapshotFamiliesAreEmptyUntilASourceIsSet) {
  EXPECT_EQ(Value("dcp_scheduler_steps_planned_total"), std::nullopt);
  EXPECT_EQ(Value("dcp_scheduler_planned_tokens_total"), 0.0);
  EXPECT_EQ(Value("dcp_scheduler_planning_seconds_count"), 0.0);
  EXPECT_EQ(Value("dcp_scheduler_timing_reports_rejected_total",
                  {{"code", "FAILED_PRECONDITION"}}),
            0.0);
  // Still a valid exposition (HELP and TYPE without samples).
  EXPECT_THAT(registry_.RenderText(),
              HasSubstr("# TYPE dcp_scheduler_steps_planned_total counter\n"));
}

TEST_F(SchedulerMetricsTest, ReadsTheStatusAtEveryScrape) {
  v1::StatusResponse status = CannedStatus();
  int calls = 0;
  metrics_->SetStatusSource([&] {
    ++calls;
    return status;
  });
  const std::vector<MetricFamilySnapshot> f = registry_.Collect();
  EXPECT_EQ(calls, 1);  // one snapshot for every family
  EXPECT_EQ(
      FindSample(f, "dcp_scheduler_info",
                 {{"session_id", "0123abcd"}, {"model", "tiny \"quoted\""}}),
      1.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_steps_planned_total"), 12.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_steps_completed_total"), 7.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_planned_ahead_steps"), 5.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_epoch"), 1.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_world_size"), 4.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_registered_agents"), 3.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_connected_agents"), 2.0);
  // Rank 2 (lag 12) never registered: it does not count.
  EXPECT_EQ(FindSample(f, "dcp_scheduler_max_rank_lag_steps"), 5.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_min_rank_lag_steps"), 2.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_slowest_rank"), 1.0);  // tie: lowest
  EXPECT_EQ(FindSample(f, "dcp_scheduler_max_rank_idle_seconds"), 30.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_timing_reports_total"), 29.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_refits_total"), 3.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_cost_model_observations"), 120.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_cost_model_task_error_ratio"), 0.25);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_cost_model_unseen_task_error_ratio"),
            0.375);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_cost_model_step_error_ratio"), 0.125);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_cost_model_sync_error_ratio"),
            0.0625);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_store_keys"), 6.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_store_bytes"), 1234.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_last_refit_task_error_ratio",
                       {{"fit", "before"}}),
            0.5);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_last_refit_task_error_ratio",
                       {{"fit", "after"}}),
            0.2);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_last_refit_task_error_ratio",
                       {{"fit", "since"}}),
            0.3);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_cost_model_coefficient",
                       {{"coefficient", "attn"}}),
            1.5e-12);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_cost_model_coefficient",
                       {{"coefficient", "fixed"}}),
            0.002);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_draining"), 1.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_stopping"), 0.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_planner_failed"), 0.0);

  status.set_planned_steps(13);
  status.set_planner_error("sample 7 fits no group");
  status.mutable_ranks(1)->set_lag_steps(1);
  EXPECT_EQ(Value("dcp_scheduler_steps_planned_total"), 13.0);
  EXPECT_EQ(Value("dcp_scheduler_planner_failed"), 1.0);
  EXPECT_EQ(Value("dcp_scheduler_slowest_rank"), 3.0);
  EXPECT_EQ(Value("dcp_scheduler_min_rank_lag_steps"), 1.0);
}

TEST_F(SchedulerMetricsTest, LagFamiliesAreEmptyWithoutRegisteredRanks) {
  v1::StatusResponse status = CannedStatus();
  for (v1::RankStatus& rank : *status.mutable_ranks()) {
    rank.set_registered(false);
  }
  metrics_->SetStatusSource([&] { return status; });
  EXPECT_EQ(Value("dcp_scheduler_registered_agents"), 0.0);
  EXPECT_EQ(Value("dcp_scheduler_max_rank_lag_steps"), std::nullopt);
  EXPECT_EQ(Value("dcp_scheduler_slowest_rank"), std::nullopt);
}

TEST_F(SchedulerMetricsTest, CountsPlannedStepsAndRefits) {
  PlannedStepEvent event;
  event.samples = 30;
  event.tokens = 65536;
  event.predicted_seconds = 4.5;
  event.planning_time = absl::Milliseconds(2);
  event.planning_cpu_time = absl::Microseconds(1500);
  metrics_->OnStepPlanned(event);
  event.planning_time = absl::Milliseconds(20);
  event.planning_cpu_time = absl::Microseconds(12500);
  clock_.Advance(absl::Seconds(10));
  metrics_->OnStepPlanned(event);

  EXPECT_EQ(Value("dcp_scheduler_planning_seconds_count"), 2.0);
  EXPECT_DOUBLE_EQ(*Value("dcp_scheduler_planning_seconds_sum"), 0.022);
  EXPECT_EQ(Value("dcp_scheduler_planning_seconds_bucket", {{"le", "0.0025"}}),
            1.0);
  EXPECT_EQ(Value("dcp_scheduler_planning_seconds_bucket", {{"le", "0.025"}}),
            2.0);
  EXPECT_DOUBLE_EQ(*Value("dcp_scheduler_planning_cpu_seconds_total"),
                   absl::ToDoubleSeconds(absl::Microseconds(1500) +
                                         absl::Microseconds(12500)));
  EXPECT_EQ(Value("dcp_scheduler_planned_tokens_total"), 131072.0);
  EXPECT_EQ(Value("dcp_scheduler_planned_samples_total"), 60.0);
  EXPECT_EQ(Value("dcp_scheduler_predicted_step_seconds"), 4.5);
  EXPECT_EQ(Value("dcp_scheduler_last_step_planned_timestamp_seconds"),
            1700000010.0);
  EXPECT_EQ(Value("dcp_scheduler_last_refit_timestamp_seconds"), 0.0);
  metrics_->OnRefit(RefitEvent());
  EXPECT_EQ(Value("dcp_scheduler_last_refit_timestamp_seconds"), 1700000010.0);
}

TEST_F(SchedulerMetricsTest, BuildInfoNamesTheVersionAndCommit) {
  MetricsRegistry registry;
  ASSERT_TRUE(
      SchedulerMetrics::Create(&registry, nullptr, {"1.2.3", "abc123"}).ok());
  EXPECT_EQ(FindSample(registry.Collect(), "dcp_scheduler_build_info",
                       {{"version", "1.2.3"}, {"commit", "abc123"}}),
            1.0);
  // The default: this version, commit unknown.
  EXPECT_EQ(Value("dcp_scheduler_build_info",
                  {{"version", kDcpVersion}, {"commit", "unknown"}}),
            1.0);
}

TEST_F(SchedulerMetricsTest, HistogramsThePlannedTasksGroupSizesAndRecompute) {
  PlannedStepEvent event;
  event.task_group_sizes = {1, 2, 2, 8, 4096};
  event.task_recompute = {0.0, 0.3, 1.0};
  metrics_->OnStepPlanned(event);
  auto bucket = [&](const char* name, const char* le) {
    return Value(name, {{"le", le}});
  };
  EXPECT_EQ(Value("dcp_scheduler_task_group_size_count"), 5.0);
  EXPECT_EQ(bucket("dcp_scheduler_task_group_size_bucket", "1"), 1.0);
  EXPECT_EQ(bucket("dcp_scheduler_task_group_size_bucket", "2"), 3.0);
  EXPECT_EQ(bucket("dcp_scheduler_task_group_size_bucket", "4"), 3.0);
  EXPECT_EQ(bucket("dcp_scheduler_task_group_size_bucket", "8"), 4.0);
  EXPECT_EQ(bucket("dcp_scheduler_task_group_size_bucket", "2048"), 4.0);
  EXPECT_EQ(bucket("dcp_scheduler_task_group_size_bucket", "4096"), 5.0);
  EXPECT_EQ(Value("dcp_scheduler_task_group_size_sum"), 1 + 2 + 2 + 8 + 4096);
  EXPECT_EQ(bucket("dcp_scheduler_task_recompute_ratio_bucket", "0"), 1.0);
  EXPECT_EQ(bucket("dcp_scheduler_task_recompute_ratio_bucket", "0.25"), 1.0);
  EXPECT_EQ(bucket("dcp_scheduler_task_recompute_ratio_bucket", "0.5"), 2.0);
  EXPECT_EQ(bucket("dcp_scheduler_task_recompute_ratio_bucket", "1"), 3.0);
}

TEST_F(SchedulerMetricsTest, StepFamiliesDescribeTheLastCompletedStep) {
  const std::vector<double> predicted1 = {1, 2, 3, 6};
  const std::vector<double> predicted2 = {2, 2, 2, 1};
  PlannedStepEvent planned;
  planned.epoch = 0;
  planned.step = 1;
  planned.predicted_rank_busy_seconds = predicted1;
  metrics_->OnStepPlanned(planned);
  planned.step = 2;
  planned.predicted_rank_busy_seconds = predicted2;
  metrics_->OnStepPlanned(planned);

  StepCompletedEvent done;
  done.epoch = 0;
  done.step = 1;
  done.tokens = 4096;
  done.predicted_seconds = 6.5;
  done.measured_seconds = 8.0;
  done.rank_busy_seconds = {4, 4, 7, 5};
  metrics_->OnStepCompleted(done);
  EXPECT_EQ(Value("dcp_scheduler_step_predicted_seconds"), 6.5);
  EXPECT_EQ(Value("dcp_scheduler_step_measured_seconds"), 8.0);
  EXPECT_DOUBLE_EQ(
      *Value("dcp_scheduler_step_imbalance_ratio", {{"source", "predicted"}}),
      ExpectedIdle(predicted1));
  EXPECT_DOUBLE_EQ(
      *Value("dcp_scheduler_step_imbalance_ratio", {{"source", "measured"}}),
      ExpectedIdle(done.rank_busy_seconds));
  EXPECT_EQ(Value("dcp_scheduler_tokens_per_second"), 4096 / 8.0);

  // Step 2 completes with a faster measurement; trained tokens add up.
  done.step = 2;
  done.tokens = 1000;
  done.measured_seconds = 0.004;
  done.rank_busy_seconds = {1, 1, 1, 1};
  metrics_->OnStepCompleted(done);
  EXPECT_DOUBLE_EQ(
      *Value("dcp_scheduler_step_imbalance_ratio", {{"source", "predicted"}}),
      ExpectedIdle(predicted2));
  EXPECT_EQ(
      Value("dcp_scheduler_step_imbalance_ratio", {{"source", "measured"}}),
      0.0);
  EXPECT_EQ(Value("dcp_scheduler_trained_tokens_total"), 4096 + 1000.0);
  EXPECT_DOUBLE_EQ(*Value("dcp_scheduler_tokens_per_second"), 1000 / 0.004);
  EXPECT_EQ(Value("dcp_scheduler_step_seconds_count"), 2.0);
  EXPECT_DOUBLE_EQ(*Value("dcp_scheduler_step_seconds_sum"), 8.004);
  EXPECT_EQ(Value("dcp_scheduler_step_seconds_bucket", {{"le", "0.005"}}), 1.0);

  // A step never seen planned (planned before a restart) leaves the
  // predicted imbalance as it was; the measured figures follow it.
  done.step = 7;
  done.rank_busy_seconds = {1, 3};
  metrics_->OnStepCompleted(done);
  EXPECT_DOUBLE_EQ(
      *Value("dcp_scheduler_step_imbalance_ratio", {{"source", "predicted"}}),
      ExpectedIdle(predicted2));
  EXPECT_DOUBLE_EQ(
      *Value("dcp_scheduler_step_imbalance_ratio", {{"source", "measured"}}),
      ExpectedIdle({1, 3}));
}

/// Rank `rank`'s report of `plan`: each of its tasks takes `task_seconds`,
/// its sync `sync_seconds`.
v1::TimingReport ReportOf(const v1::StepPlan& plan, int rank,
                          double task_seconds, double sync_seconds) {
  v1::TimingReport report;
  report.set_epoch(plan.epoch());
  report.set_step(plan.step());
  report.set_rank(rank);
  report.set_sync_seconds(sync_seconds);
  for (const v1::Task& task : plan.tasks()) {
    if (std::find(task.ranks().begin(), task.ranks().end(), rank) ==
        task.ranks().end()) {
      continue;
    }
    v1::TaskTiming* t = report.add_tasks();
    t->set_task_index(task.task_index());
    t->set_micro_step(report.tasks_size() - 1);
    t->set_group_size(task.ranks_size());
    int64_t tokens = 0;
    for (int64_t length : task.lengths()) {
      tokens += length;
      t->add_sample_lengths(length);
    }
    t->set_tokens(tokens);
    t->set_recompute(task.recompute());
    t->set_seconds(task_seconds);
    t->set_peak_memory_bytes(1);
  }
  return report;
}

// The control plane's events, from a real planner and real reports: the
// figures are derived here from the plan and the reports fed.
TEST(SchedulerMetricsControlPlaneTest, CompletedStepsOfARealControlPlane) {
  MetricsRegistry registry;
  absl::StatusOr<std::unique_ptr<SchedulerMetrics>> metrics =
      SchedulerMetrics::Create(&registry);
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  constexpr int kWorld = 4;
  SchedulerServerOptions options;
  ControlPlaneOptions& cp = options.control_plane;
  cp.lengths = testing_data::SkewedTrace(4000, /*seed=*/5);
  cp.window = 32768;
  cp.model = *BuiltinModel("llama3-8b");
  cp.world_size = kWorld;
  cp.tokens_per_step = 65536;
  cp.lookahead_steps = 2;
  cp.start_planner_thread = false;
  (*metrics)->Instrument(options);
  const CostModel initial =
      CostModel::FromSpecs(cp.cluster, cp.model, cp.world_size);
  absl::StatusOr<std::unique_ptr<ControlPlane>> plane =
      ControlPlane::Start(std::move(cp));
  ASSERT_TRUE(plane.ok()) << plane.status();
  ASSERT_EQ((*plane)->PlanAvailableSteps().value_or(0), 2);
  for (int r = 0; r < kWorld; ++r) {
    v1::RegisterRequest hello;
    hello.set_rank(r);
    hello.set_world_size(kWorld);
    ASSERT_TRUE((*plane)->Register(hello).ok());
  }
  absl::StatusOr<v1::StepPlan> plan = (*plane)->PlannedStep(0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_GT(plan->planned_at_unix_micros(), 0);

  // Rank r's tasks take 0.01 * (r + 1) s each; its sync 0.002 s.
  std::vector<double> busy(kWorld), total(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    const v1::TimingReport report = ReportOf(*plan, r, 0.01 * (r + 1), 0.002);
    for (const v1::TaskTiming& t : report.tasks()) busy[r] += t.seconds();
    total[r] = busy[r] + report.sync_seconds();
    ASSERT_TRUE((*plane)->ReportTimings(report).ok()) << "rank " << r;
  }
  const std::vector<MetricFamilySnapshot> f = registry.Collect();
  EXPECT_EQ(FindSample(f, "dcp_scheduler_trained_tokens_total"),
            static_cast<double>(plan->total_tokens()));
  const double measured = *std::max_element(total.begin(), total.end());
  EXPECT_DOUBLE_EQ(*FindSample(f, "dcp_scheduler_step_measured_seconds"),
                   measured);
  EXPECT_DOUBLE_EQ(*FindSample(f, "dcp_scheduler_step_predicted_seconds"),
                   plan->predicted_makespan_s());
  EXPECT_DOUBLE_EQ(*FindSample(f, "dcp_scheduler_tokens_per_second"),
                   plan->total_tokens() / measured);
  EXPECT_DOUBLE_EQ(*FindSample(f, "dcp_scheduler_step_imbalance_ratio",
                               {{"source", "measured"}}),
                   ExpectedIdle(busy));
  EXPECT_DOUBLE_EQ(
      *FindSample(f, "dcp_scheduler_step_imbalance_ratio",
                  {{"source", "predicted"}}),
      ExpectedIdle(PredictedRankBusySeconds(*plan, initial, kWorld)));
  EXPECT_EQ(FindSample(f, "dcp_scheduler_step_seconds_count"), 1.0);
  // Every task of the two planned steps is in the mix histograms.
  absl::StatusOr<v1::StepPlan> plan1 = (*plane)->PlannedStep(1);
  ASSERT_TRUE(plan1.ok()) << plan1.status();
  EXPECT_EQ(FindSample(f, "dcp_scheduler_task_group_size_count"),
            plan->tasks_size() + plan1->tasks_size());
  EXPECT_EQ(FindSample(f, "dcp_scheduler_task_recompute_ratio_count"),
            plan->tasks_size() + plan1->tasks_size());
}

TEST_F(SchedulerMetricsTest, CountsRpcsAndRejectedReportsByCode) {
  metrics_->OnRpcDone("ReportTimings", absl::StatusCode::kOk);
  metrics_->OnRpcDone("ReportTimings", absl::StatusCode::kInvalidArgument);
  metrics_->OnRpcDone("ReportTimings", absl::StatusCode::kInvalidArgument);
  metrics_->OnRpcDone("ReportTimings", absl::StatusCode::kAlreadyExists);
  metrics_->OnRpcDone("StoreGet", absl::StatusCode::kNotFound);
  metrics_->OnRpcDone("NoSuchMethod", absl::StatusCode::kUnimplemented);

  EXPECT_EQ(Value("dcp_scheduler_rpcs_total",
                  {{"method", "ReportTimings"}, {"code", "OK"}}),
            1.0);
  EXPECT_EQ(Value("dcp_scheduler_rpcs_total",
                  {{"method", "ReportTimings"}, {"code", "INVALID_ARGUMENT"}}),
            2.0);
  EXPECT_EQ(Value("dcp_scheduler_rpcs_total",
                  {{"method", "StoreGet"}, {"code", "NOT_FOUND"}}),
            1.0);
  EXPECT_EQ(Value("dcp_scheduler_rpcs_total",
                  {{"method", "unknown"}, {"code", "UNIMPLEMENTED"}}),
            1.0);
  EXPECT_EQ(Value("dcp_scheduler_timing_reports_rejected_total",
                  {{"code", "INVALID_ARGUMENT"}}),
            2.0);
  EXPECT_EQ(Value("dcp_scheduler_timing_reports_rejected_total",
                  {{"code", "ALREADY_EXISTS"}}),
            1.0);
  EXPECT_EQ(Value("dcp_scheduler_timing_reports_rejected_total",
                  {{"code", "FAILED_PRECONDITION"}}),
            0.0);
  EXPECT_EQ(
      Value("dcp_scheduler_timing_reports_rejected_total", {{"code", "OK"}}),
      std::nullopt);
}

TEST_F(SchedulerMetricsTest, RegistersOncePerRegistry) {
  EXPECT_EQ(SchedulerMetrics::Create(&registry_).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(SchedulerMetrics::Create(nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SchedulerMetricsTest, InstrumentKeepsTheCallbacksAlreadySet) {
  SchedulerServerOptions options;
  int logged_steps = 0, logged_refits = 0, seen_rpcs = 0;
  options.control_plane.on_step_planned = [&](const PlannedStepEvent&) {
    ++logged_steps;
  };
  options.control_plane.on_refit = [&](const RefitEvent&) { ++logged_refits; };
  options.on_rpc_done = [&](absl::string_view, absl::StatusCode) {
    ++seen_rpcs;
  };
  metrics_->Instrument(options);
  PlannedStepEvent step;
  step.tokens = 10;
  options.control_plane.on_step_planned(step);
  options.control_plane.on_refit(RefitEvent());
  options.on_rpc_done("GetStatus", absl::StatusCode::kOk);
  EXPECT_EQ(logged_steps, 1);
  EXPECT_EQ(logged_refits, 1);
  EXPECT_EQ(seen_rpcs, 1);
  EXPECT_EQ(Value("dcp_scheduler_planned_tokens_total"), 10.0);
  EXPECT_EQ(Value("dcp_scheduler_rpcs_total",
                  {{"method", "GetStatus"}, {"code", "OK"}}),
            1.0);
}

// Every family, with samples, through Prometheus' own parser and linter.
TEST_F(SchedulerMetricsTest, PromtoolAcceptsTheSchedulerMetrics) {
  const v1::StatusResponse status = CannedStatus();
  metrics_->SetStatusSource([&] { return status; });
  PlannedStepEvent event;
  event.tokens = 100;
  event.planning_time = absl::Milliseconds(3);
  event.task_group_sizes = {1, 4};
  event.task_recompute = {0.5, 1.0};
  event.predicted_rank_busy_seconds = {1, 2};
  metrics_->OnStepPlanned(event);
  StepCompletedEvent done;
  done.tokens = 100;
  done.measured_seconds = 2.5;
  done.rank_busy_seconds = {1, 2};
  metrics_->OnStepCompleted(done);
  metrics_->OnRefit(RefitEvent());
  metrics_->OnRpcDone("ReportTimings", absl::StatusCode::kInvalidArgument);
  const std::string text = registry_.RenderText();
  absl::StatusOr<PromtoolResult> result =
      RunPromtoolCheckMetrics(text, TmpDir());
  if (absl::IsNotFound(result.status())) {
    GTEST_SKIP() << result.status().message();
  }
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0) << result->output << "\n" << text;
  EXPECT_EQ(result->output, "") << text;
  EXPECT_EQ(registry_.dropped_samples(), 0);
}

// The wiring dcp-scheduler uses, against a real server: the planner thread's
// steps, the Status() snapshot and the gRPC interceptor's codes.
TEST(SchedulerMetricsServerTest, InstrumentsARealServer) {
  MetricsRegistry registry;
  absl::StatusOr<std::unique_ptr<SchedulerMetrics>> metrics =
      SchedulerMetrics::Create(&registry);
  ASSERT_TRUE(metrics.ok()) << metrics.status();

  SchedulerServerOptions options;
  options.listen_address = "127.0.0.1:0";
  ControlPlaneOptions& cp = options.control_plane;
  cp.lengths = testing_data::SkewedTrace(4000, /*seed=*/5);
  cp.window = 32768;
  cp.model = *BuiltinModel("llama3-8b");
  cp.world_size = 4;
  cp.tokens_per_step = 65536;
  cp.lookahead_steps = 2;
  (*metrics)->Instrument(options);
  absl::StatusOr<std::unique_ptr<SchedulerServer>> server =
      SchedulerServer::Start(std::move(options));
  ASSERT_TRUE(server.ok()) << server.status();
  ControlPlane* control_plane = &(*server)->control_plane();
  (*metrics)->SetStatusSource(
      [control_plane] { return control_plane->Status(); });
  ASSERT_TRUE(control_plane->AwaitPlanned(2, absl::Seconds(30)));

  auto stub = v1::Scheduler::NewStub(grpc::CreateChannel(
      (*server)->address(), grpc::InsecureChannelCredentials()));
  auto deadline = [](grpc::ClientContext& context) {
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(20));
  };
  {
    // Rank 9 is outside the world of 4: INVALID_ARGUMENT.
    grpc::ClientContext context;
    deadline(context);
    v1::TimingReport report;
    report.set_rank(9);
    v1::ReportAck ack;
    EXPECT_EQ(stub->ReportTimings(&context, report, &ack).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    // The same report on a StreamReports stream: counted per report, as
    // the server answers it (before the answer is written).
    grpc::ClientContext context;
    deadline(context);
    auto stream = stub->StreamReports(&context);
    v1::TimingReport report;
    report.set_rank(9);
    ASSERT_TRUE(stream->Write(report));
    ASSERT_TRUE(stream->WritesDone());
    v1::ReportResult result;
    ASSERT_TRUE(stream->Read(&result));
    EXPECT_EQ(result.code(), static_cast<int>(grpc::INVALID_ARGUMENT));
    EXPECT_FALSE(stream->Read(&result));
    EXPECT_TRUE(stream->Finish().ok());
  }
  {
    // Two reports in one node batch: counted per report, under the node
    // method.
    grpc::ClientContext context;
    deadline(context);
    auto stream = stub->StreamNodeReports(&context);
    v1::TimingReportBatch batch;
    batch.add_reports()->set_rank(9);
    batch.add_reports()->set_rank(10);
    ASSERT_TRUE(stream->Write(batch));
    ASSERT_TRUE(stream->WritesDone());
    v1::ReportResultBatch results;
    ASSERT_TRUE(stream->Read(&results));
    EXPECT_EQ(results.results_size(), 2);
    EXPECT_FALSE(stream->Read(&results));
    EXPECT_TRUE(stream->Finish().ok());
  }
  // A plan stream of each kind that cannot open: counted as it ends, with
  // the status the client sees.
  grpc::StatusCode rank_plans_code;
  grpc::StatusCode node_plans_code;
  {
    grpc::ClientContext context;
    deadline(context);
    v1::StreamPlansRequest request;
    request.set_rank(9);
    auto reader = stub->StreamPlans(&context, request);
    v1::PlanUpdate update;
    EXPECT_FALSE(reader->Read(&update));
    rank_plans_code = reader->Finish().error_code();
    EXPECT_NE(rank_plans_code, grpc::StatusCode::OK);
  }
  {
    grpc::ClientContext context;
    deadline(context);
    auto reader = stub->StreamNodePlans(&context, v1::NodePlansRequest());
    v1::NodePlanUpdate update;
    EXPECT_FALSE(reader->Read(&update));
    node_plans_code = reader->Finish().error_code();
    EXPECT_EQ(node_plans_code, grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext context;
    deadline(context);
    v1::StatusResponse status;
    EXPECT_TRUE(stub->GetStatus(&context, v1::StatusRequest(), &status).ok());
  }
  // The interceptor counts before the status is sent: no wait needed.
  const std::vector<MetricFamilySnapshot> f = registry.Collect();
  EXPECT_EQ(FindSample(f, "dcp_scheduler_timing_reports_rejected_total",
                       {{"code", "INVALID_ARGUMENT"}}),
            4.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_rpcs_total",
                       {{"method", "StreamNodeReports"},
                        {"code", "INVALID_ARGUMENT"}}),
            2.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_rpcs_total",
                       {{"method", "StreamPlans"},
                        {"code", absl::StatusCodeToString(
                                     static_cast<absl::StatusCode>(
                                         rank_plans_code))}}),
            1.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_rpcs_total",
                       {{"method", "StreamNodePlans"},
                        {"code", "INVALID_ARGUMENT"}}),
            1.0);
  EXPECT_EQ(
      FindSample(f, "dcp_scheduler_rpcs_total",
                 {{"method", "StreamReports"}, {"code", "INVALID_ARGUMENT"}}),
      1.0);
  EXPECT_EQ(
      FindSample(f, "dcp_scheduler_rpcs_total",
                 {{"method", "ReportTimings"}, {"code", "INVALID_ARGUMENT"}}),
      1.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_rpcs_total",
                       {{"method", "GetStatus"}, {"code", "OK"}}),
            1.0);
  EXPECT_GE(*FindSample(f, "dcp_scheduler_steps_planned_total"), 2.0);
  EXPECT_GE(*FindSample(f, "dcp_scheduler_planning_seconds_count"), 2.0);
  // The real planning thread's CPU clock: planning takes some CPU.
  EXPECT_GT(*FindSample(f, "dcp_scheduler_planning_cpu_seconds_total"), 0.0);
  EXPECT_LE(*FindSample(f, "dcp_scheduler_planning_cpu_seconds_total"),
            *FindSample(f, "process_cpu_seconds_total"));
  EXPECT_GT(*FindSample(f, "dcp_scheduler_planned_tokens_total"), 0.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_world_size"), 4.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_connected_agents"), 0.0);
  EXPECT_GT(*FindSample(f, "dcp_scheduler_cost_model_coefficient",
                        {{"coefficient", "attn"}}),
            0.0);
  EXPECT_EQ(FindSample(f, "dcp_scheduler_timing_reports_total"), 0.0);
  (*server)->Shutdown();
}

// The planning CPU counter grows with each step the control plane plans, by
// what its CPU clock read around the planning (a fake clock here, moved by
// a step on every reading, so the expected total is known), and the process
// CPU counter is the process's own.
TEST(SchedulerMetricsPlanningCpuTest, CountsThePlanningThreadsCpu) {
  MetricsRegistry registry;
  absl::StatusOr<std::unique_ptr<SchedulerMetrics>> metrics =
      SchedulerMetrics::Create(&registry);
  ASSERT_TRUE(metrics.ok()) << metrics.status();

  // Each reading advances the fake CPU clock by `tick` after it is taken:
  // a step's two readings are one tick apart.
  class SteppingClock : public Clock {
   public:
    explicit SteppingClock(absl::Duration tick) : tick_(tick) {}
    absl::Time Now() override {
      const absl::Time now = clock_.Now();
      clock_.Advance(tick_);
      return now;
    }

   private:
    const absl::Duration tick_;
    FakeClock clock_;
  };
  const absl::Duration tick = absl::Milliseconds(3);
  SteppingClock cpu_clock(tick);

  SchedulerServerOptions options;
  ControlPlaneOptions& cp = options.control_plane;
  cp.lengths = testing_data::SkewedTrace(4000, /*seed=*/5);
  cp.window = 32768;
  cp.model = *BuiltinModel("llama3-8b");
  cp.world_size = 4;
  cp.tokens_per_step = 65536;
  cp.lookahead_steps = 3;
  cp.start_planner_thread = false;
  cp.planning_cpu_clock = &cpu_clock;
  (*metrics)->Instrument(options);
  absl::StatusOr<std::unique_ptr<ControlPlane>> control_plane =
      ControlPlane::Start(std::move(options.control_plane));
  ASSERT_TRUE(control_plane.ok()) << control_plane.status();

  auto value = [&registry](const char* name) {
    return FindSample(registry.Collect(), name);
  };
  EXPECT_EQ(value("dcp_scheduler_planning_cpu_seconds_total"), 0.0);
  absl::StatusOr<int> planned = (*control_plane)->PlanAvailableSteps();
  ASSERT_TRUE(planned.ok()) << planned.status();
  ASSERT_GT(*planned, 0);
  EXPECT_EQ(value("dcp_scheduler_planning_seconds_count"),
            static_cast<double>(*planned));
  EXPECT_DOUBLE_EQ(*value("dcp_scheduler_planning_cpu_seconds_total"),
                   *planned * absl::ToDoubleSeconds(tick));

  // Process CPU: between this process's readings before and after.
  const double before =
      absl::ToDoubleSeconds(ProcessCpuClock().Now() - absl::UnixEpoch());
  const std::optional<double> process = value("process_cpu_seconds_total");
  const double after =
      absl::ToDoubleSeconds(ProcessCpuClock().Now() - absl::UnixEpoch());
  ASSERT_TRUE(process.has_value());
  EXPECT_GE(*process, before);
  EXPECT_LE(*process, after);
  (*control_plane)->Shutdown();
}

TEST_F(SchedulerMetricsTest, RankFailureFamiliesFollowTheStatus) {
  v1::StatusResponse status;
  status.set_live_ranks(3);
  status.set_rank_failures(2);
  status.set_holding(true);
  metrics_->SetStatusSource([&] { return status; });
  EXPECT_EQ(Value("dcp_scheduler_live_ranks"), 3.0);
  EXPECT_EQ(Value("dcp_scheduler_rank_failures_total"), 2.0);
  EXPECT_EQ(Value("dcp_scheduler_holding"), 1.0);
  status.set_holding(false);
  status.set_live_ranks(4);
  EXPECT_EQ(Value("dcp_scheduler_holding"), 0.0);
  EXPECT_EQ(Value("dcp_scheduler_live_ranks"), 4.0);
  EXPECT_THAT(registry_.RenderText(),
              HasSubstr("# TYPE dcp_scheduler_rank_failures_total counter\n"));
}

}  // namespace
}  // namespace dcp
