// Process groups formed through a real scheduler's rendezvous store: an
// in-process SchedulerServer on 127.0.0.1:0, each rank (a thread) with its
// own SchedulerRendezvousStore client, as separate processes would have.

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "comm/comm_key.h"
#include "comm/process_groups.h"
#include "comm/scheduler_rendezvous_store.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "scheduler/server/scheduler_server.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"
#include "torch/torch.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kSession[] = "trainsess";
constexpr int kWorld = 4;

class ProcessGroupsSchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SchedulerServerOptions options;
    ControlPlaneOptions& cp = options.control_plane;
    cp.lengths = std::vector<int32_t>(64, 1024);
    cp.window = 4096;
    absl::StatusOr<ModelSpec> model = BuiltinModel("llama3-8b");
    ASSERT_TRUE(model.ok()) << model.status();
    cp.model = *model;
    cp.world_size = kWorld;
    cp.tokens_per_step = 8192;
    cp.session_id = kSession;
    cp.start_planner_thread = false;  // Only the store is used.
    options.shutdown_grace = absl::Milliseconds(200);
    absl::StatusOr<std::unique_ptr<SchedulerServer>> server =
        SchedulerServer::Start(std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  std::unique_ptr<SchedulerRendezvousStore> NewClient() {
    SchedulerRendezvousStore::Options options;
    options.session_id = kSession;
    absl::StatusOr<std::unique_ptr<SchedulerRendezvousStore>> store =
        SchedulerRendezvousStore::Create(
            grpc::CreateChannel(server_->address(),
                                grpc::InsecureChannelCredentials()),
            options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  std::unique_ptr<SchedulerServer> server_;
};

absl::StatusOr<float> AllReduce(c10d::ProcessGroup* group, float value) {
  try {
    std::vector<at::Tensor> tensors = {torch::full({8}, value)};
    group->allreduce(tensors)->wait();
    return tensors[0][0].item<float>();
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  }
}

// The scheduler's prefix of a group: "<session>/e<epoch>/g<ranks>".
std::string Prefix(const std::vector<int>& ranks) {
  std::string joined;
  for (int r : ranks) absl::StrAppend(&joined, joined.empty() ? "" : "-", r);
  return absl::StrCat(kSession, "/e0/g", joined);
}

TEST_F(ProcessGroupsSchedulerTest, GroupsFormThroughTheSchedulerStore) {
  std::vector<absl::StatusOr<float>> pair_sums(kWorld, absl::UnknownError(""));
  std::vector<absl::StatusOr<float>> all_sums(kWorld, absl::UnknownError(""));
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kWorld; ++rank) {
    ranks.emplace_back([&, rank] {
      std::unique_ptr<SchedulerRendezvousStore> store = NewClient();
      if (store == nullptr) return;
      ProcessGroups::Options options;
      options.rank = rank;
      options.timeout = absl::Seconds(60);
      absl::StatusOr<std::unique_ptr<ProcessGroups>> groups =
          ProcessGroups::Create(store.get(), options);
      if (!groups.ok()) {
        pair_sums[rank] = groups.status();
        return;
      }
      const std::vector<int> pair =
          rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
      absl::StatusOr<c10d::ProcessGroup*> p =
          (*groups)->Get(*CommKey::Make(pair, 0), Prefix(pair));
      absl::StatusOr<c10d::ProcessGroup*> all =
          (*groups)->Get(*CommKey::Make({0, 1, 2, 3}, 0), Prefix({0, 1, 2, 3}));
      pair_sums[rank] = p.ok() ? AllReduce(*p, rank + 1.0f) : p.status();
      all_sums[rank] = all.ok() ? AllReduce(*all, rank + 1.0f) : all.status();
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < kWorld; ++rank) {
    SCOPED_TRACE(rank);
    ASSERT_TRUE(pair_sums[rank].ok()) << pair_sums[rank].status();
    ASSERT_TRUE(all_sums[rank].ok()) << all_sums[rank].status();
    EXPECT_EQ(*pair_sums[rank], rank < 2 ? 1.0f + 2.0f : 3.0f + 4.0f);
    EXPECT_EQ(*all_sums[rank], 1.0f + 2.0f + 3.0f + 4.0f);
  }
  // The members' keys are in the scheduler's store.
  EXPECT_GT(server_->control_plane().Status().store_keys(), 0);
}

TEST_F(ProcessGroupsSchedulerTest, MissingMemberIsADeadlineNamingTheGroup) {
  std::unique_ptr<SchedulerRendezvousStore> store = NewClient();
  ASSERT_NE(store, nullptr);
  ProcessGroups::Options options;
  options.rank = 0;
  options.timeout = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<ProcessGroups>> groups =
      ProcessGroups::Create(store.get(), options);
  ASSERT_TRUE(groups.ok()) << groups.status();
  absl::Status status =
      (*groups)->Get(*CommKey::Make({0, 3}, 0), Prefix({0, 3})).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(std::string(status.message()),
              AllOf(HasSubstr("[0,3]@0"), HasSubstr("trainsess/e0/g0-3/c10d")));
}

}  // namespace
}  // namespace dcp
