#include "scheduler/planner/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "scheduler/planner/step_planner.h"

namespace dcp {
namespace planner_internal {

StepPlan StepPlanner::Emit(int64_t step, const Draft& d,
                           double total_tokens) const {
  StepPlan plan;
  plan.step = step;
  plan.samples.assign(samples_.begin(), samples_.end());
  size_t tasks = d.long_tasks.size();
  for (const std::vector<Pack>& packs : d.rank_packs) tasks += packs.size();
  plan.tasks.reserve(tasks);
  auto weight = [&](const Item& it) { return it.length / total_tokens; };
  for (const LongTask& t : d.long_tasks) {
    TaskPlan task;
    task.ranks.resize(t.config.p);
    std::iota(task.ranks.begin(), task.ranks.end(), t.first_rank);
    const Item& it = items_[t.item];
    task.samples = {it.id};
    task.loss_weights = {weight(it)};
    for (int i : t.extra) {
      task.samples.push_back(items_[i].id);
      task.loss_weights.push_back(weight(items_[i]));
    }
    task.recompute = Recompute(t.config.k);
    task.ulysses = TaskPlan::UlyssesField(t.config.p, t.config.u);
    plan.tasks.push_back(std::move(task));
  }
  for (int r = 0; r < world_; ++r) {
    for (const Pack& pack : d.rank_packs[r]) {
      TaskPlan task;
      task.ranks = {r};
      task.recompute = short_recompute_;
      task.samples.reserve(pack.count);
      task.loss_weights.reserve(pack.count);
      for (int i = pack.head; i >= 0; i = d.next_item[i]) {
        task.samples.push_back(items_[i].id);
        task.loss_weights.push_back(weight(items_[i]));
      }
      plan.tasks.push_back(std::move(task));
    }
  }
  plan.predicted_makespan_s = d.makespan + model_.SyncSeconds();
  return plan;
}

void StepPlanner::KeepUniformIfFaster(double total_tokens, Draft* best) const {
  // Never worse than one group size for every sequence, as its own cost
  // model sees them: on costs where splitting everything balances best
  // (cheap communication), that is the plan.
  double total_units = 0;
  for (const Item& it : items_) total_units += it.units;
  for (int p : sizes_) {
    if (world_ % p != 0) continue;
    if (UniformBound(p, total_tokens, total_units) >= best->makespan) continue;
    std::optional<Draft> uniform = BuildUniform(p);
    if (uniform.has_value() && uniform->makespan < best->makespan) {
      *best = *std::move(uniform);
    }
  }
}

absl::Status StepPlanner::ReadItems(int64_t step,
                                    absl::Span<const int64_t> samples,
                                    const LengthView& lengths,
                                    double* total_tokens) {
  samples_ = samples;
  lengths_ = lengths;
  read_lengths_.resize(samples.size());
  *total_tokens = 0;
  constexpr size_t kPrefetchAhead = 128;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (i + kPrefetchAhead < samples.size()) {
      lengths.Prefetch(samples[i + kPrefetchAhead]);
    }
    const int64_t id = samples[i];
    if (id < 0 || id >= lengths.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", step, ": sample ", id,
                       " is outside the length table of ", lengths.size()));
    }
    if (lengths[id] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("step ", step, ": sample ", id,
                       " has non-positive length ", lengths[id]));
    }
    // A length fits: the table holds 32-bit lengths.
    read_lengths_[i] = static_cast<uint32_t>(lengths[id]);
    *total_tokens += static_cast<double>(read_lengths_[i]);
  }
  return absl::OkStatus();
}

absl::Status StepPlanner::SizeItems(int64_t step) {
  RETURN_IF_ERROR(MeasureItems());
  return SizeForPass(step);
}

absl::Status StepPlanner::MeasureItems() {
  SortByLength();
  prefix_tokens_.resize(items_.size() + 1);
  prefix_tokens_[0] = 0;
  for (size_t i = 0; i < items_.size(); ++i) {
    prefix_tokens_[i + 1] = prefix_tokens_[i] + items_[i].length;
  }
  max_tokens_.resize(layers_ + 1);
  for (int k = 0; k <= layers_; ++k) {
    max_tokens_[k] = model_.MaxTokensPerGpu(Recompute(k));
  }
  if (max_tokens_[layers_] < 1) {
    return absl::FailedPreconditionError(
        "the model's static memory (weights and optimizer state) alone "
        "exceeds the memory cap; use more ranks");
  }
  return absl::OkStatus();
}

absl::Status StepPlanner::SizeForPass(int64_t step) {
  if (fixed_k_ >= 0 && max_tokens_[fixed_k_] < 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step, ": at recompute ", Recompute(fixed_k_),
        " the activations of one token exceed the memory the model's states "
        "leave"));
  }
  ChooseShortPackConfig();
  absl::Status s = ComputeGroupConfigs();
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("step ", step, ": ", s.message()));
  }
  return absl::OkStatus();
}

