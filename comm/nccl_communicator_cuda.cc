// NcclCommunicator with CUDA and NCCL (--config=cuda).
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
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

Clock* ClockOf(const NcclCommunicator::Options& options) {
  return options.clock != nullptr ? options.clock : RealClock::Default();
}

// Waits between two polls: spins first, then waits `poll_interval` on the
// clock (a FakeClock's test steps it).
class Poller {
 public:
  explicit Poller(const NcclCommunicator::Options& options)
      : clock_(ClockOf(options)), start_(clock_->Now()), options_(options) {}
  void Pause() {
    if (clock_->Now() - start_ < options_.spin) {
      std::this_thread::yield();
      return;
    }
    static constexpr bool kNever = false;
    absl::MutexLock lock(&mu_);
    clock_->AwaitWithTimeout(&mu_, absl::Condition(&kNever),
                             options_.poll_interval);
  }

 private:
  Clock* const clock_;
  const absl::Time start_;
  const NcclCommunicator::Options& options_;
  absl::Mutex mu_;
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
    if (ClockOf(options)->Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " did not finish within the timeout"));
    }
    poller.Pause();
  }
}

}  // namespace

struct NcclCommunicator::Impl {
  // Wraps a communicator whose initialization has ended, with its stream,
  // completion event and scratch buffer. Aborts the communicator on failure.
  static absl::StatusOr<std::unique_ptr<Impl>> Make(ncclComm_t comm, int device,
                                                    const Options& options) {
    auto impl = std::make_unique<Impl>();
    {
      absl::MutexLock lock(&impl->mu);
      impl->comm = comm;
    }
    impl->device = device;
    impl->options = options;
    impl->clock = ClockOf(options);
    if (absl::Status s = impl->Resources(); !s.ok()) {
      absl::MutexLock lock(&impl->mu);
      impl->AbortLocked();
      return s;
    }
    return impl;
  }

  // Rank, size, stream, event and scratch buffer of a fresh communicator.
  absl::Status Resources() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    NCCL_RETURN_IF_ERROR(ncclCommUserRank(comm, &rank));
    NCCL_RETURN_IF_ERROR(ncclCommCount(comm, &size));
    if (options.stream != nullptr) {
      stream = static_cast<cudaStream_t>(options.stream);
    } else {
      CUDA_RETURN_IF_ERROR(
          cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      owns_stream = true;
    }
    CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CUDA_RETURN_IF_ERROR(cudaMalloc(&scratch, sizeof(float)));
    return absl::OkStatus();
  }

  ~Impl() {
    if (owns_stream && stream != nullptr) cudaStreamDestroy(stream);
    if (done != nullptr) cudaEventDestroy(done);
    if (scratch != nullptr) cudaFree(scratch);
    if (staging != nullptr) cudaFree(staging);
  }

