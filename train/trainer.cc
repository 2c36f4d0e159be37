#include "train/trainer.h"

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "c10/util/Exception.h"
#include "comm/comm_key.h"
#include "common/status_macros.h"
#include "torch/csrc/distributed/c10d/ProcessGroup.hpp"

namespace dcp::train {
namespace {

// The agreement's "no task failed".
constexpr int64_t kNoFailure = std::numeric_limits<int64_t>::max();

std::string Where(const RankPlan& plan) {
  return absl::StrCat("rank ", plan.rank, ", step ", plan.step, " (epoch ",
                      plan.epoch, ")");
}

std::string WhereTask(const RankPlan& plan, const RankTask& task) {
  return absl::StrCat(Where(plan), ", task ", task.task_index, " (micro-step ",
                      task.micro_step, " of ", plan.tasks.size(), ", group [",
                      absl::StrJoin(task.group_ranks, ","), "])");
}

absl::Status Annotate(const absl::Status& status, const std::string& where) {
  return absl::Status(status.code(),
                      absl::StrCat(where, ": ", status.message()));
}

std::string ExceptionText(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) {
    return c10->what_without_backtrace();
  }
  return e.what();
}

// A failure that says a peer or the network is gone: waiting on the peers
// again would only wait out another timeout.
bool IsCommunicationFailure(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

// One all-reduce of `tensor` (in place) over the world.
absl::Status AllReduce(c10d::ProcessGroup& world, at::Tensor& tensor,
                       c10d::ReduceOp op, const char* what) {
  std::vector<at::Tensor> tensors = {tensor};
  try {
    c10d::AllreduceOptions options;
    options.reduceOp = op;
    world.allreduce(tensors, options)->wait();
  } catch (const std::exception& e) {
    const std::string text = ExceptionText(e);
    const std::string lower = absl::AsciiStrToLower(text);
    const std::string message =
        absl::StrCat(what, " over the data-parallel world of ", world.getSize(),
                     " ranks failed: ", text);
    if (absl::StrContains(lower, "timed out") ||
        absl::StrContains(lower, "timeout")) {
      return absl::DeadlineExceededError(message);
    }
    return absl::UnavailableError(message);
  }
  return absl::OkStatus();
}

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

// The plan's loss weights of the task, or length / step tokens.
absl::StatusOr<std::vector<double>> LossWeights(const RankPlan& plan,
                                                const RankTask& task) {
  if (!task.loss_weights.empty()) {
    if (task.loss_weights.size() != task.samples.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the task has ", task.samples.size(), " samples but ",
                       task.loss_weights.size(), " loss weights"));
    }
    return task.loss_weights;
  }
  if (plan.step_tokens <= 0) {
    return absl::InvalidArgumentError(
        "the plan carries no loss weights and no step token count "
        "(total_tokens) to derive them from");
  }
  std::vector<double> weights;
  weights.reserve(task.lengths.size());
  for (int64_t length : task.lengths) {
    weights.push_back(static_cast<double>(length) /
                      static_cast<double>(plan.step_tokens));
  }
  return weights;
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
  if (options_.world_size == 1) return RunStep(plan, nullptr, options);
  absl::StatusOr<c10d::ProcessGroup*> world = groups_->DataParallel(
      options_.world_size, plan.epoch,
      absl::StrCat(options_.session_id, "/e", plan.epoch, "/dp"));
  if (!world.ok()) return Annotate(world.status(), Where(plan));
  RETURN_IF_ERROR(FormTaskGroups(plan));
  return RunStep(plan, *world, options);
}

