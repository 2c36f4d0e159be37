// Runs on a machine with a GPU and a --config=cuda build; skips otherwise.
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/comm_key.h"
#include "comm/communicator_cache.h"
#include "comm/nccl_communicator.h"
#include "comm/nccl_world_communicator.h"
#include "comm/rendezvous_store.h"
#include "comm/split_group_former.h"
#include "common/clock.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

// Device buffer of floats, copied to and from host vectors.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    EXPECT_EQ(cudaMalloc(&data_, std::max<size_t>(1, n) * sizeof(float)),
              cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  float* get() { return data_; }
  void Load(const std::vector<float>& host) {
    ASSERT_EQ(host.size(), n_);
    ASSERT_EQ(cudaMemcpy(data_, host.data(), n_ * sizeof(float),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<float> Read() const {
    std::vector<float> host(n_);
    EXPECT_EQ(cudaMemcpy(host.data(), data_, n_ * sizeof(float),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

 private:
  size_t n_;
  float* data_ = nullptr;
};

NcclCommunicator::Options OnDevice(int device, absl::Duration timeout) {
  NcclCommunicator::Options options;
  options.device = device;
  options.timeout = timeout;
  return options;
}

class NcclCommunicatorGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = DeviceCount();
    if (devices_ == 0) GTEST_SKIP() << "no CUDA device";
  }
  int devices_ = 0;
};

TEST_F(NcclCommunicatorGpuTest, GroupOfOneRunsEveryCollective) {
  InMemoryRendezvousStore store;
  absl::StatusOr<CommKey> key = CommKey::Make({5}, 0);
  ASSERT_TRUE(key.ok());
  auto comm = NcclCommunicator::Create(*key, 5, "one/", &store,
                                       OnDevice(0, absl::Seconds(60)));
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->rank(), 0);
  EXPECT_EQ((*comm)->size(), 1);

  DeviceBuffer data(3), send(3), recv(3);
  data.Load({1, 2, 3});
  ASSERT_TRUE((*comm)->AllReduceSum(data.get(), 3).ok());
  EXPECT_EQ(data.Read(), (std::vector<float>{1, 2, 3}));
  send.Load({4, 5, 6});
  ASSERT_TRUE((*comm)->AllToAll(send.get(), recv.get(), 3).ok());
  EXPECT_EQ(recv.Read(), (std::vector<float>{4, 5, 6}));
  ASSERT_TRUE((*comm)->Barrier().ok());

  (*comm)->Abort();
  (*comm)->Abort();
  EXPECT_EQ((*comm)->Barrier().code(), absl::StatusCode::kAborted);
}  // The destructor of an aborted communicator frees only its stream.

TEST_F(NcclCommunicatorGpuTest, MissingPeerTimesOutInsteadOfHanging) {
  // Rank 1 never shows up: rank 0 publishes the id, starts ncclCommInitRank
  // and must give up (abort) at the timeout.
  InMemoryRendezvousStore store;
  absl::StatusOr<CommKey> key = CommKey::Make({0, 1}, 0);
  ASSERT_TRUE(key.ok());
  const absl::Time start = absl::Now();
  absl::Status status = NcclCommunicator::Create(*key, 0, "lonely/", &store,
                                                 OnDevice(0, absl::Seconds(3)))
                            .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));

  // A member waiting for a leader that never publishes times out in the store.
  absl::Status waiting =
      NcclCommunicator::Create(*key, 1, "leaderless/", &store,
                               OnDevice(0, absl::Seconds(1)))
          .status();
  EXPECT_EQ(waiting.code(), absl::StatusCode::kDeadlineExceeded) << waiting;
}

// One rank per GPU, as threads of this process.
TEST_F(NcclCommunicatorGpuTest, MultiGpuCollectivesAndSplit) {
  if (devices_ < 2) GTEST_SKIP() << "needs 2 GPUs, found " << devices_;
  const int p = std::min(devices_, 4);
  std::vector<int> ranks;
  for (int r = 0; r < p; ++r) ranks.push_back(r);
  absl::StatusOr<CommKey> key = CommKey::Make(ranks, 0);
  ASSERT_TRUE(key.ok());
  InMemoryRendezvousStore store;
  constexpr size_t kCount = 1000;
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      auto world = NcclCommunicator::Create(*key, r, "world/", &store,
                                            OnDevice(r, absl::Seconds(60)));
      ASSERT_TRUE(world.ok()) << world.status();

      DeviceBuffer data(kCount);
      std::vector<float> host(kCount);
      for (size_t i = 0; i < kCount; ++i) host[i] = (r + 1) * (i % 5);
      data.Load(host);
      ASSERT_TRUE((*world)->AllReduceSum(data.get(), kCount).ok());
      const std::vector<float> sum = data.Read();
      for (size_t i = 0; i < kCount; ++i) {
        ASSERT_EQ(sum[i], p * (p + 1) / 2.0f * (i % 5));
      }

      DeviceBuffer send(kCount * p), recv(kCount * p);
      std::vector<float> blocks(kCount * p);
      for (int to = 0; to < p; ++to) {
        for (size_t i = 0; i < kCount; ++i) {
          blocks[to * kCount + i] = 1000.0f * r + to + i % 3;
        }
      }
      send.Load(blocks);
      ASSERT_TRUE((*world)->AllToAll(send.get(), recv.get(), kCount).ok());
      const std::vector<float> got = recv.Read();
      for (int from = 0; from < p; ++from) {
        for (size_t i = 0; i < kCount; ++i) {
          ASSERT_EQ(got[from * kCount + i], 1000.0f * from + r + i % 3);
        }
      }

      // Even and odd ranks split into two groups, ordered by world rank.
      auto half = NcclCommunicator::Split(**world, r % 2, r,
                                          OnDevice(r, absl::Seconds(60)));
      ASSERT_TRUE(half.ok()) << half.status();
      ASSERT_NE(*half, nullptr);
      EXPECT_EQ((*half)->size(), (p - r % 2 + 1) / 2);
      EXPECT_EQ((*half)->rank(), r / 2);
      ASSERT_TRUE((*half)->Barrier().ok());
      ASSERT_TRUE((*world)->Barrier().ok());
    });
  }
  for (std::thread& t : threads) t.join();
}

