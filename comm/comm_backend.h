#ifndef DCP_COMM_COMM_BACKEND_H_
#define DCP_COMM_COMM_BACKEND_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dcp {

/// The library a rank's communicator groups run on.
///
/// Gloo communicators (comm/gloo_communicator.h) take host pointers and
/// work everywhere. NCCL communicators (comm/nccl_communicator.h) take
/// device pointers on the rank's GPU and exist only in a `--config=cuda`
/// build on a machine with a CUDA device. `kAuto` is what a user leaves
/// unset: NCCL where it can run, Gloo elsewhere. Every rank of a job must
/// end up on the same library (a Gloo rank and an NCCL rank never meet), so
/// pass an explicit choice when the hosts of a job differ.
enum class CommBackend {
  kAuto,
  kGloo,
  kNccl,
};

/// "auto", "gloo" or "nccl" (what `--comm_backend` takes); INVALID_ARGUMENT
/// naming the accepted values otherwise.
absl::StatusOr<CommBackend> ParseCommBackend(absl::string_view name);

/// The name `ParseCommBackend` takes back.
std::string CommBackendName(CommBackend backend);

/// What decides whether NCCL can run here.
struct CommEnvironment {
  /// This binary was built with `--config=cuda` (NCCL linked in).
  bool built_with_cuda = false;
  /// CUDA devices this process sees (0 without CUDA or a driver).
  int devices = 0;
  /// Why no device could be counted, when the CUDA runtime said so (no
  /// driver, a driver too old, ...); empty otherwise.
  std::string device_error;
};

/// The environment of this process: the build, and the CUDA devices it sees
/// (`cudaGetDeviceCount`).
CommEnvironment DetectCommEnvironment();

/// The library a rank that drives GPU `device` uses when `requested` was
/// asked for in `env`: kGloo or kNccl, never kAuto. kAuto is kNccl when the
/// build has CUDA and a device is present, kGloo otherwise. kNccl in a build
/// without CUDA, or with no device present, is FAILED_PRECONDITION saying
/// which, and what to pass instead; a `device` that is not among the
/// devices present is INVALID_ARGUMENT wherever NCCL would be chosen.
///
///   ASSIGN_OR_RETURN(CommBackend backend,
///                    ResolveCommBackend(CommBackend::kAuto,
///                                       DetectCommEnvironment(), gpu));
absl::StatusOr<CommBackend> ResolveCommBackend(CommBackend requested,
                                               const CommEnvironment& env,
                                               int device);

}  // namespace dcp

#endif  // DCP_COMM_COMM_BACKEND_H_
