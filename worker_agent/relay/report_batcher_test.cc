#include "worker_agent/relay/report_batcher.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace dcp {
namespace {

v1::TimingReport Report(int rank, int64_t step) {
  v1::TimingReport report;
  report.set_rank(rank);
  report.set_step(step);
  return report;
}

/// The scheduler's answer to `batch`: a result per report, in order.
v1::ReportResultBatch AnswerOf(const v1::TimingReportBatch& batch) {
  v1::ReportResultBatch results;
  for (const v1::TimingReport& report : batch.reports()) {
    v1::ReportResult* result = results.add_results();
    result->set_rank(report.rank());
    result->set_step(report.step());
  }
  return results;
}

TEST(ReportBatcherTest, WhatIsQueuedGoesAsOneBatchAndResultsGoBackToOrigins) {
  ReportBatcher batcher;
  EXPECT_FALSE(batcher.TakeBatch().has_value());
  batcher.Add(10, Report(0, 4));
  batcher.Add(11, Report(1, 4));
  batcher.Add(10, Report(0, 5));
  std::optional<v1::TimingReportBatch> first = batcher.TakeBatch();
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->reports_size(), 3);
  batcher.Add(11, Report(1, 5));
  std::optional<v1::TimingReportBatch> second = batcher.TakeBatch();
  ASSERT_EQ(second->reports_size(), 1);
  EXPECT_TRUE(batcher.awaiting());

  auto routed = batcher.Answer(AnswerOf(*first));
  ASSERT_TRUE(routed.ok()) << routed.status();
  ASSERT_EQ(routed->size(), 3u);
  EXPECT_EQ((*routed)[0].first, 10);
  EXPECT_EQ((*routed)[1].first, 11);
  EXPECT_EQ((*routed)[2].first, 10);
  EXPECT_EQ((*routed)[2].second.step(), 5);
  routed = batcher.Answer(AnswerOf(*second));
  ASSERT_TRUE(routed.ok());
  EXPECT_EQ((*routed)[0].first, 11);
  EXPECT_FALSE(batcher.awaiting());
}

TEST(ReportBatcherTest, ABatchIsAtMostTheSchedulersLimit) {
  ReportBatcher batcher;
  for (int i = 0; i < kMaxReportsPerBatch + 1; ++i)
    batcher.Add(i, Report(i, 0));
  EXPECT_EQ(batcher.TakeBatch()->reports_size(), kMaxReportsPerBatch);
  EXPECT_EQ(batcher.TakeBatch()->reports_size(), 1);
}

TEST(ReportBatcherTest, AnAnswerOfAnotherSizeIsAnError) {
  ReportBatcher batcher;
  EXPECT_EQ(batcher.Answer({}).status().code(), absl::StatusCode::kInternal);
  batcher.Add(1, Report(0, 0));
  batcher.Add(2, Report(1, 0));
  ASSERT_TRUE(batcher.TakeBatch().has_value());
  v1::ReportResultBatch refusal;
  refusal.add_results()->set_message("too many");
  auto routed = batcher.Answer(refusal);
  EXPECT_EQ(routed.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(routed.status().message().find("too many"), std::string::npos);
}

TEST(ReportBatcherTest, FailNamesEveryOriginWithAReportOutstandingOnce) {
  ReportBatcher batcher;
  batcher.Add(1, Report(0, 0));
  batcher.Add(2, Report(1, 0));
  ASSERT_TRUE(batcher.TakeBatch().has_value());
  batcher.Add(1, Report(0, 1));
  batcher.Add(3, Report(2, 0));
  EXPECT_EQ(batcher.Fail(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_FALSE(batcher.awaiting());
  EXPECT_FALSE(batcher.TakeBatch().has_value());
  EXPECT_TRUE(batcher.Fail().empty());
}

}  // namespace
}  // namespace dcp