// A world of one formed the way the agent forms its NCCL groups: the
// epoch's world communicator through the rendezvous store, the step's
// group exchanged (host all-reduces through the device) and split off it,
// taken by a CommunicatorCache; then collectives on device memory.
TEST_F(NcclCommunicatorGpuTest, AWorldOfOneSplitLikeTheAgentsRunsCollectives) {
  InMemoryRendezvousStore store;
  SplitGroupFormer::Options options;
  options.rank = 0;
  options.world_size = 1;
  options.take_timeout = absl::Seconds(60);
  options.make_world = [&store](int64_t epoch, const std::vector<int>& members)
      -> absl::StatusOr<std::unique_ptr<WorldCommunicator>> {
    absl::StatusOr<CommKey> world = CommKey::Make(members, epoch);
    if (!world.ok()) return world.status();
    return NcclWorldCommunicator::Create(*world, 0,
                                         absl::StrCat("s/e", epoch, "/world/"),
                                         &store,
                                         OnDevice(0, absl::Seconds(60)));
  };
  absl::StatusOr<std::unique_ptr<SplitGroupFormer>> former =
      SplitGroupFormer::Create(std::move(options));
  ASSERT_TRUE(former.ok()) << former.status();
  CommunicatorCache cache([&former](const CommKey& key, const std::string&) {
    return (*former)->Take(key);
  });
  absl::StatusOr<CommKey> key = CommKey::Make({0}, 0);
  ASSERT_TRUE(key.ok());
  ASSERT_TRUE(cache.Warm({CommGroupSpec{*key, "s/e0/g0"}}).ok());
  (*former)->AddStep(/*epoch=*/0, /*step=*/0, {{0}});
  absl::StatusOr<Communicator*> comm = cache.Get(*key, "s/e0/g0");
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->rank(), 0);
  EXPECT_EQ((*comm)->size(), 1);
  EXPECT_EQ((*former)->stats().worlds, 1);
  EXPECT_EQ((*former)->stats().splits, 1);

  constexpr size_t kCount = 1000;
  DeviceBuffer data(kCount), send(kCount), recv(kCount);
  std::vector<float> host(kCount);
  for (size_t i = 0; i < kCount; ++i) host[i] = 0.5f * i;
  data.Load(host);
  ASSERT_TRUE((*comm)->AllReduceSum(data.get(), kCount).ok());
  EXPECT_EQ(data.Read(), host);
  for (size_t i = 0; i < kCount; ++i) host[i] = 7.0f - i;
  send.Load(host);
  ASSERT_TRUE((*comm)->AllToAll(send.get(), recv.get(), kCount).ok());
  EXPECT_EQ(recv.Read(), host);
  ASSERT_TRUE((*comm)->Barrier().ok());
}

// Holds a stream back until the gate opens (a host function ahead of
// everything enqueued after it).
void CUDART_CB WaitAtGate(void* gate) {
  static_cast<absl::Notification*>(gate)->WaitForNotification();
}

// A collective that cannot complete is aborted at its timeout. With one GPU
// no peer can hold it back (NCCL does not take one device twice in a
// group), but its stream can: the communicator runs on a stream lent to it
// that waits at a gate. Time is a FakeClock's: the test steps it past the
// timeout once the collective is waiting, then opens the gate (the abort
// may wait for the stream).
TEST_F(NcclCommunicatorGpuTest, ACollectiveThatCannotCompleteIsAbortedInTime) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  FakeClock clock;
  NcclCommunicator::Options options = OnDevice(0, absl::Hours(1));
  options.clock = &clock;
  options.spin = absl::ZeroDuration();
  options.stream = stream;
  InMemoryRendezvousStore store;
  absl::StatusOr<CommKey> key = CommKey::Make({0}, 0);
  ASSERT_TRUE(key.ok());
  // Forming polls on the fake clock too: step it while it does.
  absl::Notification formed;
  std::thread pump([&] {
    while (!formed.HasBeenNotified()) {
      if (clock.AwaitSleepers(1, absl::Milliseconds(10))) {
        clock.Advance(options.poll_interval);
      }
    }
  });
  auto comm = NcclCommunicator::Create(*key, 0, "held/", &store, options);
  formed.Notify();
  pump.join();
  ASSERT_TRUE(comm.ok()) << comm.status();

  // Allocated before the stream is held: an allocation may wait for it.
  DeviceBuffer data(16);
  absl::Notification gate;
  ASSERT_EQ(cudaLaunchHostFunc(stream, WaitAtGate, &gate), cudaSuccess);
  const absl::Time start = clock.Now();
  absl::Status status = absl::UnknownError("not run");
  std::thread collective(
      [&] { status = (*comm)->AllReduceSum(data.get(), 16); });
  const bool waiting = clock.AwaitSleepers(1, absl::Seconds(60));
  if (waiting) clock.Advance(options.timeout);
  gate.Notify();
  collective.join();
  ASSERT_TRUE(waiting) << "the collective never waited: " << status;
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_GE(clock.Now() - start, options.timeout);
  EXPECT_EQ((*comm)->Barrier().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  comm->reset();
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  // The device is still usable.
  DeviceBuffer after(4);
  after.Load({1, 2, 3, 4});
  EXPECT_EQ(after.Read(), (std::vector<float>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace dcp
