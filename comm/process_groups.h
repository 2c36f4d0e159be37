#ifndef DCP_COMM_PROCESS_GROUPS_H_
#define DCP_COMM_PROCESS_GROUPS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <deque>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/comm_key.h"
#include "comm/rendezvous_store.h"
#include "common/clock.h"

namespace c10d {
class ProcessGroup;
}  // namespace c10d

namespace dcp {

/// A group to form: its key and the rendezvous prefix its members meet under
/// (the plan's `CommGroup.rendezvous_prefix`).
struct CommGroupSpec {
  CommKey key;
  std::string prefix;
};

/// Forms, caches and owns the c10d process groups (ProcessGroupGloo, CPU)
/// of one rank, keyed by `CommKey`: the sequence-parallel group of each
/// task a plan gives the rank, and the data-parallel group of the world.
/// Torch code runs its collectives on them like on any c10d group.
///
/// Only a group's members form it: each meets the others under the plan's
/// `CommGroup.rendezvous_prefix` (keys "<prefix>/c10d/...", through a
/// c10d::PrefixStore over a `C10dRendezvousStore`), so groups of disjoint
/// ranks form concurrently and the ranks outside a group never hear of it.
/// Members must ask for their shared groups in the same order (the plan
/// fixes it). A formation is bound as a whole by `timeout`: a member that
/// never arrives makes the others' `Get` return DEADLINE_EXCEEDED naming the
/// group, the prefix and the keys still missing. A failed formation is not
/// cached; forming the group again needs a new prefix (keys are write-once).
/// `Warm` forms groups ahead of use on a thread of the cache's own, so that
/// the first micro-step of a new layout does not pay for the rendezvous; a
/// `Get` of a group being warmed waits for it, and a failed warm-up is the
/// error of the next `Get` of that group.
///
/// Thread-safe: concurrent `Get`s of one key form it once (the others wait
/// for that formation); formations run without the lock held. Pointers
/// returned stay valid until the group is evicted or the cache destroyed;
/// a torch API that wants shared ownership can take
/// `c10::intrusive_ptr<c10d::ProcessGroup>::unsafe_reclaim_from_nonowning`
/// of one, which keeps the object alive but not usable past `AbortAll`.
///
/// Lifecycle: `AbortAll()` closes every connection of every group held (a
/// peer failed: collectives in flight on the peers fail at once, this rank's
/// own within their timeout) and refuses them from then on; `EvictBefore(e)`
/// destroys the groups of epochs before `e`; `Quiesce` drops the queued
/// warm-ups and waits for the formations under way; the destructor waits for
/// the warm-up under way, then aborts and destroys every group. No `Get` may
/// be in flight when it runs.
///
///   ProcessGroups::Options options;
///   options.rank = my_rank;
///   ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroups> groups,
///                    ProcessGroups::Create(&store, options));
///   ASSIGN_OR_RETURN(CommKey key, CommKey::Make(task.group_ranks, epoch));
///   ASSIGN_OR_RETURN(c10d::ProcessGroup* sp,
///                    groups->Get(key, task.rendezvous_prefix));
///   sp->allreduce(tensors)->wait();
class ProcessGroups {
 public:
  struct Options {
    /// This process's global rank. Required (>= 0).
    int rank = -1;
    /// Address this rank's Gloo device listens on and advertises; the
    /// loopback default suits tests and single-node runs.
    std::string hostname = "127.0.0.1";
    /// Bound on forming a group and on each of its collectives
    /// (ProcessGroupGloo's timeout). Positive.
    absl::Duration timeout = absl::Seconds(60);
    /// `timeout` of the data-parallel groups (`DataParallel`): forming
    /// one and each of its collectives; zero: `timeout`. Longer than
    /// `timeout` where members may arrive late: the survivors of a failed
    /// peer reach the new world's group each when its own waits on the
    /// dead peer ended (a task group's formation and connection, up to
    /// `timeout` each; a dead peer's connections fail at once).
    absl::Duration dp_timeout = absl::ZeroDuration();
    /// The timeout of group `key` (forming it and each collective), where
    /// it depends on more than the purpose; empty: `timeout` and
    /// `dp_timeout`. dcp-agent gives the groups of a later epoch than the
    /// one it registered in longer (AgentOptions::world_timeout).
    std::function<absl::Duration(const CommKey& key)> timeout_of;
    /// Worker threads of each ProcessGroupGloo. At least 1.
    int threads = 2;
    /// What formation deadlines are measured on; null: the system clock.
    /// Not owned.
    Clock* clock = nullptr;
    /// Have `Create` ignore SIGPIPE process-wide if its disposition is still
    /// the default. Gloo writes to its sockets without MSG_NOSIGNAL and
    /// relies on the signal being ignored (CPython ignores it at start-up);
    /// in a C++ process a peer that aborted or died would otherwise kill
    /// this one with SIGPIPE instead of failing its collectives. A handler
    /// the process installed itself is left alone.
    bool ignore_sigpipe = true;
    /// Called after each group formed, with how long its formation took
    /// on `clock` (the rendezvous and the Gloo connections), on the thread
    /// that formed it, without locks held; not for failed formations. Must
    /// be thread-safe and quick (dcp-agent's formation histogram).
    std::function<void(absl::Duration)> on_formed;
  };

