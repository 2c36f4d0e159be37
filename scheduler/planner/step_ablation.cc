// Planning with the ablation options of PlannerOptions on: passes over
// recompute ratios and group sizes, the candidates compared as the default
// compares them, and the even micro-steps of a fixed gradient accumulation.
// With every option at its default, planner.cc plans alone and none of this
// runs.

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "scheduler/planner/step_planner.h"

namespace dcp {
namespace planner_internal {

absl::StatusOr<std::vector<int>> StepPlanner::RecomputePasses(
    int64_t step) const {
  switch (options_.recompute_choice) {
    case RecomputeChoice::kPerTask:
      return std::vector<int>{-1};
    case RecomputeChoice::kFixed: {
      const int k = static_cast<int>(
          std::ceil(options_.fixed_recompute * layers_ - 1e-9));
      return std::vector<int>{std::clamp(k, 0, layers_)};
    }
    case RecomputeChoice::kPerStep:
      break;
  }
  // The least ratio at which the longest sequence fits the largest group:
  // every sequence then fits some group, and a ratio below it leaves the
  // longest with none.
  const Item& longest = items_.front();
  const int least = MinRecompute(longest.length / all_sizes_.back());
  if (least < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step, ": sample ", longest.id, " of ",
        static_cast<int64_t>(longest.length),
        " tokens does not fit in memory on any group even with full "
        "recompute"));
  }
  std::vector<int> ks;
  for (int above : {0, 1, 2, 4, 8}) {
    if (least + above <= layers_) ks.push_back(least + above);
  }
  if (ks.back() != layers_) ks.push_back(layers_);
  return ks;
}

absl::StatusOr<StepPlan> StepPlanner::PlanAblation(int64_t step,
                                                   double total_tokens) {
  ASSIGN_OR_RETURN(const std::vector<int> ks, RecomputePasses(step));
  // The group sizes of the search's passes: all of them, or, with one group
  // size a step, one size beside the single GPU at a time.
  std::vector<std::vector<int>> size_sets;
  if (options_.one_group_size) {
    for (int p : all_sizes_) {
      size_sets.push_back(p == 1 ? std::vector<int>{1}
                                 : std::vector<int>{1, p});
    }
  } else {
    size_sets.push_back(all_sizes_);
  }
  Best best;
  absl::Status failed = absl::OkStatus();
  for (int k : ks) {
    fixed_k_ = k;
    if (options_.candidates != PlanCandidates::kUniformOnly) {
      for (const std::vector<int>& sizes : size_sets) {
        sizes_ = sizes;
        Enter(PlanPhase::kSizing);
        // A pass where some sequence fits no group is no candidate.
        if (absl::Status s = SizeForPass(step); !s.ok()) {
          failed = s;
          continue;
        }
        Consider(step, total_tokens, Search(), PlanOrigin::kSearch, &best);
      }
      sizes_ = all_sizes_;
    }
    if (options_.candidates != PlanCandidates::kSearchOnly) {
      Enter(PlanPhase::kUniform);
      ConsiderUniform(step, total_tokens, &best);
    }
  }
  fixed_k_ = -1;
  if (!best.draft.has_value() && !best.plan.has_value()) {
    if (!failed.ok()) return failed;
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step,
        ": no uniform plan fits (some sequence fits no group of one size "
        "that divides the world)"));
  }
  Enter(PlanPhase::kEmit);
  short_recompute_ = best.short_recompute;  // Emit's one input of the pass
  StepPlan plan = best.plan.has_value() ? *std::move(best.plan)
                                        : Emit(step, *best.draft, total_tokens);
  plan.origin = best.origin;
  return plan;
}

void StepPlanner::Consider(int64_t step, double total_tokens, Draft d,
                           PlanOrigin origin, Best* best) const {
  if (!options_.even_micro_steps) {
    if (d.makespan < best->makespan) {
      best->makespan = d.makespan;
      best->draft = std::move(d);
      best->origin = origin;
      best->short_recompute = short_recompute_;
    }
    return;
  }
  StepPlan plan = Emit(step, d, total_tokens);
  EvenMicroSteps(&plan);
  const double makespan = plan.predicted_makespan_s - model_.SyncSeconds();
  if (makespan < best->makespan) {
    best->makespan = makespan;
    best->plan = std::move(plan);
    best->origin = origin;
  }
}

