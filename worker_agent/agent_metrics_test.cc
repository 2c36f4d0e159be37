#include "worker_agent/agent_metrics.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/metrics/metrics.h"
#include "common/metrics/metrics_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;
using Labels = std::vector<std::pair<std::string, std::string>>;

std::string TmpDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir == nullptr ? "/tmp" : dir;
}

AgentStats CannedStats() {
  AgentStats s;
  s.steps_received = 12;
  s.steps_delivered = 10;
  s.stale_dropped = 1;
  s.reconnects = 2;
  s.reports_sent = 9;
  s.report_fallbacks = 2;
  s.profiles_sent = 1;
  s.profile_failures = 0;
  s.cache_hits = 30;
  s.cache_misses = 3;
  s.groups_warmed = 7;
  s.group_failures = 1;
  s.groups_live = 6;
  return s;
}

StepExecution TwoTasks(double first, double second) {
  StepExecution step;
  step.tasks.resize(2);
  step.tasks[0].seconds = first;
  step.tasks[1].seconds = second;
  return step;
}

class AgentMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<AgentMetrics>> metrics =
        AgentMetrics::Create(&registry_);
    ASSERT_TRUE(metrics.ok()) << metrics.status();
    metrics_ = *std::move(metrics);
  }

  std::optional<double> Value(const std::string& name,
                              const Labels& labels = {}) {
    return FindSample(registry_.Collect(), name, labels);
  }

  MetricsRegistry registry_;
  std::unique_ptr<AgentMetrics> metrics_;
};

TEST_F(AgentMetricsTest, StatsFamiliesAreEmptyUntilASourceIsSet) {
  EXPECT_EQ(Value("dcp_agent_steps_received_total"), std::nullopt);
  EXPECT_EQ(Value("dcp_agent_steps_executed_total"), 0.0);
  EXPECT_EQ(Value("dcp_agent_task_seconds_count"), 0.0);
}

TEST_F(AgentMetricsTest, ReadsTheStatsAtEveryScrape) {
  AgentStats stats = CannedStats();
  int calls = 0;
  metrics_->SetStatsSource(
      [&] {
        ++calls;
        return stats;
      },
      {3, "0123abcd", "execute"});
  const std::vector<MetricFamilySnapshot> f = registry_.Collect();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(FindSample(f, "dcp_agent_info",
                       {{"session_id", "0123abcd"}, {"mode", "execute"}}),
            1.0);
  EXPECT_EQ(FindSample(f, "dcp_agent_rank"), 3.0);
  EXPECT_EQ(FindSample(f, "dcp_agent_steps_received_total"), 12.0);
  EXPECT_EQ(FindSample(f, "dcp_agent_steps_delivered_total"), 10.0);
  EXPECT_EQ(FindSample(f, "dcp_agent_stale_steps_dropped_total"), 1.0);
  EXPECT_EQ(FindSample(f, "dcp_agent_reconnects_total"), 2.0);
  EXPECT_EQ(FindSample(f, "dcp_agent_timing_reports_sent_total"), 9.0);
  EXPECT_EQ(FindSample(f, "dcp_agent_timing_report_fallbacks_total"), 2.0);
  EXPECT_EQ(
      FindSample(f, "dcp_agent_profile_runs_total", {{"result", "reported"}}),
      1.0);
  EXPECT_EQ(
      FindSample(f, "dcp_agent_profile_runs_total", {{"result", "failed"}}),
      0.0);
  EXPECT_EQ(FindSample(f, "dcp_agent_communicator_cache_hits_total"), 30.0);
  EXPECT_EQ(FindSample(f, "dcp_agent_communicator_cache_misses_total"), 3.0);
  EXPECT_EQ(FindSample(f, "dcp_agent_communicator_groups_warmed_total"), 7.0);
  EXPECT_EQ(FindSample(f, "dcp_agent_communicator_group_failures_total"), 1.0);
  EXPECT_EQ(FindSample(f, "dcp_agent_communicator_groups"), 6.0);

  stats.cache_hits = 31;
  EXPECT_EQ(Value("dcp_agent_communicator_cache_hits_total"), 31.0);
  EXPECT_EQ(calls, 2);
}