  /// A cache for `options.rank` whose groups meet through `store` (not
  /// owned; it must outlive the cache). INVALID_ARGUMENT for bad options or
  /// a null store; UNAVAILABLE when the Gloo device cannot be created on
  /// `hostname`.
  static absl::StatusOr<std::unique_ptr<ProcessGroups>> Create(
      RendezvousStoreInterface* store, Options options);

  ~ProcessGroups();
  ProcessGroups(const ProcessGroups&) = delete;
  ProcessGroups& operator=(const ProcessGroups&) = delete;

  /// The group `key`, formed under `prefix` on first use; blocks until
  /// every member has asked for it, or the timeout. INVALID_ARGUMENT for a
  /// malformed key, a key this rank is not in, or an empty prefix;
  /// FAILED_PRECONDITION for an evicted epoch; ABORTED after `AbortAll`;
  /// DEADLINE_EXCEEDED (a member did not arrive) or UNAVAILABLE (a
  /// connection failed) from the formation, naming the group.
  absl::StatusOr<c10d::ProcessGroup*> Get(const CommKey& key,
                                          const std::string& prefix);

  /// The groups of one member of a hybrid task group (ring_spec.md): `key`
  /// has p members and Ulysses degree `ulysses` u, c = p / u. Member m (its
  /// index in key.ranks) is ring position j = m / u, Ulysses index i = m % u;
  /// its Ulysses subgroup is members {j u .. j u + u - 1} (rank i), formed
  /// under "<prefix>/h<u>/u<j>", and its ring is members {i, u + i, ...}
  /// (rank j), formed under "<prefix>/h<u>/r<i>"; the subgroup first, then
  /// the ring. The names carry u, so tasks of one prefix may differ in their
  /// degree. Each is formed once and cached by that name (and epoch, for
  /// EvictBefore); null where its size would be 1. The whole group of `key`
  /// is not formed. INVALID_ARGUMENT as for Get and when u does not divide p
  /// (naming both); the formation errors of Get otherwise.
  struct HybridGroups {
    c10d::ProcessGroup* ulysses = nullptr;
    c10d::ProcessGroup* ring = nullptr;
  };
  absl::StatusOr<HybridGroups> Hybrid(const CommKey& key, int ulysses,
                                      const std::string& prefix);

  /// The data-parallel group of a world of `world_size` ranks in `epoch`
  /// (purpose kDataParallel: never taken for a sequence-parallel group of
  /// the same ranks), formed under `prefix`.
  absl::StatusOr<c10d::ProcessGroup*> DataParallel(int world_size,
                                                   int64_t epoch,
                                                   const std::string& prefix);
  /// The same over the global ranks `ranks` (an epoch's world after a
  /// shrink: strictly ascending, this rank among them); a member's rank in
  /// the group is its index in `ranks`.
  absl::StatusOr<c10d::ProcessGroup*> DataParallel(std::vector<int> ranks,
                                                   int64_t epoch,
                                                   const std::string& prefix);

