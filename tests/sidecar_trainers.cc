#include "tests/sidecar_trainers.h"

#include <memory>
#include <thread>

#include "absl/status/statusor.h"

namespace dcp {
namespace testing_process {

SidecarRun RunSidecarTrainers(const std::vector<std::string>& sockets,
                              const ClientOptions& options) {
  const int world = static_cast<int>(sockets.size());
  SidecarRun run;
  run.steps.resize(world);
  run.results.resize(world);
  std::vector<std::thread> trainers;
  for (int r = 0; r < world; ++r) {
    trainers.emplace_back([&, r] {
      ClientOptions rank_options = options;
      rank_options.mode = ClientOptions::Mode::kSidecar;
      rank_options.agent_socket = sockets[r];
      rank_options.rank = r;
      absl::StatusOr<std::unique_ptr<Client>> client =
          Client::Connect(rank_options);
      if (!client.ok()) {
        run.results[r] = client.status();
        return;
      }
      while (true) {
        absl::StatusOr<Step> step = (*client)->NextStep();
        if (!step.ok()) {
          run.results[r] = step.status();
          return;
        }
        if (step->drained) return;
        run.steps[r].push_back(step->step);
        absl::Status reported = (*client)->ReportStep(
            *step, std::vector<double>(step->tasks.size(), 0.01));
        if (!reported.ok()) {
          run.results[r] = reported;
          return;
        }
      }
    });
  }
  for (std::thread& t : trainers) t.join();
  return run;
}

}  // namespace testing_process
}  // namespace dcp
