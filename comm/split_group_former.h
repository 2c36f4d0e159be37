#ifndef DCP_COMM_SPLIT_GROUP_FORMER_H_
#define DCP_COMM_SPLIT_GROUP_FORMER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/comm_key.h"
#include "comm/communicator.h"
#include "comm/world_communicator.h"
#include "common/clock.h"

namespace dcp {

/// Forms one rank's groups the way NCCL wants them formed: one world
/// communicator per epoch (through the rendezvous store, by the injected
/// factory), and every group split from it (`ncclCommSplit`), rather than a
/// rendezvous per group.
///
/// An epoch's world spans exactly its members: the ranks every step of the
/// epoch names as its world (`RankStep.world_ranks`; every rank of the job
/// when a step names none), so after a shrink the survivors form their
/// world without the failed rank. The world numbers its members densely
/// (the world of [0, 2, 3] has ranks 0, 1, 2); groups keep their global
/// ranks in keys and are mapped to world indices for the exchange and the
/// splits (comm/split_plan.h).
///
/// A split is a collective of the whole world, but a rank's plan names only
/// the groups it is in, and ranks run steps apart. So every rank hands in
/// every step it receives, in order (`AddStep`, with its groups of the
/// step, empty when it has none), and the former's thread, on every member
/// alike: forms the world when a step of a new epoch comes (and splits the
/// data-parallel group of all members off it, in a world of two or more);
/// then, for each step, exchanges the groups not split yet over two host
/// all-reduces on the world (comm/split_plan.h) and runs one split per
/// round of disjoint new groups. A group is split once per epoch; its
/// communicator waits in the former until `Take` hands it over (the
/// `CommunicatorCache` factory of the agent's NCCL path).
///
/// The world of the epoch before is destroyed (finalized) when the new
/// epoch has the same members, and aborted when it held a rank the new one
/// does not: a finalize could wait for the failed rank, holding the
/// survivors' new world back. Every step of the old epoch has been
/// exchanged on this rank by then, and a shrink abandons the old epoch's
/// unfinished steps anyway.
///
/// Every collective is bounded by the world's timeout and aborts it when
/// it passes; a failure ends the epoch on this rank (its later steps split
/// nothing, `Take` of its groups returns the error), which its peers see as
/// a failed or timed-out collective of their own. A rank that joins an
/// epoch late, or skips one of its steps, makes the exchange fail on every
/// rank (FAILED_PRECONDITION naming the step) rather than hang. So does an
/// epoch whose steps disagree about its world, or that does not hold this
/// rank (FAILED_PRECONDITION on this rank, which forms no world).
///
/// The splits run on the former's thread while the caller runs collectives
/// on groups split earlier, as the agent's Gloo warm-ups always did; with
/// NCCL that relies on forming a communicator not waiting for the device
/// (NCCL's default cuMem allocations do not; with NCCL_CUMEM_ENABLE=0 an
/// allocation may wait for a collective whose peer is still splitting).
///
/// Thread-safe. The communicators taken belong to the caller and do not
/// depend on the world (they outlive it). `Cancel` (and the destructor)
/// aborts the world, so that a thread blocked in a collective of it ends;
/// a world still forming ends by its factory's timeout.
///
///   SplitGroupFormer::Options options;
///   options.rank = rank;
///   options.world_size = world;
///   options.make_world = [&](int64_t epoch, const std::vector<int>& members) {
///     return NcclWorldCommunicator::Create(
///         CommKey::Make(members, epoch).value(), rank, WorldPrefix(epoch),
///         store, nccl);
///   };
///   ASSIGN_OR_RETURN(auto former, SplitGroupFormer::Create(options));
///   former->AddStep(epoch, step, {{0, 1}}, step_world);  // as steps arrive
///   ASSIGN_OR_RETURN(std::unique_ptr<Communicator> g,
///                    former->Take(CommKey::Make({0, 1}, epoch).value()));
class SplitGroupFormer {
 public:
  /// Forms this rank's member of the world of `epoch` over `members`
  /// (ascending global ranks, this rank among them): rank i of the world
  /// is `members[i]`.
  using WorldFactory =
      std::function<absl::StatusOr<std::unique_ptr<WorldCommunicator>>(
          int64_t epoch, const std::vector<int>& members)>;

  struct Options {
    /// This rank, in [0, world_size). Required.
    int rank = -1;
    /// Ranks of the job (an epoch's world is all or some of them).
    /// Required, >= 1.
    int world_size = 0;
    /// Forms the world communicator of an epoch: a collective of its
    /// members, under a rendezvous prefix new for the epoch. Required.
    WorldFactory make_world;
    /// How long `Take` waits for a group that has not been split yet.
    absl::Duration take_timeout = absl::Seconds(120);
    /// What `Take` waits on. Not owned. Null: the system clock.
    Clock* clock = nullptr;
  };

