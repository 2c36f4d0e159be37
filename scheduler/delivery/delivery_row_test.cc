// A benchmark row whose scheduler is the real dcp-scheduler binary, a child
// process: its delivery latencies come from each step's planned_at_unix_micros.

#include "scheduler/delivery/delivery_row.h"

#include <cstdint>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/model_spec.h"
#include "gtest/gtest.h"
#include "scheduler/cli/job_config.h"

namespace dcp::plan_delivery {
namespace {

TEST(DeliveryRowTest, AChildSchedulersRowTakesLatenciesFromThePlanningTime) {
  const std::string lengths_path = "data/lengths/wikipedia.txt";
  absl::StatusOr<std::vector<int32_t>> lengths =
      LoadLengths(lengths_path, "auto", "");
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  absl::StatusOr<ModelSpec> model = BuiltinModel("llama3-8b");
  ASSERT_TRUE(model.ok()) << model.status();

  RowConfig config;
  config.agents = 16;
  config.steps = 8;
  config.warmup_steps = 2;
  config.max_time = absl::Seconds(60);
  config.lookahead_steps = 4;
  config.refit_every = 64;
  config.channels = 2;
  config.client_threads = 1;
  config.tokens_per_rank = 65536;
  config.ranks_per_stream = 8;
  config.window = 131072;
  config.scheduler_binary = "scheduler/server/dcp-scheduler";
  config.lengths_path = lengths_path;
  config.model = *model;
  config.lengths = &*lengths;

  const absl::Time before = absl::Now();
  const absl::StatusOr<RowResult> row = RunRow(config);
  const absl::Duration span = absl::Now() - before;
  ASSERT_TRUE(row.ok()) << row.status();
  const RowResult& r = *row;
  EXPECT_TRUE(r.scheduler_apart);
  EXPECT_EQ(r.errors, 0) << r.first_error;
  EXPECT_EQ(r.measured_steps, config.steps);
  EXPECT_EQ(r.incomplete_steps, 0);
  // Every measured step was planned after the agents connected (the
  // look-ahead and warm-up steps are left out), so each arrived after its
  // planning time and within the row's own span.
  EXPECT_GT(r.step_p50_ms, 0);
  EXPECT_LE(r.step_p50_ms, r.step_p99_ms);
  EXPECT_LE(r.step_p99_ms, r.step_max_ms);
  EXPECT_LT(r.step_max_ms, absl::ToDoubleMilliseconds(span));
  EXPECT_GT(r.agent_p50_ms, 0);
  EXPECT_LE(r.agent_p50_ms, r.step_max_ms);
  EXPECT_LE(r.spread_p50_ms, r.step_max_ms);
}

}  // namespace
}  // namespace dcp::plan_delivery
