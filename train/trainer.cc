#include "train/trainer.h"

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <exception>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "comm/collectives.h"
#include "comm/comm_key.h"
#include "comm/peer_loss.h"
#include "common/fnv1a.h"
#include "common/status_macros.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"
#include "train/sequence_layout.h"
#include "train/trainer_inputs.h"
#include "train/trainer_internal.h"

namespace dcp::train {

using trainer_internal::AllReduce;
using trainer_internal::Annotate;
using trainer_internal::Where;
using trainer_internal::WhereTask;

namespace {

// The agreement's "no task failed".
constexpr int64_t kNoFailure = std::numeric_limits<int64_t>::max();

absl::Status CheckCorpusFits(const RankTrainerOptions& o) {
  const ModelSpec& m = o.model.model;
  if (m.causal && o.corpus.vocab > m.vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("the corpus's vocabulary (", o.corpus.vocab,
                     ") is larger than the model's (", m.vocab, ")"));
  }
  const int64_t features =
      o.model.feature_dim > 0 ? o.model.feature_dim : m.hidden;
  if (!m.causal && o.corpus.feature_dim != features) {
    return absl::InvalidArgumentError(
        absl::StrCat("the corpus has ", o.corpus.feature_dim,
                     " features per token, the model ", features));
  }
  return absl::OkStatus();
}

// The world's view of the step: rank 0 of a world of one, every task run
// whole by it.
absl::StatusOr<RankPlan> WholeStep(const v1::StepPlan& plan) {
  v1::StepPlan whole = plan;
  whole.clear_groups();
  for (v1::Task& task : *whole.mutable_tasks()) {
    task.clear_ranks();
    task.add_ranks(0);
    task.set_group_id(0);
    task.clear_micro_steps();
    task.clear_ulysses();  // One rank: no subgroups, no ring.
  }
  return RankPlanFromStep(whole, 0);
}

}  // namespace

struct RankTrainer::TaskOutcome {
  // Sum of the rank's loss shares, and its real tokens.
  double loss = 0;
  int64_t tokens = 0;
};

// What RunTasks did: each task's seconds and when the last one ended; the
// first failure and its task; whether it was a communication failure,
// after which no later task was run.
struct RankTrainer::TasksRun {
  std::vector<double> seconds;
  absl::Time end;
  absl::Status failure;
  int64_t failed_task = kNoFailure;
  bool peer_gone = false;
};

absl::StatusOr<std::unique_ptr<RankTrainer>> RankTrainer::Create(
    RankTrainerOptions options, ProcessGroups* groups) {
  if (options.world_size < 1 || options.rank < 0 ||
      options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("RankTrainer: rank ", options.rank,
                     " is outside a world of ", options.world_size));
  }
  if (options.world_size > 1 &&
      (groups == nullptr || options.session_id.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RankTrainer: a world of ", options.world_size,
        " ranks needs process groups and the scheduler's session id"));
  }
  if (groups != nullptr && groups->rank() != options.rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("RankTrainer: the process groups are rank ",
                     groups->rank(), "'s, not rank ", options.rank, "'s"));
  }
  RETURN_IF_ERROR(CheckCorpusFits(options));
  ASSIGN_OR_RETURN(std::unique_ptr<Transformer> model,
                   Transformer::Create(options.model));
  if (options.clock == nullptr) options.clock = RealClock::Default();
  auto trainer = std::unique_ptr<RankTrainer>(
      new RankTrainer(std::move(options), std::move(model), groups));
  const AdamWCoefficients& c = trainer->options_.optimizer;
  try {
    trainer->optimizer_ = std::make_unique<torch::optim::AdamW>(
        trainer->model_->parameters(),
        torch::optim::AdamWOptions(c.lr)
            .betas(std::make_tuple(c.beta1, c.beta2))
            .eps(c.eps)
            .weight_decay(c.weight_decay));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RankTrainer: AdamW refused its coefficients: ", ExceptionText(e)));
  }
  return trainer;
}