void StepPlanner::ConsiderUniform(int64_t step, double total_tokens,
                                  Best* best) const {
  // As KeepUniformIfFaster; its bound also holds with even micro-steps,
  // which only add tasks.
  double total_units = 0;
  for (const Item& it : items_) total_units += it.units;
  for (int p : all_sizes_) {
    if (world_ % p != 0) continue;
    if (UniformBound(p, total_tokens, total_units) >= best->makespan) continue;
    std::optional<Draft> uniform = BuildUniform(p);
    if (uniform.has_value()) {
      Consider(step, total_tokens, *std::move(uniform), PlanOrigin::kUniform,
               best);
    }
  }
}

void StepPlanner::EvenMicroSteps(StepPlan* plan) const {
  std::vector<TaskPlan>& tasks = plan->tasks;
  std::vector<int> count(world_, 0);
  std::vector<double> tokens(tasks.size(), 0.0);
  for (size_t j = 0; j < tasks.size(); ++j) {
    for (int r : tasks[j].ranks) ++count[r];
    for (int64_t id : tasks[j].samples) tokens[j] += lengths_[id];
  }
  const int target = *std::max_element(count.begin(), count.end());
  // Moves every other sample (longest first) of tasks[j] to a new task on
  // `ranks`, appended: both halves fit where the whole did.
  auto split = [&](size_t j, std::vector<int> ranks) {
    TaskPlan& from = tasks[j];
    std::vector<size_t> order(from.samples.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return lengths_[from.samples[a]] > lengths_[from.samples[b]];
    });
    std::vector<bool> moves(from.samples.size(), false);
    for (size_t k = 1; k < order.size(); k += 2) moves[order[k]] = true;
    TaskPlan half;
    half.ranks = std::move(ranks);
    half.recompute = from.recompute;
    // The same group keeps its layout; a half moved to one rank has none.
    half.ulysses = half.ranks == from.ranks ? from.ulysses : 0;
    TaskPlan kept;
    kept.ranks = from.ranks;
    kept.recompute = from.recompute;
    kept.ulysses = from.ulysses;
    double moved = 0;
    for (size_t k = 0; k < from.samples.size(); ++k) {
      TaskPlan& to = moves[k] ? half : kept;
      to.samples.push_back(from.samples[k]);
      if (k < from.loss_weights.size()) {
        to.loss_weights.push_back(from.loss_weights[k]);
      }
      if (moves[k]) moved += lengths_[from.samples[k]];
    }
    from = std::move(kept);
    tokens[j] -= moved;
    tasks.push_back(std::move(half));
    tokens.push_back(moved);
  };
  for (int r = 0; r < world_; ++r) {
    while (count[r] < target) {
      // Best: a task of r's own with two or more samples whose ranks are
      // all below the target (split in place: each of them gains one);
      // else the largest one-GPU pack of another rank (half of it moves to
      // r, whose count alone changes). The largest by tokens in each case.
      int own = -1, other = -1;
      for (size_t j = 0; j < tasks.size(); ++j) {
        const TaskPlan& t = tasks[j];
        if (t.samples.size() < 2) continue;
        const bool mine =
            std::find(t.ranks.begin(), t.ranks.end(), r) != t.ranks.end();
        if (mine && std::all_of(t.ranks.begin(), t.ranks.end(),
                                [&](int q) { return count[q] < target; })) {
          if (own < 0 || tokens[j] > tokens[own]) own = static_cast<int>(j);
        } else if (!mine && t.ranks.size() == 1) {
          if (other < 0 || tokens[j] > tokens[other]) {
            other = static_cast<int>(j);
          }
        }
      }
      if (own >= 0) {
        for (int q : tasks[own].ranks) ++count[q];
        split(own, tasks[own].ranks);
      } else if (other >= 0) {
        ++count[r];
        split(other, {r});
      } else {
        break;  // every pack left holds one sequence
      }
    }
  }
  plan->predicted_makespan_s = Predict(*plan);
}

double StepPlanner::Predict(const StepPlan& plan) const {
  std::vector<double> free(world_, 0.0);
  for (const TaskPlan& t : plan.tasks) {
    double tokens = 0, units = 0;
    for (int64_t id : t.samples) {
      const double length = static_cast<double>(lengths_[id]);
      tokens += length;
      units += model_.AttentionUnits(length);
    }
    const int p = static_cast<int>(t.ranks.size());
    const bool intra = t.ranks.front() / node_ == t.ranks.back() / node_;
    double start = 0;
    for (int r : t.ranks) start = std::max(start, free[r]);
    const double end =
        start + model_.TaskSecondsFromSums(p, intra, tokens, units, t.recompute,
                                           t.ulysses);
    for (int r : t.ranks) free[r] = end;
  }
  return *std::max_element(free.begin(), free.end()) + model_.SyncSeconds();
}

}  // namespace planner_internal
}  // namespace dcp
