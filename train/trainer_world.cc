// RankTrainer's epoch world (trainer.h, `Step`): the first step of a new
// epoch undoes the abandoned steps this rank applied, and the members agree
// on one state before it runs. The step itself is trainer.cc's.

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/collectives.h"
#include "common/status_macros.h"
#include "train/trainer.h"
#include "train/trainer_internal.h"

namespace dcp::train {

using trainer_internal::AllReduce;
using trainer_internal::Annotate;
using trainer_internal::Broadcast;
using trainer_internal::Where;

absl::StatusOr<StepStats> RankTrainer::StepInWorld(const RankPlan& plan,
                                                   std::vector<int> members,
                                                   const StepOptions& options) {
  if (members.size() == 1) {
    synced_epoch_ = plan.epoch;
    const std::string start = WeightsDigest();
    absl::StatusOr<StepStats> stats = RunStep(plan, nullptr, options);
    if (stats.ok()) stats->start_digest = start;
    return stats;
  }
  absl::StatusOr<c10d::ProcessGroup*> world = groups_->DataParallel(
      std::move(members), plan.epoch,
      absl::StrCat(options_.session_id, "/e", plan.epoch, "/dp"));
  if (!world.ok()) return Annotate(world.status(), Where(plan));
  if (plan.epoch != synced_epoch_) {
    absl::Status synced = SyncState(**world);
    if (!synced.ok()) return Annotate(synced, Where(plan));
    synced_epoch_ = plan.epoch;
  }
  RETURN_IF_ERROR(FormTaskGroups(plan));
  const std::string start = WeightsDigest();
  absl::StatusOr<StepStats> stats = RunStep(plan, *world, options);
  if (stats.ok()) stats->start_digest = start;
  return stats;
}

absl::Status RankTrainer::RollBack(int64_t abandoned_from) {
  auto first = std::find_if(
      history_.begin(), history_.end(),
      [abandoned_from](const Saved& s) { return s.step >= abandoned_from; });
  if (first == history_.end()) {
    if (forgotten_through_ < abandoned_from) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", forgotten_through_, " was abandoned after this rank applied "
        "it, and its state before is no longer kept (the last ",
        options_.history, " steps' are)"));
  }
  if (first == history_.begin() && forgotten_through_ >= abandoned_from) {
    return absl::FailedPreconditionError(absl::StrCat(
        "steps from ", abandoned_from, " were abandoned, but the state before "
        "step ", forgotten_through_, " is no longer kept"));
  }
  RETURN_IF_ERROR(InstallState(first->state));
  history_.erase(first, history_.end());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> RankTrainer::WorldOf(
    const RankPlan& plan) const {
  std::vector<int> world = plan.world_ranks;
  if (world.empty()) {
    world.resize(options_.world_size);
    std::iota(world.begin(), world.end(), 0);
  }
  const bool valid =
      std::adjacent_find(world.begin(), world.end(),
                         std::greater_equal<int>()) == world.end() &&
      world.front() >= 0 && world.back() < options_.world_size &&
      std::binary_search(world.begin(), world.end(), options_.rank);
  if (!valid) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(plan), ": the step's world [", absl::StrJoin(world, ","),
        "] is not an ascending set of ranks of the job's ", options_.world_size,
        " holding this rank"));
  }
  return world;
}

absl::Status RankTrainer::SyncState(c10d::ProcessGroup& world) {
  // A trainer that took no step holds the seeded weights, as a fresh one. A
  // rank that hung through an epoch holds an older state than the ranks
  // that trained on: the state is the newest epoch's, whatever its steps.
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  const bool holds = steps_applied_ > 0;
  at::Tensor newest = at::tensor({holds ? synced_epoch_ : -1}, at::kLong);
  RETURN_IF_ERROR(AllReduce(world, newest, c10d::ReduceOp::MAX,
                            "agreeing on the newest epoch a state is of"));
  if (newest.item<int64_t>() == -1) return absl::OkStatus();
  const bool candidate = holds && synced_epoch_ == newest.item<int64_t>();
  const int64_t mine = candidate ? steps_applied_ : kNone;
  at::Tensor fewest = at::tensor({mine}, at::kLong);
  RETURN_IF_ERROR(AllReduce(world, fewest, c10d::ReduceOp::MIN,
                            "agreeing on the state to start the epoch from"));
  at::Tensor source = at::tensor(
      {mine == fewest.item<int64_t>() ? world.getRank() : kNone}, at::kLong);
  RETURN_IF_ERROR(AllReduce(world, source, c10d::ReduceOp::MIN,
                            "choosing the member whose state the epoch takes"));
  const int root = static_cast<int>(source.item<int64_t>());
  std::vector<at::Tensor> state = StateTensors();
  for (at::Tensor& tensor : state) {
    RETURN_IF_ERROR(Broadcast(world, tensor, root, "sending the world's state"));
  }
  if (world.getRank() == root) return absl::OkStatus();
  return InstallState(state);
}

std::vector<at::Tensor> RankTrainer::StateTensors() {
  const std::vector<at::Tensor> params = model_->parameters();
  std::vector<at::Tensor> weights, first, second;
  int64_t adam_step = 0;
  for (const at::Tensor& p : params) {
    weights.push_back(p.detach().reshape({-1}));
    auto found = optimizer_->state().find(
        c10::guts::to_string(p.unsafeGetTensorImpl()));
    if (found == optimizer_->state().end()) {
      first.push_back(at::zeros({p.numel()}, p.options()));
      second.push_back(at::zeros({p.numel()}, p.options()));
      continue;
    }
    auto& adam = static_cast<torch::optim::AdamWParamState&>(*found->second);
    first.push_back(adam.exp_avg().reshape({-1}));
    second.push_back(adam.exp_avg_sq().reshape({-1}));
    adam_step = adam.step();
  }
  return {at::tensor({steps_applied_, adam_step}, at::kLong), at::cat(weights),
          at::cat(first), at::cat(second)};
}

absl::Status RankTrainer::InstallState(const std::vector<at::Tensor>& state) {
  const auto counts = state[0].accessor<int64_t, 1>();
  steps_applied_ = counts[0];
  const int64_t adam_step = counts[1];
  at::NoGradGuard no_grad;
  int64_t offset = 0;
  try {
    for (const at::Tensor& p : model_->parameters()) {
      const int64_t n = p.numel();
      at::Tensor w = p;  // Shares the parameter's storage.
      w.copy_(state[1].narrow(0, offset, n).view_as(p));
      auto adam = std::make_unique<torch::optim::AdamWParamState>();
      adam->step(adam_step);
      adam->exp_avg(state[2].narrow(0, offset, n).view_as(p).clone());
      adam->exp_avg_sq(state[3].narrow(0, offset, n).view_as(p).clone());
      optimizer_->state()[c10::guts::to_string(p.unsafeGetTensorImpl())] =
          std::move(adam);
      offset += n;
    }
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("installing the world's state failed: ", ExceptionText(e)));
  }
  return absl::OkStatus();
}

}  // namespace dcp::train