  /// Counters since creation.
  struct Stats {
    /// World communicators formed.
    int64_t worlds = 0;
    /// Splits run (each a collective of the world).
    int64_t splits = 0;
    /// Steps handled (exchanged, or skipped after a failure).
    int64_t steps = 0;
    /// Epochs that failed on this rank.
    int64_t failures = 0;
  };

  /// INVALID_ARGUMENT for missing or out-of-range options. Starts the
  /// former's thread.
  static absl::StatusOr<std::unique_ptr<SplitGroupFormer>> Create(
      Options options);
  ~SplitGroupFormer();
  SplitGroupFormer(const SplitGroupFormer&) = delete;
  SplitGroupFormer& operator=(const SplitGroupFormer&) = delete;

  /// Queues step `step` of `epoch`, with this rank's groups in it (each
  /// sorted global ranks holding this rank; repeats and groups split
  /// earlier in the epoch are fine) and the epoch's world (`world`: its
  /// members, ascending global ranks, the step's `RankStep.world_ranks`;
  /// empty: every rank of the job). Steps must come in (epoch, step) order,
  /// each once, on every member alike; an older epoch's step is dropped.
  void AddStep(int64_t epoch, int64_t step,
               std::vector<std::vector<int>> groups,
               std::vector<int> world = {});

  /// The communicator of `key`, once split: a sequence-parallel group of a
  /// step handed in, or the data-parallel group (the world's members) of
  /// its epoch.
  /// Waits up to `take_timeout` for it. Each key is handed over once
  /// (FAILED_PRECONDITION after); the epoch's error when it failed;
  /// FAILED_PRECONDITION when the former moved to a later epoch without
  /// splitting it; DEADLINE_EXCEEDED when no step split it in time;
  /// CANCELLED after `Cancel`.
  absl::StatusOr<std::unique_ptr<Communicator>> Take(const CommKey& key);

  /// Drops the queued steps, aborts the world and the groups not taken,
  /// and fails pending and later `Take`s with CANCELLED. Idempotent.
  void Cancel();

  Stats stats() const;

 private:
  struct PendingStep {
    int64_t epoch = 0;
    int64_t step = 0;
    std::vector<std::vector<int>> groups;
    /// Ascending global ranks; empty: every rank of the job.
    std::vector<int> world;
  };

  explicit SplitGroupFormer(Options options);

  void Loop();
  void Process(const PendingStep& step);
  /// The world of `epoch` over `members`, and its data-parallel group.
  absl::Status EnterEpoch(int64_t epoch, std::vector<int> members);
  /// Tears down the world of the epoch before `members`' (see the class
  /// comment).
  void LeaveWorld(const std::vector<int>& members);
  /// The exchange of `step` and its splits.
  absl::Status SplitStep(const PendingStep& step);
  /// One split of `round` (groups as world indices).
  absl::Status SplitRound(int64_t epoch,
                          const std::vector<std::vector<int>>& round);
  /// `step.world`, or every rank of the job when it is empty.
  std::vector<int> MembersOf(const PendingStep& step) const;
  void Publish(CommKey key, std::unique_ptr<Communicator> comm)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Fail(int64_t epoch, absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  /// What `Take` answers now; nullopt to wait.
  std::optional<absl::StatusOr<std::unique_ptr<Communicator>>> TryTake(
      const CommKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  Clock* const clock_;

  mutable absl::Mutex mu_;
  std::deque<PendingStep> queue_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  /// The epoch of the world held or being formed (-1 before the first),
  /// and why it failed (OK while it works).
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Status epoch_error_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<CommKey, std::unique_ptr<Communicator>> ready_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<CommKey> taken_ ABSL_GUARDED_BY(mu_);
  /// `world_`, for Cancel to abort; null while none is usable.
  WorldCommunicator* live_world_ ABSL_GUARDED_BY(mu_) = nullptr;
  Stats stats_ ABSL_GUARDED_BY(mu_);

  // Owned by the former's thread.
  std::unique_ptr<WorldCommunicator> world_;
  /// The current epoch's members (global ranks; rank i of `world_` is
  /// members_[i]) and this rank's index among them.
  std::vector<int> members_;
  int world_rank_ = -1;
  /// Groups of the current epoch split so far: the same on every rank.
  std::set<std::vector<int>> formed_;

  std::thread thread_;
};

}  // namespace dcp

#endif  // DCP_COMM_SPLIT_GROUP_FORMER_H_
