#include <string>

#include "gtest/gtest.h"
#include "proto/plan.pb.h"

namespace dcp::v1 {
namespace {

StepPlan TwoTaskPlan() {
  StepPlan plan;
  plan.set_epoch(3);
  plan.set_step(17);
  plan.add_samples(40);
  plan.add_samples(7);
  plan.add_samples(9);
  plan.set_total_tokens(4096 + 100 + 200);
  plan.set_predicted_makespan_s(1.25);

  CommGroup* group = plan.add_groups();
  group->set_id(1);
  group->add_ranks(0);
  group->add_ranks(1);

  Task* split = plan.add_tasks();
  split->add_ranks(0);
  split->add_ranks(1);
  split->add_samples(40);
  split->add_lengths(4096);
  split->add_loss_weights(4096.0 / 4396.0);
  split->set_recompute(0.25);
  split->set_group_id(1);
  split->set_task_index(0);
  split->add_micro_steps(0);
  split->add_micro_steps(0);

  Task* packed = plan.add_tasks();
  packed->add_ranks(1);
  packed->add_samples(7);
  packed->add_samples(9);
  packed->add_lengths(100);
  packed->add_lengths(200);
  packed->add_loss_weights(100.0 / 4396.0);
  packed->add_loss_weights(200.0 / 4396.0);
  packed->set_task_index(1);
  packed->add_micro_steps(1);
  return plan;
}

TEST(PlanProtoTest, StepPlanRoundTripsThroughBytes) {
  const StepPlan plan = TwoTaskPlan();
  std::string bytes;
  ASSERT_TRUE(plan.SerializeToString(&bytes));
  ASSERT_FALSE(bytes.empty());

  StepPlan parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.SerializeAsString(), bytes);
  EXPECT_EQ(parsed.DebugString(), plan.DebugString());

  EXPECT_EQ(parsed.epoch(), 3);
  EXPECT_EQ(parsed.step(), 17);
  EXPECT_EQ(parsed.samples_size(), 3);
  EXPECT_EQ(parsed.total_tokens(), 4396);
  EXPECT_DOUBLE_EQ(parsed.predicted_makespan_s(), 1.25);
  ASSERT_EQ(parsed.groups_size(), 1);
  EXPECT_EQ(parsed.groups(0).ranks_size(), 2);
  ASSERT_EQ(parsed.tasks_size(), 2);
  EXPECT_EQ(parsed.tasks(0).group_id(), 1);
  EXPECT_DOUBLE_EQ(parsed.tasks(0).recompute(), 0.25);
  EXPECT_EQ(parsed.tasks(1).lengths(1), 200);
  EXPECT_DOUBLE_EQ(parsed.tasks(1).loss_weights(0), 100.0 / 4396.0);
  EXPECT_EQ(parsed.tasks(1).micro_steps(0), 1);
}

TEST(PlanProtoTest, DefaultsMeanNoGroupAndNoPrediction) {
  StepPlan parsed;
  ASSERT_TRUE(parsed.ParseFromString(""));
  EXPECT_EQ(parsed.tasks_size(), 0);
  EXPECT_EQ(parsed.predicted_makespan_s(), 0.0);
  EXPECT_EQ(Task().group_id(), 0);
}

TEST(PlanProtoTest, GarbageDoesNotParse) {
  StepPlan parsed;
  EXPECT_FALSE(parsed.ParseFromString(std::string("\xff\xff\xff\xff", 4)));
}

TEST(PlanProtoTest, ReportsRoundTrip) {
  TimingReport report;
  report.set_epoch(1);
  report.set_step(2);
  report.set_rank(5);
  report.set_sync_seconds(0.01);
  TaskTiming* timing = report.add_tasks();
  timing->set_task_index(4);
  timing->set_micro_step(1);
  timing->set_group_size(2);
  timing->set_tokens(300);
  timing->add_sample_lengths(100);
  timing->add_sample_lengths(200);
  timing->set_seconds(0.5);
  timing->set_peak_memory_bytes(int64_t{40} << 30);

  TimingReport parsed;
  ASSERT_TRUE(parsed.ParseFromString(report.SerializeAsString()));
  EXPECT_EQ(parsed.DebugString(), report.DebugString());
  EXPECT_EQ(parsed.tasks(0).peak_memory_bytes(), int64_t{40} << 30);

  Profile profile;
  profile.set_model("llama3-8b");
  ProfileEntry* entry = profile.add_entries();
  entry->set_length(8192);
  entry->set_group_size(4);
  entry->set_recompute(1.0);
  entry->set_seconds(0.2);
  entry->set_memory_bytes(123456789);
  Profile parsed_profile;
  ASSERT_TRUE(parsed_profile.ParseFromString(profile.SerializeAsString()));
  EXPECT_EQ(parsed_profile.DebugString(), profile.DebugString());
}

}  // namespace
}  // namespace dcp::v1
