#include "comm/fake_communicator.h"

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace dcp {

struct FakeCommunicator::SharedState {
  SharedState(int size, absl::Duration timeout)
      : size(size), timeout(timeout), send(size), data(size) {}

  // A cyclic barrier that an abort breaks: every collective is a few phases
  // separated by `Arrive`.
  absl::Status Arrive() {
    absl::MutexLock lock(&mu);
    if (aborted) return absl::AbortedError("fake communicator aborted");
    const int64_t generation_now = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      return absl::OkStatus();
    }
    auto released = [this, generation_now]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return generation != generation_now || aborted;
    };
    if (!mu.AwaitWithTimeout(absl::Condition(&released), timeout)) {
      return absl::DeadlineExceededError(
          absl::StrCat("fake communicator: peers missing after ",
                       absl::FormatDuration(timeout)));
    }
    if (generation != generation_now) return absl::OkStatus();
    return absl::AbortedError("fake communicator aborted");
  }

  const int size;
  const absl::Duration timeout;
  absl::Mutex mu;
  int arrived ABSL_GUARDED_BY(mu) = 0;
  int64_t generation ABSL_GUARDED_BY(mu) = 0;
  bool aborted ABSL_GUARDED_BY(mu) = false;
  // Written by member r only, between barriers; read by all after one.
  std::vector<const float*> send;
  std::vector<float*> data;
};

std::vector<std::unique_ptr<FakeCommunicator>> FakeCommunicator::Group(
    int size, absl::Duration timeout,
    std::shared_ptr<FakeCommunicatorStats> stats) {
  auto state = std::make_shared<SharedState>(size, timeout);
  std::vector<std::unique_ptr<FakeCommunicator>> members;
  for (int r = 0; r < size; ++r) {
    members.push_back(std::unique_ptr<FakeCommunicator>(
        new FakeCommunicator(state, r, stats)));
  }
  return members;
}

FakeCommunicator::FakeCommunicator(std::shared_ptr<SharedState> state, int rank,
                                   std::shared_ptr<FakeCommunicatorStats> stats)
    : state_(std::move(state)), rank_(rank), stats_(std::move(stats)) {}

FakeCommunicator::~FakeCommunicator() {
  if (stats_ != nullptr) ++stats_->destroyed;
}

int FakeCommunicator::size() const { return state_->size; }

absl::Status FakeCommunicator::AllToAll(const float* send, float* recv,
                                        size_t count_per_peer) {
  state_->send[rank_] = send;
  if (absl::Status s = state_->Arrive(); !s.ok()) return s;
  for (int peer = 0; peer < state_->size; ++peer) {
    std::memcpy(recv + peer * count_per_peer,
                state_->send[peer] + rank_ * count_per_peer,
                count_per_peer * sizeof(float));
  }
  // Peers may still read `send` until everyone has copied.
  return state_->Arrive();
}

absl::Status FakeCommunicator::AllReduceSum(float* data, size_t count) {
  state_->data[rank_] = data;
  if (absl::Status s = state_->Arrive(); !s.ok()) return s;
  std::vector<float> sum(count, 0.0f);
  for (int peer = 0; peer < state_->size; ++peer) {
    for (size_t i = 0; i < count; ++i) sum[i] += state_->data[peer][i];
  }
  // Nobody overwrites its input before everyone has read it.
  if (absl::Status s = state_->Arrive(); !s.ok()) return s;
  std::memcpy(data, sum.data(), count * sizeof(float));
  return absl::OkStatus();
}

absl::Status FakeCommunicator::Barrier() { return state_->Arrive(); }

void FakeCommunicator::Abort() {
  ++abort_calls_;
  if (stats_ != nullptr) ++stats_->aborts;
  absl::MutexLock lock(&state_->mu);
  state_->aborted = true;
}

}  // namespace dcp