RankTrainer::RankTrainer(RankTrainerOptions options,
                         std::unique_ptr<Transformer> model,
                         ProcessGroups* groups)
    : options_(std::move(options)),
      model_(std::move(model)),
      groups_(groups),
      corpus_(options_.corpus) {}

RankTrainer::~RankTrainer() = default;

absl::StatusOr<StepStats> RankTrainer::Step(const RankPlan& plan,
                                            const StepOptions& options) {
  if (plan.rank != options_.rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(plan), ": the plan is for rank ", plan.rank,
                     ", this trainer is rank ", options_.rank));
  }
  ASSIGN_OR_RETURN(std::vector<int> members, WorldOf(plan));
  if (plan.epoch != synced_epoch_ && plan.abandoned_from.has_value()) {
    absl::Status back = RollBack(*plan.abandoned_from);
    if (!back.ok()) return Annotate(back, Where(plan));
  }
  Saved before;
  if (options_.history > 0) before = Saved{plan.step, StateTensors()};
  absl::StatusOr<StepStats> stats =
      StepInWorld(plan, std::move(members), options);
  if (!stats.ok()) return stats;
  if (options_.history == 0) forgotten_through_ = plan.step;
  if (options_.history > 0) history_.push_back(std::move(before));
  if (history_.size() > static_cast<size_t>(options_.history)) {
    forgotten_through_ = history_.front().step;
    history_.pop_front();
  }
  return stats;
}

namespace {

// A task whose group runs u-way Ulysses inside a ring of p / u > 1.
bool IsHybrid(const RankTask& task) {
  return task.ulysses >= 1 &&
         task.ulysses < static_cast<int>(task.group_ranks.size());
}

}  // namespace