int StepPlanner::FinishMostPromising(std::vector<Draft>* drafts) const {
  std::vector<int> order(drafts->size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return (*drafts)[a].makespan < (*drafts)[b].makespan;
  });
  // The water level is a close estimate only when every rank gets many short
  // sequences; with few a rank, all variants are finished.
  const bool many = items_.size() >= 16 * static_cast<size_t>(world_);
  const int finish =
      many ? std::min<int>(std::max(1, options_.finished_variants),
                           static_cast<int>(drafts->size()))
           : static_cast<int>(drafts->size());
  // A draft's estimate is the level its short sequences would reach as a
  // fluid: no dealing ends below it. Drafts that cannot beat the best
  // finished one are skipped, which changes no choice and saves the dealing.
  // A copy of an earlier draft has its estimate and comes after it (the sort
  // is stable), so it would finish as that one did and is skipped too; so is
  // a draft whose groups alone end no earlier than the best: dealing and
  // refinement move no group, so no rank of it ends before its groups do.
  int best = -1;
  for (int k = 0; k < finish; ++k) {
    Draft& d = (*drafts)[order[k]];
    if (best >= 0 && d.makespan >= (*drafts)[best].makespan) break;
    if (d.same_as >= 0) continue;
    if (best >= 0 && *std::max_element(d.finish.begin(), d.finish.end()) >=
                         (*drafts)[best].makespan) {
      continue;
    }
    Finish(&d);
    if (best < 0 || d.makespan < (*drafts)[best].makespan) best = order[k];
  }
  return best;
}

absl::StatusOr<StepPlan> StepPlanner::Plan(int64_t step,
                                           absl::Span<const int64_t> samples,
                                           const LengthView& lengths) {
  if (samples.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step, " has no samples"));
  }
  Enter(PlanPhase::kSizing);
  double total_tokens = 0;
  RETURN_IF_ERROR(ReadItems(step, samples, lengths, &total_tokens));
  if (options_.candidates != PlanCandidates::kSearchAndUniform ||
      options_.recompute_choice != RecomputeChoice::kPerTask ||
      options_.even_micro_steps || options_.one_group_size) {
    RETURN_IF_ERROR(MeasureItems());
    return PlanAblation(step, total_tokens);
  }
  RETURN_IF_ERROR(SizeItems(step));
  Draft best = Search();
  Enter(PlanPhase::kUniform);
  KeepUniformIfFaster(total_tokens, &best);
  Enter(PlanPhase::kEmit);
  StepPlan plan = Emit(step, best, total_tokens);
  plan.origin = best.uniform ? PlanOrigin::kUniform : PlanOrigin::kSearch;
  return plan;
}

Draft StepPlanner::Search() const {
  // Every (threshold, fill) variant is built and estimated; the most
  // promising ones are finished exactly and the best of those is kept.
  std::vector<Draft> drafts;
  drafts.reserve(2 * options_.split_thresholds.size());
  for (bool fill : {false, true}) {
    for (double beta : options_.split_thresholds) {
      drafts.push_back(Build(beta * mean_load_, fill, drafts));
    }
  }
  const int best = FinishMostPromising(&drafts);
  return std::move(drafts[best]);
}

}  // namespace planner_internal

Planner::Planner(CostModel model, PlannerOptions options,
                 std::vector<int> sizes)
    : model_(std::move(model)),
      options_(std::move(options)),
      group_sizes_(std::move(sizes)) {}

absl::StatusOr<Planner> Planner::Create(CostModel model,
                                        PlannerOptions options) {
  if (options.world_size <= 0) {
    return absl::InvalidArgumentError("world_size must be positive");
  }
  if (!(options.fixed_recompute >= 0 && options.fixed_recompute <= 1)) {
    return absl::InvalidArgumentError("fixed_recompute must be in [0, 1]");
  }
  if (options.split_thresholds.empty()) {
    return absl::InvalidArgumentError("split_thresholds must not be empty");
  }
  for (double t : options.split_thresholds) {
    if (!(t > 0)) {
      return absl::InvalidArgumentError("split_thresholds must be positive");
    }
  }
  // Every size dividing the world, and every ring of a power of two
  // Ulysses subgroups of a degree u the planner runs (see
  // StepPlanner::RunsUlysses), which need not divide it: a sequence's ring
  // passes take about s / u of time whatever the ring's length, so the
  // longest sequences want the largest u the heads allow.
  if (model.gpus_per_node() <= 0) {
    return absl::InvalidArgumentError("gpus_per_node must be positive");
  }
  const int heads = model.model().heads;
  const int node = model.gpus_per_node();
  std::vector<int> sizes;
  for (int p = 1; p <= options.world_size; ++p) {
    bool size = options.world_size % p == 0;
    for (int u = 1; u <= heads && !size; ++u) {
      if (heads % u != 0 || p % u != 0) continue;
      if (node % u != 0 && u <= node && u != p) continue;
      const int c = p / u;
      size = (c & (c - 1)) == 0;
    }
    if (size) sizes.push_back(p);
  }
  return Planner(std::move(model), std::move(options), std::move(sizes));
}

absl::StatusOr<StepPlan> Planner::PlanStep(int64_t step,
                                           absl::Span<const int64_t> samples,
                                           const LengthView& lengths,
                                           PlanPhaseObserver* observer) const {
  planner_internal::StepPlanner planner(model_, options_, group_sizes_,
                                        observer);
  absl::StatusOr<StepPlan> plan = planner.Plan(step, samples, lengths);
  if (observer != nullptr) observer->Enter(PlanPhase::kDone);
  return plan;
}

}  // namespace dcp