  /// Queues the formation of the groups not yet held, in order, on the
  /// cache's warm-up thread; returns at once. INVALID_ARGUMENT (and nothing
  /// queued) when any is a group `Get` would refuse; groups of evicted
  /// epochs are skipped.
  absl::Status Warm(const std::vector<CommGroupSpec>& groups);

  /// Drops the queued warm-ups and waits up to `timeout` (on the clock) for
  /// the formations under way to end, formed or failed; whether none is
  /// left. For a clean shutdown: a member that leaves while its peers still
  /// connect to it can make Gloo abort their process (its listener throws
  /// on a connection closed before it was read).
  bool Quiesce(absl::Duration timeout);

  /// Closes the connections of every group held and refuses further Gets.
  void AbortAll();

  /// Aborts and destroys the groups of epochs before `epoch` (a group whose
  /// peer died closes its connections instead of waiting on it) and refuses
  /// those epochs from now on; returns how many it destroyed. The caller
  /// must not be running collectives on them.
  int EvictBefore(int64_t epoch);

  /// Groups held (formed), and formations under way.
  int size() const;

  /// Counters since construction.
  struct Stats {
    /// Gets served by a group formed or being formed.
    int64_t hits = 0;
    /// Gets that formed their group themselves.
    int64_t misses = 0;
    /// Groups the warm-up thread formed.
    int64_t warmed = 0;
    /// Formations (by Get or Warm) that failed.
    int64_t failures = 0;
    /// Groups held now, formed or forming (`size()`).
    int64_t live = 0;
  };
  Stats stats() const;

  int rank() const { return options_.rank; }

 private:
  struct Group;
  struct Device;
  struct Entry {
    bool forming = true;
    std::unique_ptr<Group> group;  // Set once formed.
    // A warm-up's failure, for the next Get of the group; the entry holds
    // no group then.
    absl::Status failed;
  };

  // A cached group: its key, and for a hybrid subgroup the store prefix it
  // formed under (empty for a task's whole group, cached by key alone).
  using Slot = std::pair<CommKey, std::string>;

  ProcessGroups(RendezvousStoreInterface* store, Options options,
                std::unique_ptr<Device> device);

  // Get's path for `slot`, formed under the store prefix `where`; `warm`
  // for the warm-up thread's formations.
  absl::StatusOr<c10d::ProcessGroup*> GetSlot(const Slot& slot,
                                              const std::string& where,
                                              bool warm = false);

  // Claims the formation of `key` for this thread, waiting while another
  // thread forms it: the group when it is formed already; `*form` set (and
  // the entry saying so) when this thread is to form it. A warm-up waits
  // for nothing: it leaves any group already held, forming or failed alone
  // (null, `*form` unset).
  absl::StatusOr<c10d::ProcessGroup*> Claim(const Slot& slot, bool warm,
                                            bool* form)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Ends this thread's formation of `key`: keeps the group `formed`, or
  // drops the entry when the formation failed (a warm-up's failure stays
  // for the next Get) or the groups were aborted or the epoch evicted
  // meanwhile.
  absl::StatusOr<c10d::ProcessGroup*> Keep(
      const Slot& slot, absl::StatusOr<std::unique_ptr<Group>> formed,
      bool warm) ABSL_LOCKS_EXCLUDED(mu_);
  // Forms the queued warm-ups, one at a time, until the destructor.
  void WarmLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Builds the group of `key` under the store prefix `where` (no lock held).
  absl::StatusOr<std::unique_ptr<Group>> Form(const CommKey& key,
                                              const std::string& where);

  RendezvousStoreInterface* const store_;
  const Options options_;
  const std::unique_ptr<Device> device_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<Slot, Entry> entries_ ABSL_GUARDED_BY(mu_);
  int64_t min_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<CommGroupSpec> warm_queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::thread warm_thread_;  // Started by the first Warm.
};

}  // namespace dcp

#endif  // DCP_COMM_PROCESS_GROUPS_H_