absl::Status RankTrainer::FormTaskGroups(const RankPlan& plan) {
  for (const RankTask& task : plan.tasks) {
    if (task.group_ranks.size() < 2) continue;
    absl::StatusOr<CommKey> key = CommKey::Make(task.group_ranks, plan.epoch);
    absl::Status formed = key.status();
    if (key.ok()) {
      formed = IsHybrid(task)
                   ? groups_->Hybrid(*key, task.ulysses, task.rendezvous_prefix)
                         .status()
                   : groups_->Get(*key, task.rendezvous_prefix).status();
    }
    if (!formed.ok()) {
      return Annotate(formed, absl::StrCat(WhereTask(plan, task),
                                           ": forming its group"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StepStats> RankTrainer::ReferenceStep(
    const v1::StepPlan& plan, const StepOptions& options) {
  ASSIGN_OR_RETURN(RankPlan whole, WholeStep(plan));
  return RunStep(whole, nullptr, options);
}

absl::StatusOr<std::vector<double>> RankTrainer::Rehearse(
    const RankPlan& plan) {
  if (plan.rank != options_.rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(plan), ": the plan is for rank ", plan.rank,
                     ", this trainer is rank ", options_.rank));
  }
  ZeroGradients();
  TaskOutcome outcome;
  TasksRun run = RunTasks(plan, options_.clock->Now(), outcome);
  ZeroGradients();
  if (!run.failure.ok()) return run.failure;
  return std::move(run.seconds);
}

RankTrainer::TasksRun RankTrainer::RunTasks(const RankPlan& plan,
                                            absl::Time start,
                                            TaskOutcome& outcome) {
  TasksRun run;
  run.seconds.reserve(plan.tasks.size());
  run.end = start;
  for (const RankTask& task : plan.tasks) {
    absl::Status status = RunTask(plan, task, !run.failure.ok(), outcome);
    const absl::Time task_end = options_.clock->Now();
    run.seconds.push_back(absl::ToDoubleSeconds(task_end - run.end));
    run.end = task_end;
    if (!run.failure.ok() || status.ok()) continue;
    run.failure = Annotate(status, WhereTask(plan, task));
    run.failed_task = task.task_index;
    // With a peer gone, the rest of the step would only wait it out again.
    if (IsPeerLoss(status)) {
      run.peer_gone = true;
      break;
    }
  }
  return run;
}

absl::StatusOr<StepStats> RankTrainer::RunStep(const RankPlan& plan,
                                               c10d::ProcessGroup* world,
                                               const StepOptions& options) {
  const absl::Time start = options_.clock->Now();
  gradients_.clear();
  ZeroGradients();
  TaskOutcome outcome;
  TasksRun run = RunTasks(plan, start, outcome);
  if (run.peer_gone) {
    ZeroGradients();
    return run.failure;
  }
  const absl::Status& failure = run.failure;
  const int64_t failed_task = run.failed_task;
  if (world != nullptr) {
    // Every rank learns whether any task failed, and that all run one step.
    at::Tensor votes = at::tensor(
        {failed_task, plan.step, -plan.step, plan.epoch, -plan.epoch},
        at::kLong);
    absl::Status agreed =
        AllReduce(*world, votes, c10d::ReduceOp::MIN, "agreeing on the step");
    if (!agreed.ok()) {
      ZeroGradients();
      return failure.ok() ? Annotate(agreed, Where(plan)) : failure;
    }
    const auto v = votes.accessor<int64_t, 1>();
    if (failure.ok() && v[0] != kNoFailure) {
      ZeroGradients();
      return absl::AbortedError(
          absl::StrCat(Where(plan), ": task ", v[0],
                       " failed on another rank; no optimizer step was taken"));
    }
    if (failure.ok() && (v[1] != -v[2] || v[3] != -v[4])) {
      ZeroGradients();
      return absl::FailedPreconditionError(absl::StrCat(
          Where(plan), ": the ranks of the world run different steps (steps ",
          v[1], " to ", -v[2], ", epochs ", v[3], " to ", -v[4], ")"));
    }
  }
  if (!failure.ok()) {
    ZeroGradients();
    return failure;
  }
  absl::StatusOr<StepStats> stats =
      Finish(plan, world, outcome.loss, outcome.tokens, options);
  ZeroGradients();
  if (!stats.ok()) return Annotate(stats.status(), Where(plan));
  const absl::Time end = options_.clock->Now();
  stats->seconds = absl::ToDoubleSeconds(end - start);
  stats->sync_seconds = absl::ToDoubleSeconds(end - run.end);
  stats->task_seconds = std::move(run.seconds);
  return stats;
}

absl::Status RankTrainer::RunTask(const RankPlan& plan, const RankTask& task,
                                  bool refuse, TaskOutcome& outcome) {
  const int p = static_cast<int>(task.group_ranks.size());
  // c > 1: u-way Ulysses inside a ring of c (ring_spec.md).
  const int ring = IsHybrid(task) ? p / task.ulysses : 1;
  auto own = [](c10d::ProcessGroup* raw) {
    return raw == nullptr
               ? c10::intrusive_ptr<c10d::ProcessGroup>()
               : c10::intrusive_ptr<
                     c10d::ProcessGroup>::unsafe_reclaim_from_nonowning(raw);
  };
  SequenceGroups groups;
  if (p > 1) {
    if (groups_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("a task of ", p,
                       " ranks needs process groups; this trainer has none"));
    }
    ASSIGN_OR_RETURN(CommKey key, CommKey::Make(task.group_ranks, plan.epoch));
    if (ring > 1) {
      ASSIGN_OR_RETURN(
          ProcessGroups::HybridGroups hybrid,
          groups_->Hybrid(key, task.ulysses, task.rendezvous_prefix));
      groups.ulysses = own(hybrid.ulysses);
      groups.ring = own(hybrid.ring);
    } else {
      ASSIGN_OR_RETURN(c10d::ProcessGroup * raw,
                       groups_->Get(key, task.rendezvous_prefix));
      groups.ulysses = own(raw);
    }
  }
  absl::StatusOr<TaskShard> shard =
      absl::AbortedError("refused: an earlier task of this rank failed");
  int64_t real_tokens = task.shard.real_tokens;
  if (!refuse) {
    // The zig-zag shard holds two ranges of the pack; the whole pack is
    // materialised and ShardTask cuts them out.
    RankTask whole = task;
    if (ring > 1) whole.shard = ShardOfPack(task.total_tokens, 1, 0);
    absl::StatusOr<PackedTask> packed =
        trainer_inputs::Materialise(plan, whole, corpus_, options_.model);
    shard = packed.ok() ? ShardTask(*packed, p, task.group_rank, ring)
                        : packed.status();
    if (shard.ok() && ring > 1) {
      absl::StatusOr<PackLayout> layout =
          PackLayout::Create(packed->cu_seqlens, p, 0, ring);
      if (layout.ok()) real_tokens = layout->RealTokensInShard(task.group_rank);
    }
  }
  if (!shard.ok()) {
    // An empty shard is refused in the group's first collective, so the
    // peers fail at once instead of waiting for this rank's exchange.
    if (groups.ulysses || groups.ring) {
      model_->Run(TaskShard(), groups).status().IgnoreError();
    }
    return shard.status();
  }
  ASSIGN_OR_RETURN(TaskResult result, model_->Run(*shard, groups));
  RETURN_IF_ERROR(Backward(result.loss));
  try {
    outcome.loss += result.loss.item<double>();
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("reading the task's loss failed: ", ExceptionText(e)));
  }
  outcome.tokens += real_tokens;
  return absl::OkStatus();
}

absl::StatusOr<StepStats> RankTrainer::Finish(const RankPlan& plan,
                                              c10d::ProcessGroup* world,
                                              double loss, int64_t tokens,
                                              const StepOptions& options) {
  StepStats stats;
  stats.step = plan.step;
  const std::vector<at::Tensor> params = model_->parameters();
  try {
    // One buffer for the whole model: one collective instead of one per
    // tensor. Ranks with no task contribute zeros.
    std::vector<at::Tensor> pieces;
    pieces.reserve(params.size());
    for (const at::Tensor& p : params) {
      pieces.push_back(p.grad().defined()
                           ? p.grad().reshape({-1})
                           : at::zeros({p.numel()}, p.options()));
    }
    at::Tensor flat = at::cat(pieces);
    at::Tensor totals =
        at::tensor({loss, static_cast<double>(tokens)}, at::kDouble);
    if (world != nullptr) {
      RETURN_IF_ERROR(AllReduce(*world, flat, c10d::ReduceOp::SUM,
                                "summing the gradients"));
      RETURN_IF_ERROR(
          AllReduce(*world, totals, c10d::ReduceOp::SUM, "summing the losses"));
    }
    stats.loss = totals[0].item<double>();
    stats.tokens = static_cast<int64_t>(totals[1].item<double>());
    stats.grad_norm = flat.to(at::kDouble).norm().item<double>();
    int64_t offset = 0;
    for (const at::Tensor& p : params) {
      at::Tensor g = flat.narrow(0, offset, p.numel()).view_as(p);
      offset += p.numel();
      if (options.keep_gradients) gradients_.push_back(g.clone());
      p.mutable_grad() = g;
    }
    optimizer_->step();
    ++steps_applied_;
  } catch (const std::exception& e) {
    gradients_.clear();
    return absl::InternalError(
        absl::StrCat("the optimizer step failed: ", ExceptionText(e)));
  }
  return stats;
}

std::string RankTrainer::WeightsDigest() const {
  Fnv1a64 hash;
  for (const at::Tensor& p : model_->parameters()) {
    const at::Tensor bytes = p.detach().contiguous();
    hash.Update(absl::string_view(static_cast<const char*>(bytes.data_ptr()),
                                  bytes.nbytes()));
  }
  return absl::StrCat(absl::Hex(hash.digest(), absl::kZeroPad16));
}

void RankTrainer::ZeroGradients() {
  for (at::Tensor& p : model_->parameters()) p.mutable_grad() = at::Tensor();
}

}  // namespace dcp::train
