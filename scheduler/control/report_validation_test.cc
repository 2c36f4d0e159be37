#include "scheduler/control/report_validation.h"

#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/control/test_plan.h"

namespace dcp {
namespace {

using ::testing::HasSubstr;
using testing_plan::kGpusPerNode;
using testing_plan::kSecondsPerToken;
using testing_plan::kWorld;
using testing_plan::SmallPlan;
using testing_plan::TimingsOf;

class ReportValidationTest : public ::testing::Test {
 protected:
  ReportValidationTest() : plan_(SmallPlan(1)) {
    limits_.world_size = kWorld;
    limits_.gpus_per_node = kGpusPerNode;
    limits_.max_seconds = 100;
  }

  /// What the window knows when rank `rank` reports step 1 of steps
  /// [0, 3) planned, [0, 1) completed.
  KnownStep Known(int rank) const {
    KnownStep known;
    known.registered = true;
    known.epoch = 0;
    known.planned_steps = 3;
    known.completed_steps = 1;
    known.plan = &plan_;
    known.rank_tasks = TimingsOf(plan_, rank, 0).tasks_size();
    return known;
  }

  void ExpectRejected(const v1::TimingReport& report, const KnownStep& known,
                      absl::StatusCode code, const std::string& text) {
    const absl::Status s =
        ValidateTimingReport(report, known, limits_).status();
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_THAT(s.message(), HasSubstr(text));
  }