  // Aborts the communicator once; later calls do nothing.
  void AbortLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (aborted) return;
    aborted = true;
    ncclCommAbort(comm);
  }

  // Polls the nonblocking operation this communicator is the parent of (a
  // split) until it ends, holding the lock only while polling so that Abort
  // can interrupt it; aborts the communicator on error or timeout.
  absl::Status AwaitPending(absl::string_view what, absl::Time deadline) {
    Poller poller(options);
    while (true) {
      {
        absl::MutexLock lock(&mu);
        if (aborted) return absl::AbortedError(absl::StrCat(what, " aborted"));
        ncclResult_t state = ncclSuccess;
        ncclResult_t result = ncclCommGetAsyncError(comm, &state);
        if (result != ncclSuccess) state = result;
        if (state == ncclSuccess) return absl::OkStatus();
        if (state != ncclInProgress) {
          absl::Status error(NcclStatusCode(state),
                             absl::StrCat(what, ": ", ncclGetErrorString(state),
                                          " (", ncclGetLastError(comm),
                                          "); communicator aborted"));
          AbortLocked();
          return error;
        }
        if (clock->Now() >= deadline) {
          AbortLocked();
          return absl::DeadlineExceededError(absl::StrCat(
              what, " did not finish within ",
              absl::FormatDuration(options.timeout),
              " (a member is missing); communicator aborted"));
        }
      }
      poller.Pause();
    }
  }

  // A device buffer of at least `count` floats for host data.
  absl::StatusOr<float*> Staging(size_t count) {
    if (count > staging_count) {
      const size_t grown = std::max<size_t>(count, 2 * staging_count);
      if (staging != nullptr) CUDA_RETURN_IF_ERROR(cudaFree(staging));
      staging = nullptr;
      staging_count = 0;
      CUDA_RETURN_IF_ERROR(cudaMalloc(&staging, grown * sizeof(float)));
      staging_count = grown;
    }
    return staging;
  }

  // Enqueues `ops` on the stream and records `done` after them (under the
  // lock, which Abort also takes), then polls until the stream has run
  // them, NCCL reports an error, or the timeout passes; the last two abort
  // the communicator. Past the deadline it aborts even if the work is done
  // by now: what counts is whether it was done in time.
  template <typename Ops>
  absl::Status Run(absl::string_view what, Ops ops) {
    const absl::Time deadline = clock->Now() + options.timeout;
    {
      absl::MutexLock lock(&mu);
      if (aborted) {
        return absl::AbortedError(
            absl::StrCat(what, " on an aborted NCCL communicator"));
      }
      absl::Status s = ops();
      if (s.ok()) {
        if (cudaError_t e = cudaEventRecord(done, stream); e != cudaSuccess) {
          s = CudaErrorStatus(e, "cudaEventRecord", __FILE__, __LINE__);
        }
      }
      if (!s.ok()) {
        AbortLocked();
        return s;
      }
    }
    Poller poller(options);
    while (true) {
      {
        absl::MutexLock lock(&mu);
        std::optional<absl::Status> end = PollLocked(what, deadline);
        if (end.has_value()) return *end;
      }
      poller.Pause();
    }
  }

  // One poll of `Run`: its result once known, nullopt while in flight.
  std::optional<absl::Status> PollLocked(absl::string_view what,
                                         absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (aborted) return absl::AbortedError(absl::StrCat(what, " aborted"));
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
    if (clock->Now() >= deadline) {
      AbortLocked();
      return absl::DeadlineExceededError(absl::StrCat(
          what, " did not complete within ",
          absl::FormatDuration(options.timeout),
          " (a peer is missing or stuck); communicator aborted"));
    }
    if (state == ncclInProgress) return std::nullopt;
    const cudaError_t finished = cudaEventQuery(done);
    if (finished == cudaSuccess) return absl::OkStatus();
    if (finished == cudaErrorNotReady) return std::nullopt;
    absl::Status error =
        CudaErrorStatus(finished, "cudaEventQuery", __FILE__, __LINE__);
    AbortLocked();
    return error;
  }

  int rank = 0;
  int size = 0;
  int device = 0;
  Options options;
  Clock* clock = nullptr;
  cudaStream_t stream = nullptr;
  bool owns_stream = false;
  cudaEvent_t done = nullptr;  // Recorded after each operation.
  float* scratch = nullptr;    // One float for Barrier.
  // AllReduceSumHost's device copy; used by the one thread running
  // collectives.
  float* staging = nullptr;
  size_t staging_count = 0;

  absl::Mutex mu;
  ncclComm_t comm ABSL_GUARDED_BY(mu) = nullptr;
  bool aborted ABSL_GUARDED_BY(mu) = false;
};

absl::StatusOr<int> NcclCommunicator::DeviceCount() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaErrorNoDevice) return 0;
  if (error != cudaSuccess) {
    return CudaErrorStatus(error, "cudaGetDeviceCount", __FILE__, __LINE__);
  }
  return count;
}

bool NcclCommunicator::BuiltWithCuda() { return true; }

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const CommKey& key, int my_global_rank, const std::string& prefix,
    RendezvousStoreInterface* store, const Options& options) {
  ASSIGN_OR_RETURN(const int rank,
                   key.MemberRank(my_global_rank, store, "NcclCommunicator"));
  RETURN_IF_ERROR(CheckOptions(options));
  const absl::Time deadline = ClockOf(options)->Now() + options.timeout;
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
                     store->Wait({id_key}, deadline - ClockOf(options)->Now()));
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
  const absl::Time deadline = ClockOf(options)->Now() + options.timeout;
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
  }
  // The split is a collective of the parent: it must end there too.
  if (absl::Status s = p.AwaitPending("ncclCommSplit (parent)", deadline);
      !s.ok()) {
    if (child != nullptr) ncclCommAbort(child);
    return s;
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
        WaitUntilReady(impl.comm, impl.clock->Now() + impl.options.timeout,
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

absl::Status NcclCommunicator::AllReduceSumHost(float* data, size_t count) {
  Impl& impl = *impl_;
  CUDA_RETURN_IF_ERROR(cudaSetDevice(impl.device));
  ASSIGN_OR_RETURN(float* device_data, impl.Staging(count));
  const size_t bytes = count * sizeof(float);
  RETURN_IF_ERROR(impl.Run(
      "NCCL AllReduceSumHost", [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device_data, data, bytes,
                                             cudaMemcpyHostToDevice,
                                             impl.stream));
        NCCL_RETURN_IF_ERROR(ncclAllReduce(device_data, device_data, count,
                                           ncclFloat, ncclSum, impl.comm,
                                           impl.stream));
        return absl::OkStatus();
      }));
  // The stream has run the all-reduce: this copy does not wait for peers
  // (a copy to pageable memory returns once done, so it could not be
  // enqueued with the rest without blocking past the timeout).
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(data, device_data, bytes,
                                       cudaMemcpyDeviceToHost, impl.stream));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl.stream));
  return absl::OkStatus();
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
