#include "scheduler/eval/simulated_profile.h"

#include <algorithm>
#include <cmath>

#include "proto/scheduler_service.pb.h"
#include "scheduler/control/profile_stage.h"

namespace dcp {

double TimingNoise::Uniform() {
  // splitmix64
  state_ += 0x9E3779B97F4A7C15ULL;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return (static_cast<double>(z >> 11) + 0.5) / 9007199254740992.0;
}

double TimingNoise::Factor() {
  if (sigma_ == 0) return 1;
  const double z =
      std::sqrt(-2 * std::log(Uniform())) * std::cos(2 * M_PI * Uniform());
  return std::exp(sigma_ * z);
}

namespace {

// The groups of the request for size `p`: every rank alone for p = 1, the
// request's aligned groups otherwise.
std::vector<std::vector<int>> GroupsOfSize(const v1::ProfileRequest& request,
                                           int p, int world_size) {
  std::vector<std::vector<int>> groups;
  if (p == 1) {
    for (int r = 0; r < world_size; ++r) groups.push_back({r});
    return groups;
  }
  for (const v1::CommGroup& g : request.groups()) {
    if (g.ranks_size() == p)
      groups.emplace_back(g.ranks().begin(), g.ranks().end());
  }
  return groups;
}

// The request the control plane would send for this cluster and planner.
v1::ProfileRequest SimulatedRequest(const ReferenceCluster& cluster,
                                    const CostModel& planner,
                                    const SimulatedProfileOptions& options) {
  ProfileStageOptions grid;
  grid.world_size = cluster.world_size();
  grid.gpus_per_node = cluster.cluster().gpus_per_node;
  grid.heads = cluster.model().heads;
  grid.lengths = options.lengths;
  CompleteProfileGrid(planner, options.window, grid);
  return ProfileStage::MakeRequest(grid);
}

// Calls `point(ranks, ulysses, length, recompute)` for every shape of the
// request, every group of its size and every (length, recompute) the agents
// measure on it. The request is `ProfileStage::MakeRequest`'s, which gives
// every size its degree.
template <typename Point>
void ForEachPoint(const v1::ProfileRequest& request, int world_size,
                  Point point) {
  for (int shape = 0; shape < request.group_sizes_size(); ++shape) {
    const int p = request.group_sizes(shape);
    const int u = request.ulysses(shape);
    for (const std::vector<int>& ranks : GroupsOfSize(request, p, world_size)) {
      for (int64_t length : request.lengths()) {
        for (int i = 0; i < request.recompute_size(); ++i) {
          if (ProfilePointMeasured(request, length, shape, i)) {
            point(ranks, u, length, request.recompute(i));
          }
        }
      }
    }
  }
}

}  // namespace

std::vector<TaskObservation> SimulateProfile(
    const ReferenceCluster& cluster, const CostModel& planner,
    const SimulatedProfileOptions& options) {
  const v1::ProfileRequest request =
      SimulatedRequest(cluster, planner, options);
  TimingNoise noise(options.noise, options.seed);
  std::vector<TaskObservation> out;
  ForEachPoint(request, cluster.world_size(),
               [&](const std::vector<int>& ranks, int u, int64_t length,
                   double r) {
                 const std::vector<int64_t> seq = {length};
                 const ReferenceCluster::TaskCost cost =
                     cluster.Cost(ranks, seq, r, u);
                 for (int rep = 0; rep < request.repetitions(); ++rep) {
                   for (size_t member = 0; member < ranks.size(); ++member) {
                     TaskObservation& o = out.emplace_back();
                     o.group_size = static_cast<int>(ranks.size());
                     o.ulysses = u;
                     o.intra_node = cluster.IntraNode(ranks);
                     o.recompute = r;
                     o.lengths = seq;
                     o.seconds = cost.total_s * noise.Factor();
                     o.memory_bytes = cost.memory_bytes;
                   }
                 }
               });
  return out;
}

double SimulatedProfileSeconds(const ReferenceCluster& cluster,
                               const CostModel& planner,
                               const SimulatedProfileOptions& options) {
  const v1::ProfileRequest request =
      SimulatedRequest(cluster, planner, options);
  std::vector<double> busy(cluster.world_size(), 0.0);
  ForEachPoint(request, cluster.world_size(),
               [&](const std::vector<int>& ranks, int u, int64_t length,
                   double r) {
                 const std::vector<int64_t> seq = {length};
                 const double s = cluster.Cost(ranks, seq, r, u).total_s;
                 for (int rank : ranks) busy[rank] += s * request.repetitions();
               });
  return *std::max_element(busy.begin(), busy.end());
}

std::vector<TaskObservation> SimulateTaskTimings(
    const ReferenceCluster& cluster, const StepPlan& plan,
    const LengthView& lengths, TimingNoise& noise) {
  std::vector<TaskObservation> out;
  out.reserve(plan.tasks.size());
  for (const TaskPlan& task : plan.tasks) {
    TaskObservation& o = out.emplace_back();
    for (int64_t id : task.samples) o.lengths.push_back(lengths[id]);
    const ReferenceCluster::TaskCost cost =
        cluster.Cost(task.ranks, o.lengths, task.recompute, task.ulysses);
    o.group_size = static_cast<int>(task.ranks.size());
    o.intra_node = cluster.IntraNode(task.ranks);
    o.recompute = task.recompute;
    o.seconds = cost.total_s * noise.Factor();
    o.memory_bytes = cost.memory_bytes;
  }
  return out;
}

}  // namespace dcp