  const v1::StepPlan plan_;
  ReportLimits limits_;
};

TEST_F(ReportValidationTest, AcceptsAGoodReportAndObservesEachTaskOnce) {
  // Rank 1 runs task 0 (ranks {0,1}) and task 1 (ranks {1,2}): it observes
  // only task 1, whose first rank it is; task 0 is rank 0's to observe.
  const v1::TimingReport report = TimingsOf(plan_, 1, /*sync_seconds=*/0.25);
  absl::StatusOr<AcceptedTimings> accepted =
      ValidateTimingReport(report, Known(1), limits_);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  EXPECT_DOUBLE_EQ(accepted->busy_seconds, kSecondsPerToken * (400 + 50));
  EXPECT_DOUBLE_EQ(accepted->sync_seconds, 0.25);
  ASSERT_EQ(accepted->observations.size(), 1u);
  const TaskObservation& o = accepted->observations[0];
  EXPECT_EQ(o.group_size, 2);
  EXPECT_FALSE(o.intra_node);  // ranks 1 and 2 are on nodes 0 and 1
  EXPECT_EQ(o.lengths, (std::vector<int64_t>{50}));
  EXPECT_DOUBLE_EQ(o.seconds, kSecondsPerToken * 50);
  EXPECT_DOUBLE_EQ(o.memory_bytes, 1000.0 * 50);

  accepted = ValidateTimingReport(TimingsOf(plan_, 0, 0), Known(0), limits_);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  ASSERT_EQ(accepted->observations.size(), 1u);
  EXPECT_TRUE(accepted->observations[0].intra_node);  // ranks 0, 1: node 0
  EXPECT_EQ(accepted->observations[0].recompute, 0.5);
  EXPECT_EQ(accepted->observations[0].lengths,
            (std::vector<int64_t>{100, 300}));
}

TEST_F(ReportValidationTest, RejectsWhatDoesNotMatchWhatIsKnown) {
  const v1::TimingReport good = TimingsOf(plan_, 1, 0.1);
  v1::TimingReport r = good;
  r.set_rank(kWorld);
  ExpectRejected(r, Known(1), absl::StatusCode::kInvalidArgument,
                 "rank 4 is outside the world of 4");
  KnownStep known = Known(1);
  known.registered = false;
  ExpectRejected(good, known, absl::StatusCode::kFailedPrecondition,
                 "rank 1 has not registered");
  r = good;
  r.set_epoch(2);
  ExpectRejected(r, Known(1), absl::StatusCode::kFailedPrecondition,
                 "epoch 2 is not the current epoch 0");
  r = good;
  r.set_step(3);
  ExpectRejected(r, Known(1), absl::StatusCode::kInvalidArgument,
                 "not been planned (planned: 0..2)");
  known = Known(1);
  known.planned_steps = 0;
  ExpectRejected(good, known, absl::StatusCode::kInvalidArgument,
                 "(planned: none)");
  r.set_step(0);
  ExpectRejected(r, Known(1), absl::StatusCode::kAlreadyExists,
                 "every rank has already reported");
  known = Known(1);
  known.already_reported = true;
  ExpectRejected(good, known, absl::StatusCode::kAlreadyExists,
                 "rank 1 already reported");
  r = good;
  r.set_sync_seconds(std::numeric_limits<double>::infinity());
  ExpectRejected(r, Known(1), absl::StatusCode::kInvalidArgument,
                 "sync_seconds inf");
}

TEST_F(ReportValidationTest, RejectsBadTasks) {
  const v1::TimingReport good = TimingsOf(plan_, 1, 0);
  ASSERT_EQ(good.tasks_size(), 2);
  v1::TimingReport r = good;
  r.mutable_tasks(0)->set_task_index(3);
  ExpectRejected(r, Known(1), absl::StatusCode::kInvalidArgument,
                 "task_index 3 does not exist (the step has 3 tasks)");
  r.mutable_tasks(0)->set_task_index(2);  // rank 3's task
  ExpectRejected(r, Known(1), absl::StatusCode::kInvalidArgument,
                 "task 2 runs on ranks [3], not on rank 1");
  r = good;
  *r.mutable_tasks(1) = good.tasks(0);
  ExpectRejected(r, Known(1), absl::StatusCode::kInvalidArgument,
                 "task 0 is reported twice");
  r = good;
  r.mutable_tasks()->RemoveLast();
  ExpectRejected(r, Known(1), absl::StatusCode::kInvalidArgument,
                 "runs 2 tasks in the step but reported 1");
  for (double seconds :
       {0.0, -1.0, 101.0, std::numeric_limits<double>::quiet_NaN()}) {
    r = good;
    r.mutable_tasks(1)->set_seconds(seconds);
    ExpectRejected(r, Known(1), absl::StatusCode::kInvalidArgument,
                   "task 1: seconds");
  }
  r = good;
  r.mutable_tasks(0)->set_group_size(1);
  ExpectRejected(r, Known(1), absl::StatusCode::kInvalidArgument,
                 "group size 1 but the plan has 2");
  r = good;
  r.mutable_tasks(0)->set_tokens(399);
  ExpectRejected(r, Known(1), absl::StatusCode::kInvalidArgument,
                 "ran 399 tokens but the plan has 400");
  // Unset (0) group size and tokens are not checked.
  r = good;
  r.mutable_tasks(0)->set_group_size(0);
  r.mutable_tasks(0)->set_tokens(0);
  EXPECT_TRUE(ValidateTimingReport(r, Known(1), limits_).ok());
}

TEST_F(ReportValidationTest, RejectsSampleLengthsRecomputeAndMemoryOffPlan) {
  // Rank 0 runs task 0 alone among its tasks: samples of 100 and 300 tokens.
  const v1::TimingReport good = TimingsOf(plan_, 0, 0.25);
  v1::TimingReport r = good;
  r.mutable_tasks(0)->add_sample_lengths(100);
  r.mutable_tasks(0)->add_sample_lengths(300);
  EXPECT_TRUE(ValidateTimingReport(r, Known(0), limits_).ok());
  r.mutable_tasks(0)->set_sample_lengths(1, 299);
  ExpectRejected(r, Known(0), absl::StatusCode::kInvalidArgument,
                 "task 0: sample_lengths (2 samples) differ from the plan's "
                 "(2 samples) at sample 1");
  r.mutable_tasks(0)->set_sample_lengths(1, 300);
  r.mutable_tasks(0)->add_sample_lengths(5);
  ExpectRejected(r, Known(0), absl::StatusCode::kInvalidArgument,
                 "(3 samples) differ from the plan's (2 samples) at sample 2");
  for (double recompute :
       {-0.5, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    r = good;
    r.mutable_tasks(0)->set_recompute(recompute);
    ExpectRejected(r, Known(0), absl::StatusCode::kInvalidArgument,
                   absl::StrCat("task 0: recompute ", recompute));
  }
  r = good;
  r.mutable_tasks(0)->set_peak_memory_bytes(-1);
  ExpectRejected(r, Known(0), absl::StatusCode::kInvalidArgument,
                 "task 0: peak_memory_bytes -1 is negative");
}

TEST_F(ReportValidationTest, ProfileEntriesBecomeSingleSequenceObservations) {
  v1::ProfileReport report;
  report.set_rank(2);
  for (int p : {1, 2, 4}) {
    v1::ProfileEntry* e = report.mutable_profile()->add_entries();
    e->set_length(1024 * p);
    e->set_group_size(p);
    e->set_recompute(0.25);
    e->set_seconds(0.01 * p);
    e->set_memory_bytes(7 * p);
  }
  absl::StatusOr<std::vector<TaskObservation>> observations =
      ValidateProfileReport(report, limits_);
  ASSERT_TRUE(observations.ok()) << observations.status();
  ASSERT_EQ(observations->size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const int p = 1 << i;
    const TaskObservation& o = (*observations)[i];
    EXPECT_EQ(o.group_size, p);
    EXPECT_EQ(o.intra_node, p <= kGpusPerNode) << "p = " << p;
    EXPECT_EQ(o.lengths, (std::vector<int64_t>{1024 * p}));
    EXPECT_DOUBLE_EQ(o.seconds, 0.01 * p);
    EXPECT_DOUBLE_EQ(o.memory_bytes, 7.0 * p);
    EXPECT_EQ(o.recompute, 0.25);
  }

  auto rejected = [&](auto change, const std::string& text) {
    v1::ProfileReport bad = report;
    change(*bad.mutable_profile()->mutable_entries(1));
    const absl::Status s = ValidateProfileReport(bad, limits_).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("profile of rank 2, entry 1: " + text));
  };
  rejected([](v1::ProfileEntry& e) { e.set_length(0); }, "length 0");
  rejected([](v1::ProfileEntry& e) { e.set_group_size(5); },
           "group_size 5 is not in [1, 4]");
  rejected([](v1::ProfileEntry& e) { e.set_recompute(1.5); }, "recompute 1.5");
  rejected([](v1::ProfileEntry& e) { e.set_seconds(0); }, "seconds 0");
  rejected([](v1::ProfileEntry& e) { e.set_memory_bytes(-1); },
           "memory_bytes -1");
  report.mutable_profile()->clear_entries();
  EXPECT_THAT(ValidateProfileReport(report, limits_).status().message(),
              HasSubstr("has no entries"));
  report.set_rank(-1);
  EXPECT_EQ(ValidateProfileReport(report, limits_).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SessionTest, AnotherSessionIsAFailedPrecondition) {
  EXPECT_TRUE(CheckSession("abc", "abc").ok());
  const absl::Status s = CheckSession("old", "abc");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("'old' is not this scheduler's ('abc')"));
}

}  // namespace
}  // namespace dcp
