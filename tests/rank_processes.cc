#include "tests/rank_processes.h"

#include <unistd.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "common/model_spec.h"

namespace dcp::testing_ranks {

std::string SelfPath() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, n) : "";
}

absl::StatusOr<std::unique_ptr<SchedulerServer>> StartRendezvousServer(
    int world, const std::string& session) {
  absl::StatusOr<ModelSpec> model = BuiltinModel("llama3-8b");
  if (!model.ok()) return model.status();
  return examples::StartRendezvousServer(world, session, *model,
                                         /*window=*/4096);
}

}  // namespace dcp::testing_ranks
