#include "worker_agent/relay/report_batcher.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace dcp {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);
constexpr absl::Duration kLinger = absl::Milliseconds(5);

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

// Without open calls (none is waited for) every report is due at once.
TEST(ReportBatcherTest, WhatIsQueuedGoesAsOneBatchAndResultsGoBackToOrigins) {
  ReportBatcher batcher;
  EXPECT_FALSE(batcher.TakeBatch(kT0).has_value());
  batcher.Add(10, Report(0, 4), kT0);
  batcher.Add(11, Report(1, 4), kT0);
  batcher.Add(10, Report(0, 5), kT0);
  std::optional<v1::TimingReportBatch> first = batcher.TakeBatch(kT0);
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->reports_size(), 3);
  batcher.Add(11, Report(1, 5), kT0);
  std::optional<v1::TimingReportBatch> second = batcher.TakeBatch(kT0);
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
    batcher.Add(i, Report(i, 0), kT0);
  EXPECT_EQ(batcher.TakeBatch(kT0)->reports_size(), kMaxReportsPerBatch);
  EXPECT_EQ(batcher.TakeBatch(kT0)->reports_size(), 1);
}

TEST(ReportBatcherTest, AnAnswerOfAnotherSizeIsAnError) {
  ReportBatcher batcher;
  EXPECT_EQ(batcher.Answer({}).status().code(), absl::StatusCode::kInternal);
  batcher.Add(1, Report(0, 0), kT0);
  batcher.Add(2, Report(1, 0), kT0);
  ASSERT_TRUE(batcher.TakeBatch(kT0).has_value());
  v1::ReportResultBatch refusal;
  refusal.add_results()->set_message("too many");
  auto routed = batcher.Answer(refusal);
  EXPECT_EQ(routed.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(routed.status().message().find("too many"), std::string::npos);
}

TEST(ReportBatcherTest, FailNamesEveryOriginWithAReportOutstandingOnce) {
  ReportBatcher batcher;
  batcher.Add(1, Report(0, 0), kT0);
  batcher.Add(2, Report(1, 0), kT0);
  ASSERT_TRUE(batcher.TakeBatch(kT0).has_value());
  batcher.Add(1, Report(0, 1), kT0);
  batcher.Add(3, Report(2, 0), kT0);
  EXPECT_EQ(batcher.Fail(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_FALSE(batcher.awaiting());
  EXPECT_FALSE(batcher.TakeBatch(kT0).has_value());
  EXPECT_TRUE(batcher.Fail().empty());
}

TEST(ReportBatcherTest, TheBatchWaitsUntilEveryOpenCallHasAReport) {
  ReportBatcher batcher(kLinger);
  batcher.Open(1);
  batcher.Open(2);
  batcher.Open(3);
  EXPECT_FALSE(batcher.Due().has_value());
  batcher.Add(1, Report(0, 7), kT0);
  EXPECT_EQ(batcher.Due(), kT0 + kLinger);
  // A second report of the same call covers no other call.
  batcher.Add(1, Report(0, 8), kT0 + absl::Milliseconds(1));
  batcher.Add(3, Report(2, 7), kT0 + absl::Milliseconds(2));
  EXPECT_EQ(batcher.Due(), kT0 + kLinger);
  EXPECT_FALSE(batcher.TakeBatch(kT0 + absl::Milliseconds(4)).has_value());
  batcher.Add(2, Report(1, 7), kT0 + absl::Milliseconds(3));
  EXPECT_EQ(batcher.Due(), absl::InfinitePast());
  std::optional<v1::TimingReportBatch> batch =
      batcher.TakeBatch(kT0 + absl::Milliseconds(3));
  ASSERT_TRUE(batch.has_value());
  ASSERT_EQ(batch->reports_size(), 4);
  EXPECT_EQ(batch->reports(3).rank(), 1);
  EXPECT_FALSE(batcher.Due().has_value());

  // The next step starts from none: call 2's report alone waits again.
  batcher.Add(2, Report(1, 8), kT0 + absl::Milliseconds(10));
  EXPECT_EQ(batcher.Due(), kT0 + absl::Milliseconds(10) + kLinger);
}

TEST(ReportBatcherTest, ALaggingCallHoldsTheOthersForTheLingerAtMost) {
  ReportBatcher batcher(kLinger);
  batcher.Open(1);
  batcher.Open(2);
  batcher.Add(1, Report(0, 7), kT0);
  EXPECT_FALSE(
      batcher.TakeBatch(kT0 + kLinger - absl::Nanoseconds(1)).has_value());
  std::optional<v1::TimingReportBatch> batch = batcher.TakeBatch(kT0 + kLinger);
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->reports_size(), 1);
  // Its report of the step, when it comes, goes at once: call 1's went in
  // the batch before.
  batcher.Add(2, Report(1, 7), kT0 + absl::Milliseconds(6));
  EXPECT_EQ(batcher.Due(), absl::InfinitePast());
  ASSERT_TRUE(batcher.TakeBatch(kT0 + absl::Milliseconds(6)).has_value());
  // The next step waits for both again.
  batcher.Add(2, Report(1, 8), kT0 + absl::Milliseconds(7));
  EXPECT_EQ(batcher.Due(), kT0 + absl::Milliseconds(7) + kLinger);
}

TEST(ReportBatcherTest, TheEarliestQueuedStepIsTheOneWaitedFor) {
  ReportBatcher batcher(kLinger);
  batcher.Open(1);
  batcher.Open(2);
  // Call 1 is a step ahead; call 2's report of step 7 completes step 7 for
  // both, and step 8 is queued already: all of it goes.
  batcher.Add(1, Report(0, 7), kT0);
  batcher.Add(1, Report(0, 8), kT0);
  batcher.Add(2, Report(1, 7), kT0);
  EXPECT_EQ(batcher.Due(), absl::InfinitePast());
  EXPECT_EQ(batcher.TakeBatch(kT0)->reports_size(), 3);
  // A later epoch is a later step whatever its number.
  v1::TimingReport next_epoch = Report(0, 2);
  next_epoch.set_epoch(1);
  batcher.Add(1, next_epoch, kT0);
  EXPECT_EQ(batcher.Due(), kT0 + kLinger);  // Call 2 is not in epoch 1.
  next_epoch.set_rank(1);
  batcher.Add(2, next_epoch, kT0);
  EXPECT_EQ(batcher.Due(), absl::InfinitePast());
}

TEST(ReportBatcherTest, AClosedCallIsNotWaitedFor) {
  ReportBatcher batcher(kLinger);
  batcher.Open(1);
  batcher.Open(2);
  batcher.Add(2, Report(1, 7), kT0);
  batcher.Close(2);  // Its queued report stays queued.
  EXPECT_EQ(batcher.Due(), kT0 + kLinger);
  batcher.Close(1);
  EXPECT_EQ(batcher.Due(), absl::InfinitePast());
  batcher.Close(1);  // Idempotent.
  std::optional<v1::TimingReportBatch> batch = batcher.TakeBatch(kT0);
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->reports(0).rank(), 1);
}

TEST(ReportBatcherTest, AFullBatchIsDueAtOnce) {
  ReportBatcher batcher(kLinger);
  batcher.Open(1);
  batcher.Open(2);
  for (int i = 0; i < kMaxReportsPerBatch; ++i) {
    EXPECT_NE(batcher.Due(), absl::InfinitePast()) << i;
    batcher.Add(1, Report(0, i), kT0);
  }
  EXPECT_EQ(batcher.Due(), absl::InfinitePast());
  EXPECT_EQ(batcher.TakeBatch(kT0)->reports_size(), kMaxReportsPerBatch);
}

}  // namespace
}  // namespace dcp
