#ifndef DCP_COMM_FAKE_WORLD_COMMUNICATOR_H_
#define DCP_COMM_FAKE_WORLD_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/fake_communicator.h"
#include "comm/world_communicator.h"

namespace dcp {

/// An in-process world whose members are threads of one process, with
/// `Split` done in memory: what tests use to run `SplitGroupFormer` (and
/// the agent's NCCL path) on the CPU. The groups it splits off are
/// `FakeCommunicator`s (host memory). Like NCCL, a split is a collective of
/// every member; a member that never comes makes the others' call return
/// DEADLINE_EXCEEDED after `timeout`, and `Abort` of any member fails every
/// member's pending and later calls.
///
/// Members of different ranks may be taken on different threads; each
/// member is thread-compatible.
///
///   auto world = FakeWorld::Make(4);
///   // thread r: auto me = world->Member(r); me->Split(r % 2, r);
class FakeWorld : public std::enable_shared_from_this<FakeWorld> {
 public:
  /// A world of `size` members; every collective waits up to `timeout`.
  static std::shared_ptr<FakeWorld> Make(
      int size, absl::Duration timeout = absl::Seconds(30),
      std::shared_ptr<FakeCommunicatorStats> stats = nullptr);

  /// The member of rank `rank`; each rank is handed out once (null after).
  std::unique_ptr<WorldCommunicator> Member(int rank);

  int size() const { return static_cast<int>(members_.size()); }
  /// Splits completed (counted once per collective call, not per member).
  int splits() const { return splits_.load(); }
  /// Host all-reduces completed (likewise).
  int all_reduces() const { return all_reduces_.load(); }
  /// Members whose `Abort` was called (each counted once), as opposed to
  /// destroyed without it.
  int aborted() const { return aborted_.load(); }

 private:
  class MemberImpl;
  FakeWorld(int size, absl::Duration timeout,
            std::shared_ptr<FakeCommunicatorStats> stats);

  const absl::Duration timeout_;
  const std::shared_ptr<FakeCommunicatorStats> stats_;
  // The collectives underneath: all-reduce, and barriers around a split.
  std::vector<std::unique_ptr<FakeCommunicator>> members_;
  // Written by member r only, between barriers; read by all after one.
  std::vector<int> colors_;
  std::vector<int> keys_;
  std::vector<std::unique_ptr<Communicator>> out_;
  std::atomic<int> splits_{0};
  std::atomic<int> all_reduces_{0};
  std::atomic<int> aborted_{0};
};

/// One `FakeWorld` per epoch for the ranks of one job run as threads: what
/// tests plug in as the world factory of several `SplitGroupFormer`s (or
/// agents, `AgentOptions::make_world`). An epoch's world holds every rank
/// of the job, or the members its first `Member` call names (a shrunk
/// epoch's), numbered densely like NCCL's. Thread-safe.
///
///   FakeWorlds worlds(4);
///   // rank r's factory:
///   //   [&](int64_t e, const std::vector<int>& members) {
///   //     return worlds.Member(e, members, r); }
class FakeWorlds {
 public:
  explicit FakeWorlds(int size, absl::Duration timeout = absl::Seconds(30))
      : size_(size), timeout_(timeout) {}

  /// Global rank `rank`'s member of the world of `epoch` over every rank
  /// of the job; INTERNAL when it was taken already or `rank` is outside
  /// the world.
  absl::StatusOr<std::unique_ptr<WorldCommunicator>> Member(int64_t epoch,
                                                            int rank);
  /// The same over `members` (ascending global ranks): the member of world
  /// rank i is `members[i]`. INTERNAL also when `rank` is not among them
  /// or another member named a world of another size.
  absl::StatusOr<std::unique_ptr<WorldCommunicator>> Member(
      int64_t epoch, const std::vector<int>& members, int rank);

  /// The world of `epoch` (made on first use, of every rank of the job).
  std::shared_ptr<FakeWorld> World(int64_t epoch);

 private:
  const int size_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  std::map<int64_t, std::shared_ptr<FakeWorld>> worlds_ ABSL_GUARDED_BY(mu_);

  /// The world of `epoch`, made of `size` members on first use.
  std::shared_ptr<FakeWorld> WorldOfSize(int64_t epoch, int size);
};

}  // namespace dcp

#endif  // DCP_COMM_FAKE_WORLD_COMMUNICATOR_H_
