#ifndef DCP_COMM_GLOO_COMMUNICATOR_H_
#define DCP_COMM_GLOO_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/comm_key.h"
#include "comm/rendezvous_store.h"

namespace dcp {

/// Builds CPU communicators on Gloo over TCP: the path every collective takes
/// in tests and on machines without GPUs, and the reference the NCCL path is
/// checked against.
///
/// A group forms by a full mesh: each member publishes the addresses of its
/// TCP pairs under `<prefix>gloo/<rank>` in the rendezvous store, reads the
/// others' and connects. Gloo's exceptions never leave this library: they
/// come back as DEADLINE_EXCEEDED (a peer did not show up or answer in time)
/// or UNAVAILABLE (a connection failed or was closed).
///
/// The communicators built are thread-compatible; `Abort()` closes every TCP
/// pair, which fails the peers' pending collectives at once (this member's own
/// in-flight collective, if any, returns when its timeout passes).
///
///   InMemoryRendezvousStore store;
///   // On each of the threads/processes of ranks 4, 5, 6, 7:
///   ASSIGN_OR_RETURN(CommKey key, CommKey::Make({4, 5, 6, 7}, epoch));
///   ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
///                    GlooCommunicator::Create(key, my_rank, "job/e7/g3/",
///                                             &store, {}));
///   RETURN_IF_ERROR(comm->AllReduceSum(grad.data(), grad.size()));
class GlooCommunicator {
 public:
  struct Options {
    /// Address this member listens on and advertises to its peers; the
    /// loopback default suits tests and single-node runs.
    std::string hostname = "127.0.0.1";
    /// Bound on each collective, and on forming the group (waiting for
    /// every peer's address and connecting) unless `form_timeout` is set.
    absl::Duration timeout = absl::Seconds(30);
    /// Bound on forming the group; zero: `timeout`. Longer where the
    /// members may arrive far apart, as after a peer failed: each survivor
    /// comes when its own wait on the dead peer ends.
    absl::Duration form_timeout = absl::ZeroDuration();
  };

  /// Forms the group `key` as the member with global rank `my_global_rank`,
  /// meeting the other members under `prefix` in `store` (not owned; used only
  /// during this call). Blocks until every member has called Create, or the
  /// timeout. `prefix` must be new for every formation of a group (see
  /// RendezvousStoreInterface). INVALID_ARGUMENT for a malformed key, a rank
  /// outside it, a null store, a non-positive timeout or a negative
  /// form_timeout.
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(
      const CommKey& key, int my_global_rank, const std::string& prefix,
      RendezvousStoreInterface* store, const Options& options);
};

}  // namespace dcp

#endif  // DCP_COMM_GLOO_COMMUNICATOR_H_
