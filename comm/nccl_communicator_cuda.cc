// NcclCommunicator with CUDA and NCCL (--config=cuda).
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "comm/nccl_communicator.h"
#include "comm/nccl_status.h"
#include "common/cuda_status.h"
#include "common/status_macros.h"

namespace dcp {
namespace {

absl::Status CheckOptions(const NcclCommunicator::Options& options) {
  if (options.timeout <= absl::ZeroDuration() ||
      options.spin < absl::ZeroDuration() ||
      options.poll_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "NcclCommunicator: timeout and poll_interval must be > 0, spin >= 0");
  }
  return absl::OkStatus();
}

// Waits between two polls: spins first, then sleeps.
class Poller {
 public:
  explicit Poller(const NcclCommunicator::Options& options)
      : start_(absl::Now()), options_(options) {}
  void Pause() const {
    if (absl::Now() - start_ < options_.spin) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(options_.poll_interval);
    }
  }

 private:
  const absl::Time start_;
  const NcclCommunicator::Options& options_;
};

// Polls a communicator that nobody else can see yet (being initialized or
// split) until its nonblocking operation ends. On timeout or error the
// caller aborts it.
absl::Status WaitUntilReady(ncclComm_t comm, absl::Time deadline,
                            const NcclCommunicator::Options& options,
                            absl::string_view what) {
  Poller poller(options);
  while (true) {
    ncclResult_t state = ncclSuccess;
    NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(comm, &state));
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) {
      return absl::Status(NcclStatusCode(state),
                          absl::StrCat(what, ": ", ncclGetErrorString(state),
                                       " (", ncclGetLastError(comm), ")"));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " did not finish within the timeout"));
    }
    poller.Pause();
  }
}

}  // namespace

struct NcclCommunicator::Impl {
  // Wraps a communicator whose initialization has ended, with its stream and
  // scratch buffer. Aborts the communicator on failure.
  static absl::StatusOr<std::unique_ptr<Impl>> Make(ncclComm_t comm, int device,
                                                    const Options& options) {
    auto impl = std::make_unique<Impl>();
    {
      absl::MutexLock lock(&impl->mu);
      impl->comm = comm;
    }
    impl->device = device;
    impl->options = options;
    auto fail = [&impl](absl::Status status) {
      absl::MutexLock lock(&impl->mu);
      impl->AbortLocked();
      return status;
    };
    if (ncclResult_t r = ncclCommUserRank(comm, &impl->rank);
        r != ncclSuccess) {
      return fail(NcclErrorStatus(r, "ncclCommUserRank", __FILE__, __LINE__));
    }
    if (ncclResult_t r = ncclCommCount(comm, &impl->size); r != ncclSuccess) {
      return fail(NcclErrorStatus(r, "ncclCommCount", __FILE__, __LINE__));
    }
    if (cudaError_t e =
            cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking);
        e != cudaSuccess) {
      return fail(
          CudaErrorStatus(e, "cudaStreamCreateWithFlags", __FILE__, __LINE__));
    }
    if (cudaError_t e = cudaMalloc(&impl->scratch, sizeof(float));
        e != cudaSuccess) {
      return fail(CudaErrorStatus(e, "cudaMalloc", __FILE__, __LINE__));
    }
    return impl;
  }

  ~Impl() {
    if (stream != nullptr) cudaStreamDestroy(stream);
    if (scratch != nullptr) cudaFree(scratch);
  }

  // Aborts the communicator once; later calls do nothing.
  void AbortLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (aborted) return;
    aborted = true;
    ncclCommAbort(comm);
  }

  // Enqueues `ops` on the stream (under the lock, which Abort also takes),
  // then polls until the stream has run them, NCCL reports an error, or the
  // timeout passes; the last two abort the communicator.
  template <typename Ops>
  absl::Status Run(absl::string_view what, Ops ops) {
    const absl::Time deadline = absl::Now() + options.timeout;
    {
      absl::MutexLock lock(&mu);
      if (aborted) {
        return absl::AbortedError(
            absl::StrCat(what, " on an aborted NCCL communicator"));
      }
      if (absl::Status s = ops(); !s.ok()) {
        AbortLocked();
        return s;
      }
    }
    Poller poller(options);
    while (true) {
      {
        absl::MutexLock lock(&mu);
        if (aborted) {
          return absl::AbortedError(absl::StrCat(what, " aborted"));
        }
        ncclResult_t state = ncclSuccess;
        ncclResult_t result = ncclCommGetAsyncError(comm, &state);
        if (result != ncclSuccess) state = result;
        if (state != ncclSuccess && state != ncclInProgress) {
          absl::Status error(
              NcclStatusCode(state),
              absl::StrCat(what, ": ", ncclGetErrorString(state), " (",
                           ncclGetLastError(comm), "); communicator aborted"));
          AbortLocked();
          return error;
        }
        if (state == ncclSuccess) {
          const cudaError_t done = cudaStreamQuery(stream);
          if (done == cudaSuccess) return absl::OkStatus();
          if (done != cudaErrorNotReady) {
            absl::Status error =
                CudaErrorStatus(done, "cudaStreamQuery", __FILE__, __LINE__);
            AbortLocked();
            return error;
          }
        }
        if (absl::Now() >= deadline) {
          AbortLocked();
          return absl::DeadlineExceededError(absl::StrCat(
              what, " did not complete within ",
              absl::FormatDuration(options.timeout),
              " (a peer is missing or stuck); communicator aborted"));
        }
      }
      poller.Pause();
    }
  }

  int rank = 0;
  int size = 0;
  int device = 0;
  Options options;
  cudaStream_t stream = nullptr;
  float* scratch = nullptr;  // One float for Barrier.

  absl::Mutex mu;
  ncclComm_t comm ABSL_GUARDED_BY(mu) = nullptr;
  bool aborted ABSL_GUARDED_BY(mu) = false;
};

