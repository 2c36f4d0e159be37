#include "examples/train_benchmark_cpu_costs.h"

#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/planner/cost_model.h"

namespace dcp::train_benchmark {
namespace {

using ::testing::HasSubstr;

// What one rank sends its peers in an all-to-all of `floats` float32 over a
// world of `world`: all but its own share.
double Sent(int64_t floats, int world) {
  return 4.0 * floats * (world - 1.0) / world;
}

// Records of a Gloo whose all-to-all takes `latency` + sent / `bytes_per_s`.
std::vector<GlooRecord> Records(int world, double bytes_per_s, double latency,
                                double all_reduce_s) {
  std::vector<GlooRecord> records;
  for (int64_t floats : {int64_t{256}, int64_t{1} << 20}) {
    records.push_back({"all_to_all", floats,
                       latency + Sent(floats, world) / bytes_per_s});
  }
  records.push_back({"all_reduce", 1000, all_reduce_s});
  return records;
}

TEST(FitGlooCostsTest, RecoversTheBandwidthAndLatencyOfTheRecords) {
  const absl::StatusOr<GlooCosts> fit =
      FitGlooCosts(Records(4, 1.5e9, 80e-6, 2e-3), 4);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->a2a_bytes_per_s / 1.5e9, 1.0, 1e-9);
  EXPECT_NEAR(fit->a2a_latency_s / 80e-6, 1.0, 1e-9);
  EXPECT_EQ(fit->all_reduce_s, 2e-3);
}

TEST(FitGlooCostsTest, RecordsThatLackACollectiveAreRefusedByName) {
  std::vector<GlooRecord> records = Records(2, 1e9, 1e-4, 1e-3);
  records.pop_back();  // The all-reduce.
  absl::Status status = FitGlooCosts(records, 2).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("all-reduce"));
  records = Records(2, 1e9, 1e-4, 1e-3);
  records.erase(records.begin());  // One all-to-all size left.
  status = FitGlooCosts(records, 2).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("two sizes"));
}

TEST(FitGlooCostsTest, ALargerAllToAllThatWasNotSlowerIsNoise) {
  std::vector<GlooRecord> records = Records(2, 1e9, 1e-4, 1e-3);
  records[1].seconds = records[0].seconds;
  const absl::Status status = FitGlooCosts(records, 2).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("noise"));
}

TEST(CpuClusterTest, AMemoryCapInTokensIsWhatTheCostModelLetsARankHold) {
  ModelSpec model;
  model.name = "test";
  model.layers = 4;
  model.hidden = 128;
  model.heads = 4;
  model.kv_heads = 2;
  model.ffn = 344;
  model.vocab = 256;
  CpuCalibration fit;
  fit.linear_s = 1e-4;
  fit.attention_s = 3e-7;
  fit.task_s = 5e-3;
  const absl::StatusOr<GlooCosts> gloo =
      FitGlooCosts(Records(2, 1e9, 1e-4, 1e-3), 2);
  ASSERT_TRUE(gloo.ok()) << gloo.status();
  const ClusterSpec capped = CpuCluster(model, 2, fit, *gloo, 512);
  const CostModel costs = CostModel::FromSpecs(capped, model, 2);
  EXPECT_NEAR(costs.MaxTokensPerGpu(0.0), 512, 1.0);
  // Recompute lowers what a token holds: more of them fit.
  EXPECT_GT(costs.MaxTokensPerGpu(1.0), 2 * 512);
  // The model's sync over the spec is the measured all-reduce.
  EXPECT_NEAR(costs.SyncSeconds() / gloo->all_reduce_s, 1.0, 1e-9);
}

}  // namespace
}  // namespace dcp::train_benchmark
