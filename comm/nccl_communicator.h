#ifndef DCP_COMM_NCCL_COMMUNICATOR_H_
#define DCP_COMM_NCCL_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/comm_key.h"
#include "comm/rendezvous_store.h"
#include "common/clock.h"

namespace dcp {

/// A communicator over NCCL: the GPU path of the sequence-parallel layers.
///
/// This header is the same in every build. The implementation exists only
/// with `--config=cuda` (//third_party/cuda:cuda_enabled); otherwise `Create`
/// and `Split` return UNIMPLEMENTED ("built without CUDA") and
/// `BuiltWithCuda()` is false, so callers fall back to Gloo
/// (comm/comm_backend.h decides).
///
/// The agent and in-process clients form their groups the way
/// `SplitGroupFormer` does: one world communicator per epoch (`Create`,
/// through the scheduler's rendezvous store), and each group split from it
/// (`Split`).
///
/// RAII: the object owns its `ncclComm_t` and a CUDA stream (unless
/// `Options::stream` lends one). The destructor finalizes and destroys the
/// communicator (bounded by the timeout; it aborts instead when finalizing
/// does not end); `Abort()` calls `ncclCommAbort` once, after which the
/// destructor frees only the stream. Non-copyable, non-movable: own it
/// through `std::unique_ptr` (the CommunicatorCache does).
///
/// Communicators are nonblocking (`ncclConfig_t::blocking = 0`): every
/// operation is enqueued, then its completion is polled together with
/// `ncclCommGetAsyncError`. A collective that does not complete within the
/// timeout, or an asynchronous NCCL error, aborts the communicator and returns
/// DEADLINE_EXCEEDED / UNAVAILABLE, so a lost peer never hangs the agent.
/// Collectives are synchronous with respect to the host (they return when the
/// result is in device memory); buffers are device pointers on the
/// communicator's device. Thread-compatible; `Abort()` may be called from any
/// thread, also while another thread waits for a collective.
///
///   ASSIGN_OR_RETURN(CommKey world, CommKey::Make(all_ranks, epoch));
///   ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> comm,
///                    NcclCommunicator::Create(world, my_rank, prefix, store,
///                                             options));
///   RETURN_IF_ERROR(comm->AllReduceSum(device_grads, n));
class NcclCommunicator final : public Communicator {
 public:
  struct Options {
    /// CUDA device of this member; -1 uses the calling thread's current one.
    int device = -1;
    /// Bound on forming the group (rendezvous + init or split), on each
    /// collective and on finalizing at destruction.
    absl::Duration timeout = absl::Minutes(5);
    /// While waiting for NCCL, the host spins this long before it sleeps
    /// `poll_interval` between polls: short collectives return fast, long
    /// ones do not burn a core.
    absl::Duration spin = absl::Milliseconds(2);
    absl::Duration poll_interval = absl::Microseconds(200);
    /// The CUDA stream (`cudaStream_t`) collectives are enqueued on, not
    /// owned: a trainer's compute stream orders them after the kernels that
    /// produce their input. Null: a stream of the communicator's own.
    void* stream = nullptr;
    /// What timeouts are measured on and polls wait on. Not owned; must
    /// outlive the communicator. Null: the system clock.
    Clock* clock = nullptr;
  };

  /// Color of members that take part in a Split but join no new group.
  static constexpr int kNoColor = -1;

  /// Whether this binary was built with CUDA and NCCL.
  static bool BuiltWithCuda();

  /// The CUDA devices this process sees: 0 without CUDA, or when the
  /// runtime finds none; the runtime's error when it cannot tell (no
  /// driver, a driver too old).
  static absl::StatusOr<int> DeviceCount();

  /// Forms the group `key` as the member with global rank `my_global_rank`:
  /// the group's first member creates an NCCL unique id and publishes it
  /// under `<prefix>nccl/unique_id` in `store` (not owned; used during this
  /// call only); every member then runs ncclCommInitRankConfig. `prefix` must
  /// be new for every formation (see RendezvousStoreInterface).
  /// INVALID_ARGUMENT for a malformed key, a rank outside it, a null store or
  /// non-positive durations; DEADLINE_EXCEEDED when the group does not form
  /// in time (the half-formed communicator is aborted).
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      const CommKey& key, int my_global_rank, const std::string& prefix,
      RendezvousStoreInterface* store, const Options& options);

  /// Derives groups from `parent` with ncclCommSplit, without a rendezvous:
  /// every member of `parent` must call it (a collective); members passing
  /// the same `color` form one group, ordered by `key` (their rank in
  /// `parent` is a good key). Members passing kNoColor get a null pointer.
  /// The child uses `parent`'s device.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Split(
      NcclCommunicator& parent, int color, int key, const Options& options);

  ~NcclCommunicator() override;

  int rank() const override;
  int size() const override;
  absl::Status AllToAll(const float* send, float* recv,
                        size_t count_per_peer) override;
  absl::Status AllReduceSum(float* data, size_t count) override;
  /// `AllReduceSum` of `count` floats in host memory, through a device
  /// buffer of the communicator's: for small control data (the exchange of
  /// `SplitGroupFormer`), not for tensors.
  absl::Status AllReduceSumHost(float* data, size_t count);
  /// A one-element all-reduce: NCCL has no barrier of its own.
  absl::Status Barrier() override;
  void Abort() override;

 private:
  struct Impl;
  explicit NcclCommunicator(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace dcp

#endif  // DCP_COMM_NCCL_COMMUNICATOR_H_
