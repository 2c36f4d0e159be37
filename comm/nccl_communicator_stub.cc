// NcclCommunicator in a build without CUDA (the default): nothing can be
// created, so no instance exists and the member functions are never reached.
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "comm/nccl_communicator.h"

namespace dcp {
namespace {

absl::Status BuiltWithoutCuda() {
  return absl::UnimplementedError(
      "NCCL communicators are unavailable: dcp was built without CUDA "
      "(build with --config=cuda)");
}

}  // namespace

struct NcclCommunicator::Impl {};

bool NcclCommunicator::BuiltWithCuda() { return false; }

absl::StatusOr<int> NcclCommunicator::DeviceCount() { return 0; }

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const CommKey&, int, const std::string&, RendezvousStoreInterface*,
    const Options&) {
  return BuiltWithoutCuda();
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Split(
    NcclCommunicator&, int, int, const Options&) {
  return BuiltWithoutCuda();
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
NcclCommunicator::~NcclCommunicator() = default;

int NcclCommunicator::rank() const { return 0; }
int NcclCommunicator::size() const { return 0; }
absl::Status NcclCommunicator::AllToAll(const float*, float*, size_t) {
  return BuiltWithoutCuda();
}
absl::Status NcclCommunicator::AllReduceSum(float*, size_t) {
  return BuiltWithoutCuda();
}
absl::Status NcclCommunicator::AllReduceSumHost(float*, size_t) {
  return BuiltWithoutCuda();
}
absl::Status NcclCommunicator::Barrier() { return BuiltWithoutCuda(); }
void NcclCommunicator::Abort() {}

}  // namespace dcp
