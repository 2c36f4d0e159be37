#ifndef DCP_COMM_COMMUNICATOR_CACHE_H_
#define DCP_COMM_COMMUNICATOR_CACHE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/comm_key.h"

namespace dcp {

/// A group to form: its key and the rendezvous prefix its members meet under
/// (the plan's `CommGroup.rendezvous_prefix`).
struct CommGroupSpec {
  CommKey key;
  std::string prefix;
};

/// Owns the communicators of one rank, keyed by `CommKey`, so that the
/// groups a plan uses again are formed once.
///
/// `Get` returns the cached communicator or forms it through the injected
/// factory (a rendezvous with the other members: every member must ask for
/// its groups in the same order, which the plan fixes). `Warm` forms groups
/// ahead of use, on a background thread owned by the cache, so the first
/// micro-step of a new layout does not pay for the rendezvous. A group that is
/// being formed is formed once: a `Get` for it waits for the warm-up.
///
/// Thread-safe. Pointers returned by `Get` stay valid until the entry is
/// evicted (`EvictBefore`) or the cache destroyed; the caller must not use
/// them across either. The factory runs without the cache's lock held.
///
/// Lifecycle: `EvictBefore(e)` destroys the groups of epochs before `e` and
/// refuses them from then on (stale plans); `AbortAll()` aborts every live
/// group (a peer failed: nothing may block on them any longer) and any group
/// whose formation ends after it; the destructor waits for the warm-up in
/// progress, drops the queued ones and destroys every communicator. Each
/// communicator is aborted at most once.
///
///   CommunicatorCache cache([&](const CommKey& key, const std::string& p) {
///     return GlooCommunicator::Create(key, my_rank, p, store, {});
///   });
///   RETURN_IF_ERROR(cache.Warm(next_step_groups));
///   ASSIGN_OR_RETURN(Communicator* comm, cache.Get(key, prefix));
class CommunicatorCache {
 public:
  using Factory = std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
      const CommKey& key, const std::string& prefix)>;

  struct Options {
    /// Form warmed groups on the cache's own thread (Warm returns at once).
    /// When false, Warm forms them on the calling thread before returning.
    bool warm_in_background = true;
  };

  /// Counters since construction.
  struct Stats {
    /// Gets served by an already formed (or warming) group.
    int64_t hits = 0;
    /// Gets that formed their group themselves.
    int64_t misses = 0;
    /// Groups formed by Warm.
    int64_t warmed = 0;
    /// Formations (by Get or Warm) that failed.
    int64_t build_failures = 0;
    /// Groups destroyed by EvictBefore.
    int64_t evicted = 0;
    /// Groups held now (formed or forming).
    int64_t live = 0;
  };

  explicit CommunicatorCache(Factory factory);
  CommunicatorCache(Factory factory, Options options);
  ~CommunicatorCache();
  CommunicatorCache(const CommunicatorCache&) = delete;
  CommunicatorCache& operator=(const CommunicatorCache&) = delete;

  /// The communicator of `key`, forming it under `prefix` on a miss.
  /// INVALID_ARGUMENT for a malformed key; FAILED_PRECONDITION for an epoch
  /// already evicted; ABORTED for a group AbortAll aborted; the factory's
  /// error when forming fails (a failed warm-up is reported by the next Get,
  /// and the Get after that forms the group again: it needs a new prefix).
  absl::StatusOr<Communicator*> Get(const CommKey& key,
                                    const std::string& prefix);

  /// Queues the formation of the groups not yet held, in order.
  /// INVALID_ARGUMENT (and nothing queued) if any key is malformed; groups of
  /// evicted epochs are skipped.
  absl::Status Warm(const std::vector<CommGroupSpec>& groups);

  /// Destroys the groups of epochs before `epoch` (those still forming are
  /// destroyed when formed) and refuses those epochs from now on. Returns the
  /// number destroyed now.
  int EvictBefore(int64_t epoch);

  /// Aborts every group held and every group whose formation is under way.
  void AbortAll();

  /// Drops the queued warm-ups and waits up to `timeout` for the formations
  /// under way to end (formed or failed). Returns whether none is under way.
  /// For a clean shutdown: a member that leaves while its peers are still
  /// connecting to it can make Gloo abort their process (its TCP listener
  /// throws on a connection closed before it was looked at).
  bool Quiesce(absl::Duration timeout);

  Stats stats() const;

 private:
  enum class State { kForming, kReady, kFailed, kAborted };
  struct Entry {
    State state = State::kForming;
    std::unique_ptr<Communicator> comm;
    absl::Status error;
  };

  // Forms `spec`, whose entry the caller made kForming, and stores the
  // result: kReady (kAborted after an AbortAll), or kFailed for a warm-up and
  // no entry for a Get, which gets the error back.
  absl::Status Form(const CommGroupSpec& spec, bool by_warm)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status CheckEpoch(const CommKey& key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WarmLoop();

  const Factory factory_;
  const Options options_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<CommKey, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::deque<CommGroupSpec> warm_queue_ ABSL_GUARDED_BY(mu_);
  int64_t min_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // Bumped by AbortAll: a formation that began before it is aborted when done.
  int64_t abort_generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::thread warm_thread_;  // Started by the first background Warm.
};

}  // namespace dcp

#endif  // DCP_COMM_COMMUNICATOR_CACHE_H_
