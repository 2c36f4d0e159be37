#ifndef DCP_COMM_FAKE_COMMUNICATOR_H_
#define DCP_COMM_FAKE_COMMUNICATOR_H_

#include <atomic>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "comm/communicator.h"

namespace dcp {

/// Shared counters of a group of fake communicators, for tests that check
/// who aborted and destroyed what (e.g. the communicator cache).
struct FakeCommunicatorStats {
  std::atomic<int> aborts{0};
  std::atomic<int> destroyed{0};
};

/// An in-process `Communicator`: the members of a group are threads of one
/// process that exchange data through shared memory. Exact (sums are taken
/// in rank order), fast and socket-free, for tests of code that runs
/// collectives; `Abort()` wakes every member blocked in a collective.
///
/// Each member is thread-compatible like any communicator; members of one
/// group run on different threads. The group state is shared by its members
/// and lives as long as the longest-lived one.
///
///   auto members = FakeCommunicator::Group(4);
///   // thread r: members[r]->AllReduceSum(data, n);
class FakeCommunicator final : public Communicator {
 public:
  /// The `size` members of a new group; collectives wait for peers up to
  /// `timeout`, then return DEADLINE_EXCEEDED.
  static std::vector<std::unique_ptr<FakeCommunicator>> Group(
      int size, absl::Duration timeout = absl::Seconds(30),
      std::shared_ptr<FakeCommunicatorStats> stats = nullptr);

  ~FakeCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override;
  absl::Status AllToAll(const float* send, float* recv,
                        size_t count_per_peer) override;
  absl::Status AllReduceSum(float* data, size_t count) override;
  absl::Status Barrier() override;
  void Abort() override;

  /// How many times `Abort()` was called on this member.
  int abort_calls() const { return abort_calls_.load(); }

 private:
  struct SharedState;
  FakeCommunicator(std::shared_ptr<SharedState> state, int rank,
                   std::shared_ptr<FakeCommunicatorStats> stats);

  std::shared_ptr<SharedState> state_;
  const int rank_;
  std::shared_ptr<FakeCommunicatorStats> stats_;
  std::atomic<int> abort_calls_{0};
};

}  // namespace dcp

#endif  // DCP_COMM_FAKE_COMMUNICATOR_H_
