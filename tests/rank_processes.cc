#include "tests/rank_processes.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "common/model_spec.h"
#include "common/subprocess.h"

namespace dcp::testing_ranks {

std::string SelfPath() {
  absl::StatusOr<std::string> self = subprocess::SelfExecutable();
  return self.ok() ? *self : "";
}

absl::StatusOr<std::unique_ptr<SchedulerServer>> StartRendezvousServer(
    int world, const std::string& session) {
  absl::StatusOr<ModelSpec> model = BuiltinModel("llama3-8b");
  if (!model.ok()) return model.status();
  return examples::StartRendezvousServer(world, session, *model,
                                         /*window=*/4096);
}

}  // namespace dcp::testing_ranks