bool NcclCommunicator::BuiltWithCuda() { return true; }

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const CommKey& key, int my_global_rank, const std::string& prefix,
    RendezvousStoreInterface* store, const Options& options) {
  ASSIGN_OR_RETURN(const int rank,
                   key.MemberRank(my_global_rank, store, "NcclCommunicator"));
  RETURN_IF_ERROR(CheckOptions(options));
  const absl::Time deadline = absl::Now() + options.timeout;
  int device = options.device;
  if (device < 0) {
    CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  } else {
    CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  }

  ncclUniqueId id;
  const std::string id_key = absl::StrCat(prefix, "nccl/unique_id");
  if (rank == 0) {
    NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    RETURN_IF_ERROR(store->Set(
        id_key, absl::string_view(id.internal, sizeof(id.internal))));
  } else {
    ASSIGN_OR_RETURN(std::vector<std::string> values,
                     store->Wait({id_key}, deadline - absl::Now()));
    if (values[0].size() != sizeof(id.internal)) {
      return absl::DataLossError(absl::StrCat(
          "NCCL unique id under ", id_key, " has ", values[0].size(),
          " bytes, expected ", sizeof(id.internal)));
    }
    std::memcpy(id.internal, values[0].data(), sizeof(id.internal));
  }

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const int size = static_cast<int>(key.ranks.size());
  NCCL_RETURN_IF_ERROR(ncclCommInitRankConfig(&comm, size, id, rank, &config));
  if (absl::Status s =
          WaitUntilReady(comm, deadline, options,
                         absl::StrCat("forming NCCL group ", key.ToString(),
                                      " as rank ", my_global_rank));
      !s.ok()) {
    ncclCommAbort(comm);
    return s;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl,
                   Impl::Make(comm, device, options));
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Split(
    NcclCommunicator& parent, int color, int key, const Options& options) {
  RETURN_IF_ERROR(CheckOptions(options));
  if (color < 0 && color != kNoColor) {
    return absl::InvalidArgumentError(
        absl::StrCat("split color must be >= 0 or kNoColor, got ", color));
  }
  const absl::Time deadline = absl::Now() + options.timeout;
  Impl& p = *parent.impl_;
  CUDA_RETURN_IF_ERROR(cudaSetDevice(p.device));
  ncclComm_t child = nullptr;
  {
    absl::MutexLock lock(&p.mu);
    if (p.aborted) {
      return absl::AbortedError("Split of an aborted NCCL communicator");
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    NCCL_RETURN_IF_ERROR(
        ncclCommSplit(p.comm, color == kNoColor ? NCCL_SPLIT_NOCOLOR : color,
                      key, &child, &config));
    // The split is a collective of the parent: it must end there too.
    if (absl::Status s =
            WaitUntilReady(p.comm, deadline, options, "ncclCommSplit (parent)");
        !s.ok()) {
      p.AbortLocked();
      if (child != nullptr) ncclCommAbort(child);
      return s;
    }
  }
  if (child == nullptr) return std::unique_ptr<NcclCommunicator>();
  if (absl::Status s =
          WaitUntilReady(child, deadline, options, "ncclCommSplit");
      !s.ok()) {
    ncclCommAbort(child);
    return s;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl,
                   Impl::Make(child, p.device, options));
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(std::move(impl)));
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

NcclCommunicator::~NcclCommunicator() {
  Impl& impl = *impl_;
  cudaSetDevice(impl.device);
  absl::MutexLock lock(&impl.mu);
  if (impl.aborted) return;  // ncclCommAbort already freed the communicator.
  // Finalize flushes what is in flight, then destroy frees without blocking;
  // a finalize that does not end (a peer is gone) falls back to abort.
  const ncclResult_t finalized = ncclCommFinalize(impl.comm);
  if (finalized == ncclSuccess || finalized == ncclInProgress) {
    const absl::Status ready =
        WaitUntilReady(impl.comm, absl::Now() + impl.options.timeout,
                       impl.options, "ncclCommFinalize");
    if (ready.ok()) {
      ncclCommDestroy(impl.comm);
      return;
    }
  }
  impl.AbortLocked();
}

int NcclCommunicator::rank() const { return impl_->rank; }
int NcclCommunicator::size() const { return impl_->size; }

absl::Status NcclCommunicator::AllToAll(const float* send, float* recv,
                                        size_t count_per_peer) {
  Impl& impl = *impl_;
  CUDA_RETURN_IF_ERROR(cudaSetDevice(impl.device));
  return impl.Run("NCCL AllToAll", [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    NCCL_RETURN_IF_ERROR(ncclGroupStart());
    for (int peer = 0; peer < impl.size; ++peer) {
      const size_t offset = static_cast<size_t>(peer) * count_per_peer;
      NCCL_RETURN_IF_ERROR(ncclSend(send + offset, count_per_peer, ncclFloat,
                                    peer, impl.comm, impl.stream));
      NCCL_RETURN_IF_ERROR(ncclRecv(recv + offset, count_per_peer, ncclFloat,
                                    peer, impl.comm, impl.stream));
    }
    NCCL_RETURN_IF_ERROR(ncclGroupEnd());
    return absl::OkStatus();
  });
}

absl::Status NcclCommunicator::AllReduceSum(float* data, size_t count) {
  Impl& impl = *impl_;
  CUDA_RETURN_IF_ERROR(cudaSetDevice(impl.device));
  return impl.Run("NCCL AllReduceSum", [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    NCCL_RETURN_IF_ERROR(ncclAllReduce(data, data, count, ncclFloat, ncclSum,
                                       impl.comm, impl.stream));
    return absl::OkStatus();
  });
}

absl::Status NcclCommunicator::Barrier() {
  Impl& impl = *impl_;
  CUDA_RETURN_IF_ERROR(cudaSetDevice(impl.device));
  return impl.Run("NCCL Barrier", [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    NCCL_RETURN_IF_ERROR(ncclAllReduce(impl.scratch, impl.scratch, 1, ncclFloat,
                                       ncclSum, impl.comm, impl.stream));
    return absl::OkStatus();
  });
}

void NcclCommunicator::Abort() {
  absl::MutexLock lock(&impl_->mu);
  impl_->AbortLocked();
}

}  // namespace dcp
