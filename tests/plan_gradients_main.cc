// plan_gradients: the C++ trainer's gradients for the RankSteps a dcp job
// ran, for tests/python_client_test.py to hold the Python ranks against.
//
//   plan_gradients --model_config=M.json --seed=S --out=cpp.json
//       rank0.pb rank1.pb ...
//
// Each argument is one rank's serialized dcp.v1.RankStep of the same step
// (rank r's at position r). Every rank runs as a thread of this process:
// RankTrainer::Step in float64 on c10d Gloo groups met through an in-memory
// rendezvous store, with the corpus and initial weights of --seed (what
// examples/train.py and dcp-train use). --out gets, as JSON, the parameters
// before the step and the world's summed gradients (rank 0's copy; every
// rank checks it holds the same), by parameter name.

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ATen/ATen.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "comm/process_groups.h"
#include "comm/rendezvous_store.h"
#include "common/model_spec.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "proto/plan.pb.h"
#include "train/rank_plan.h"
#include "train/torch_threads.h"
#include "train/trainer.h"

ABSL_FLAG(std::string, model_config, "", "JSON model description.");
ABSL_FLAG(uint64_t, seed, 0, "Seed of the weights and the corpus.");
ABSL_FLAG(std::string, out, "", "JSON file to write.");

namespace dcp {
namespace {

using train::RankTrainer;
using train::RankTrainerOptions;
using train::StepStats;

absl::StatusOr<v1::RankStep> ReadRankStep(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  v1::RankStep step;
  if (!in.good() && !in.eof()) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path));
  }
  if (!step.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a serialized dcp.v1.RankStep"));
  }
  return step;
}

nlohmann::json ByName(const std::vector<std::pair<std::string, at::Tensor>>&
                          named,
                      const std::vector<at::Tensor>& values) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t i = 0; i < named.size(); ++i) {
    at::Tensor flat = values[i].detach().to(at::kDouble).contiguous().flatten();
    const double* data = flat.data_ptr<double>();
    out[named[i].first] = std::vector<double>(data, data + flat.numel());
  }
  return out;
}

// One trainer a rank, each on its own ProcessGroups over `store`.
struct World {
  std::vector<std::unique_ptr<ProcessGroups>> groups;
  std::vector<std::unique_ptr<RankTrainer>> trainers;
};

absl::StatusOr<World> MakeWorld(const ModelSpec& model, uint64_t seed,
                                int world_size,
                                RendezvousStoreInterface* store) {
  World world;
  for (int r = 0; r < world_size; ++r) {
    ProcessGroups::Options group_options;
    group_options.rank = r;
    ASSIGN_OR_RETURN(world.groups.emplace_back(),
                     ProcessGroups::Create(store, group_options));
    RankTrainerOptions o;
    o.model.model = model;
    o.model.dtype = at::kDouble;
    o.model.seed = seed;
    o.corpus.vocab = model.vocab;
    o.corpus.seed = seed;
    o.world_size = world_size;
    o.rank = r;
    o.session_id = "plan_gradients";
    ASSIGN_OR_RETURN(world.trainers.emplace_back(),
                     RankTrainer::Create(o, world.groups.back().get()));
  }
  return world;
}

absl::Status Run(const std::vector<std::string>& paths) {
  ASSIGN_OR_RETURN(ModelSpec model,
                   LoadModelConfig(absl::GetFlag(FLAGS_model_config)));
  std::vector<RankPlan> plans;
  for (const std::string& path : paths) {
    ASSIGN_OR_RETURN(v1::RankStep step, ReadRankStep(path));
    ASSIGN_OR_RETURN(plans.emplace_back(), RankPlanFromRankStep(step));
  }
  InMemoryRendezvousStore store;
  const int world_size = static_cast<int>(plans.size());
  ASSIGN_OR_RETURN(World world, MakeWorld(model, absl::GetFlag(FLAGS_seed),
                                          world_size, &store));
  const auto named = world.trainers[0]->model().named_parameters();
  std::vector<at::Tensor> before;
  for (const auto& [name, p] : named) before.push_back(p.detach().clone());

  std::vector<absl::StatusOr<StepStats>> stats(world_size,
                                               absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  train::StepOptions keep;
  keep.keep_gradients = true;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back(
        [&, r] { stats[r] = world.trainers[r]->Step(plans[r], keep); });
  }
  for (std::thread& thread : threads) thread.join();
  for (int r = 0; r < world_size; ++r) {
    if (!stats[r].ok()) {
      return absl::Status(stats[r].status().code(),
                          absl::StrCat("rank ", r, ": ",
                                       stats[r].status().message()));
    }
  }
  nlohmann::json out;
  out["parameters"] = ByName(named, before);
  out["gradients"] = ByName(named, world.trainers[0]->gradients());
  out["loss"] = stats[0]->loss;
  std::ofstream file(absl::GetFlag(FLAGS_out));
  file << out.dump();
  if (!file.good()) {
    return absl::InternalError(
        absl::StrCat("cannot write ", absl::GetFlag(FLAGS_out)));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace dcp

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "plan_gradients --model_config=M --seed=S --out=F rank0.pb ...");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  dcp::train::SetTorchThreads(1);
  const std::vector<std::string> paths(args.begin() + 1, args.end());
  if (paths.empty() || absl::GetFlag(FLAGS_out).empty()) {
    std::fprintf(stderr, "usage: %s\n", absl::ProgramUsageMessage().data());
    return 2;
  }
  absl::Status status = dcp::Run(paths);
  if (!status.ok()) {
    std::fprintf(stderr, "plan_gradients: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