TEST_F(AgentMetricsTest, CountsExecutedStepsAndTimesTasks) {
  metrics_->OnStepExecuted(TwoTasks(0.002, 0.3), absl::Milliseconds(400));
  metrics_->OnStepExecuted(TwoTasks(0.02, 7), absl::Seconds(8));
  EXPECT_EQ(Value("dcp_agent_steps_executed_total"), 2.0);
  EXPECT_EQ(Value("dcp_agent_tasks_executed_total"), 4.0);
  EXPECT_EQ(Value("dcp_agent_task_seconds_count"), 4.0);
  EXPECT_DOUBLE_EQ(*Value("dcp_agent_task_seconds_sum"), 7.322);
  EXPECT_EQ(Value("dcp_agent_task_seconds_bucket", {{"le", "0.0025"}}), 1.0);
  EXPECT_EQ(Value("dcp_agent_task_seconds_bucket", {{"le", "0.025"}}), 2.0);
  EXPECT_EQ(Value("dcp_agent_task_seconds_bucket", {{"le", "5"}}), 3.0);
  EXPECT_EQ(Value("dcp_agent_task_seconds_bucket", {{"le", "+Inf"}}), 4.0);
  EXPECT_EQ(Value("dcp_agent_step_seconds_count"), 2.0);
  EXPECT_DOUBLE_EQ(*Value("dcp_agent_step_seconds_sum"), 8.4);
}

TEST_F(AgentMetricsTest, PlanDeliveryClampsClockSkewToZeroAndCountsIt) {
  const absl::Time planned = absl::FromUnixSeconds(1700000000);
  metrics_->OnStepReceived(planned, planned + absl::Milliseconds(3));
  metrics_->OnStepReceived(planned, planned + absl::Seconds(2));
  // This host's clock 40 ms behind the scheduler's.
  metrics_->OnStepReceived(planned, planned - absl::Milliseconds(40));
  EXPECT_EQ(Value("dcp_agent_plan_delivery_seconds_count"), 3.0);
  EXPECT_DOUBLE_EQ(*Value("dcp_agent_plan_delivery_seconds_sum"), 2.003);
  EXPECT_EQ(Value("dcp_agent_plan_delivery_seconds_bucket", {{"le", "0.0005"}}),
            1.0);  // the skewed one, as 0
  EXPECT_EQ(Value("dcp_agent_plan_delivery_seconds_bucket", {{"le", "0.005"}}),
            2.0);
  EXPECT_EQ(Value("dcp_agent_plan_delivery_seconds_bucket", {{"le", "2.5"}}),
            3.0);
  EXPECT_EQ(Value("dcp_agent_plan_delivery_clock_skew_total"), 1.0);
}

TEST_F(AgentMetricsTest, HistogramsCommunicatorFormation) {
  metrics_->OnGroupFormed(absl::Milliseconds(30));
  metrics_->OnGroupFormed(absl::Seconds(3));
  EXPECT_EQ(Value("dcp_agent_communicator_formation_seconds_count"), 2.0);
  EXPECT_DOUBLE_EQ(*Value("dcp_agent_communicator_formation_seconds_sum"),
                   3.03);
  EXPECT_EQ(Value("dcp_agent_communicator_formation_seconds_bucket",
                  {{"le", "0.05"}}),
            1.0);
  EXPECT_EQ(
      Value("dcp_agent_communicator_formation_seconds_bucket", {{"le", "5"}}),
      2.0);
}

TEST_F(AgentMetricsTest, BuildInfoNamesTheVersionAndCommit) {
  MetricsRegistry registry;
  ASSERT_TRUE(AgentMetrics::Create(&registry, {"1.2.3", "abc123"}).ok());
  EXPECT_EQ(FindSample(registry.Collect(), "dcp_agent_build_info",
                       {{"version", "1.2.3"}, {"commit", "abc123"}}),
            1.0);
  EXPECT_EQ(Value("dcp_agent_build_info",
                  {{"version", kDcpVersion}, {"commit", "unknown"}}),
            1.0);
}

TEST_F(AgentMetricsTest, RegistersOncePerRegistry) {
  EXPECT_EQ(AgentMetrics::Create(&registry_).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(AgentMetrics::Create(nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(AgentMetricsTest, PromtoolAcceptsTheAgentMetrics) {
  const AgentStats stats = CannedStats();
  metrics_->SetStatsSource([&] { return stats; }, {0, "s", "serve"});
  metrics_->OnStepExecuted(TwoTasks(0.01, 0.02), absl::Milliseconds(40));
  const absl::Time planned = absl::FromUnixSeconds(1700000000);
  metrics_->OnStepReceived(planned, planned + absl::Milliseconds(2));
  metrics_->OnStepReceived(planned, planned - absl::Milliseconds(2));
  metrics_->OnGroupFormed(absl::Milliseconds(12));
  const std::string text = registry_.RenderText();
  EXPECT_THAT(text, HasSubstr("# TYPE dcp_agent_task_seconds histogram\n"));
  absl::StatusOr<PromtoolResult> result =
      RunPromtoolCheckMetrics(text, TmpDir());
  if (absl::IsNotFound(result.status())) {
    GTEST_SKIP() << result.status().message();
  }
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0) << result->output << "\n" << text;
  EXPECT_EQ(result->output, "") << text;
}

}  // namespace
}  // namespace dcp