absl::Status RankTrainer::FormTaskGroups(const RankPlan& plan) {
  for (const RankTask& task : plan.tasks) {
    if (task.group_ranks.size() < 2) continue;
    absl::StatusOr<CommKey> key = CommKey::Make(task.group_ranks, plan.epoch);
    absl::Status formed = key.status();
    if (key.ok()) formed = groups_->Get(*key, task.rendezvous_prefix).status();
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
    if (IsCommunicationFailure(status)) {
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
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  if (p > 1) {
    if (groups_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("a task of ", p,
                       " ranks needs process groups; this trainer has none"));
    }
    ASSIGN_OR_RETURN(CommKey key, CommKey::Make(task.group_ranks, plan.epoch));
    ASSIGN_OR_RETURN(c10d::ProcessGroup * raw,
                     groups_->Get(key, task.rendezvous_prefix));
    group =
        c10::intrusive_ptr<c10d::ProcessGroup>::unsafe_reclaim_from_nonowning(
            raw);
  }
  absl::StatusOr<TaskShard> shard =
      absl::AbortedError("refused: an earlier task of this rank failed");
  if (!refuse) {
    absl::StatusOr<PackedTask> packed = Materialise(plan, task);
    shard =
        packed.ok() ? ShardTask(*packed, p, task.group_rank) : packed.status();
  }
  if (!shard.ok()) {
    // An empty shard is refused in the group's first collective, so the
    // peers fail at once instead of waiting for this rank's exchange.
    if (group) model_->Run(TaskShard(), group).status().IgnoreError();
    return shard.status();
  }
  ASSIGN_OR_RETURN(TaskResult result, model_->Run(*shard, group));
  RETURN_IF_ERROR(Backward(result.loss));
  try {
    outcome.loss += result.loss.item<double>();
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("reading the task's loss failed: ", ExceptionText(e)));
  }
  outcome.tokens += task.shard.real_tokens;
  return absl::OkStatus();
}

absl::StatusOr<PackedTask> RankTrainer::Materialise(
    const RankPlan& plan, const RankTask& task) const {
  const size_t n = task.samples.size();
  if (n == 0 || task.lengths.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the task has ", n, " samples and ", task.lengths.size(), " lengths"));
  }
  PackedTask packed;
  packed.recompute_ratio = task.recompute;
  ASSIGN_OR_RETURN(packed.loss_weights, LossWeights(plan, task));
  const bool causal = options_.model.model.causal;
  const int64_t dim = causal ? 1 : options_.corpus.feature_dim;
  const int64_t total = task.total_tokens;
  // Only the samples this rank's shard overlaps are made; the others stay
  // zeros, which ShardTask cuts away.
  const int64_t begin = task.shard.begin;
  const int64_t end = begin + task.shard.real_tokens;
  std::vector<int64_t> tokens_in, tokens_out;
  std::vector<float> features_in, features_out;
  if (causal) {
    tokens_in.assign(total, 0);
    tokens_out.assign(total, 0);
  } else {
    features_in.assign(total * dim, 0.0f);
    features_out.assign(total * dim, 0.0f);
  }
  packed.cu_seqlens = {0};
  for (size_t i = 0; i < n; ++i) {
    const int64_t offset = packed.cu_seqlens.back();
    const int64_t length = task.lengths[i];
    if (length <= 0 || offset + length > total) {
      return absl::InvalidArgumentError(
          absl::StrCat("sample ", task.samples[i], " has length ", length,
                       " in a pack of ", total, " tokens"));
    }
    packed.cu_seqlens.push_back(offset + length);
    if (offset >= end || offset + length <= begin) continue;
    if (causal) {
      ASSIGN_OR_RETURN(TokenSample sample,
                       corpus_.Tokens(task.samples[i], length));
      std::copy(sample.inputs.begin(), sample.inputs.end(),
                tokens_in.begin() + offset);
      std::copy(sample.targets.begin(), sample.targets.end(),
                tokens_out.begin() + offset);
    } else {
      ASSIGN_OR_RETURN(FeatureSample sample,
                       corpus_.Features(task.samples[i], length));
      std::copy(sample.features.begin(), sample.features.end(),
                features_in.begin() + offset * dim);
      std::copy(sample.targets.begin(), sample.targets.end(),
                features_out.begin() + offset * dim);
    }
  }
  if (packed.cu_seqlens.back() != total) {
    return absl::InvalidArgumentError(
        absl::StrCat("the samples' lengths add up to ",
                     packed.cu_seqlens.back(), ", the task to ", total));
  }
  try {
    if (causal) {
      packed.inputs = at::tensor(tokens_in, at::kLong);
      packed.targets = at::tensor(tokens_out, at::kLong);
    } else {
      const at::ScalarType dtype = options_.model.dtype;
      packed.inputs =
          at::tensor(features_in, at::kFloat).view({total, dim}).to(dtype);
      packed.targets =
          at::tensor(features_out, at::kFloat).view({total, dim}).to(dtype);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("packing the task failed: ", ExceptionText(e)));
  }
  return packed;
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
  } catch (const std::exception& e) {
    gradients_.clear();
    return absl::InternalError(
        absl::StrCat("the optimizer step failed: ", ExceptionText(e)));
  }
  return stats;
}

void RankTrainer::ZeroGradients() {
  for (at::Tensor& p : model_->parameters()) p.mutable_grad() = at::Tensor();
}

}  // namespace dcp::train
