#include "comm/comm_backend.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "comm/nccl_communicator.h"

namespace dcp {

absl::StatusOr<CommBackend> ParseCommBackend(absl::string_view name) {
  if (name == "auto") return CommBackend::kAuto;
  if (name == "gloo") return CommBackend::kGloo;
  if (name == "nccl") return CommBackend::kNccl;
  return absl::InvalidArgumentError(absl::StrCat(
      "communication backend must be auto, gloo or nccl, not '", name, "'"));
}

std::string CommBackendName(CommBackend backend) {
  switch (backend) {
    case CommBackend::kAuto:
      return "auto";
    case CommBackend::kGloo:
      return "gloo";
    case CommBackend::kNccl:
      return "nccl";
  }
  return "unknown";
}

CommEnvironment DetectCommEnvironment() {
  CommEnvironment env;
  env.built_with_cuda = NcclCommunicator::BuiltWithCuda();
  if (!env.built_with_cuda) return env;
  absl::StatusOr<int> devices = NcclCommunicator::DeviceCount();
  if (devices.ok()) {
    env.devices = *devices;
  } else {
    env.device_error = std::string(devices.status().message());
  }
  return env;
}

absl::StatusOr<CommBackend> ResolveCommBackend(CommBackend requested,
                                               const CommEnvironment& env,
                                               int device) {
  if (requested == CommBackend::kGloo) return CommBackend::kGloo;
  const bool nccl_here = env.built_with_cuda && env.devices > 0;
  if (requested == CommBackend::kAuto && !nccl_here) return CommBackend::kGloo;
  if (!env.built_with_cuda) {
    return absl::FailedPreconditionError(
        "communication backend nccl: this binary was built without CUDA, so "
        "it has no NCCL: build it with --config=cuda, or use gloo or auto");
  }
  if (env.devices == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "communication backend nccl: no CUDA device is present",
        env.device_error.empty() ? "" : " (",
        env.device_error, env.device_error.empty() ? "" : ")",
        "; use gloo or auto on a machine without a GPU"));
  }
  if (device < 0 || device >= env.devices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "communication backend ", CommBackendName(requested),
        " would run NCCL on GPU ", device, ", but this machine has ",
        env.devices, " CUDA device", env.devices == 1 ? "" : "s",
        " (0..", env.devices - 1, "); pass a GPU index among them, or gloo"));
  }
  return CommBackend::kNccl;
}

}  // namespace dcp
