#include "worker_agent/model_executor.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/process_groups.h"
#include "common/process_memory.h"
#include "common/profile_point.h"
#include "common/status_macros.h"
#include "proto/timing_report.h"
#include "train/rank_plan.h"
#include "train/torch_threads.h"
#include "train/trainer.h"

namespace dcp {
namespace {

absl::Status CheckOptions(const ModelExecutorOptions& o) {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("model executor options: ", what));
  };
  if (o.rank < 0) return bad("rank must be >= 0");
  if (o.world_size < 1 || o.rank >= o.world_size) {
    return bad(
        absl::StrCat("rank ", o.rank, " is outside a world of ", o.world_size));
  }
  if (o.token_scale < 1) return bad("token_scale must be at least 1");
  if (o.torch_threads < 0) return bad("torch_threads must be >= 0");
  if (o.history < 0) return bad("history must be >= 0");
  if (!(o.learning_rate > 0)) return bad("learning_rate must be positive");
  if (o.group_timeout <= absl::ZeroDuration()) {
    return bad("group_timeout must be positive");
  }
  return absl::OkStatus();
}

train::RankTrainerOptions TrainerOptions(const ModelExecutorOptions& o) {
  train::RankTrainerOptions t;
  t.model.model = o.model;
  t.model.dtype = o.float64 ? at::kDouble : at::kFloat;
  t.model.seed = o.seed;
  t.corpus.vocab = o.model.vocab;
  t.corpus.seed = o.seed;
  t.optimizer.lr = o.learning_rate;
  t.world_size = o.world_size;
  t.rank = o.rank;
  t.session_id = o.session_id;
  t.clock = o.clock;
  t.history = o.history;
  return t;
}

// The timing report of `step` as the scheduler sent it (its tokens, not the
// scaled ones the trainer ran) from the trainer's times.
v1::TimingReport Report(const v1::RankStep& step,
                        const train::StepStats& stats) {
  // A sync the trainer timed is a measurement, however short (0 would say
  // "not measured").
  return TimingReportOf(step, stats.task_seconds,
                        std::max(stats.sync_seconds, kMinReportedTaskSeconds));
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid]
                                : (values[mid - 1] + values[mid]) / 2;
}

// The request's group of `p` ranks that holds `rank`.
const v1::CommGroup* GroupOf(const v1::ProfileRequest& request, int p,
                             int rank) {
  for (const v1::CommGroup& g : request.groups()) {
    if (g.ranks_size() == p &&
        std::find(g.ranks().begin(), g.ranks().end(), rank) != g.ranks().end())
      return &g;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelExecutor>> ModelExecutor::Create(
    ModelExecutorOptions options, RendezvousStoreInterface* store) {
  RETURN_IF_ERROR(CheckOptions(options));
  if (store == nullptr) {
    return absl::InvalidArgumentError("model executor: no rendezvous store");
  }
  if (options.torch_threads > 0) train::SetTorchThreads(options.torch_threads);
  ProcessGroups::Options group_options;
  group_options.rank = options.rank;
  group_options.hostname = options.hostname;
  group_options.timeout = options.group_timeout;
  group_options.dp_timeout = options.world_timeout > absl::ZeroDuration()
                                 ? options.world_timeout
                                 : 3 * options.group_timeout;
  group_options.on_formed = options.on_group_formed;
  ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroups> groups,
                   ProcessGroups::Create(store, group_options));
  ASSIGN_OR_RETURN(
      std::unique_ptr<train::RankTrainer> trainer,
      train::RankTrainer::Create(TrainerOptions(options), groups.get()));
  return std::unique_ptr<ModelExecutor>(new ModelExecutor(
      std::move(options), std::move(groups), std::move(trainer)));
}

ModelExecutor::ModelExecutor(ModelExecutorOptions options,
                             std::unique_ptr<ProcessGroups> groups,
                             std::unique_ptr<train::RankTrainer> trainer)
    : options_(std::move(options)),
      groups_(std::move(groups)),
      trainer_(std::move(trainer)) {}

// The trainer goes first: it holds no group of its own, but runs on them.
ModelExecutor::~ModelExecutor() = default;

absl::StatusOr<StepExecution> ModelExecutor::RunStep(const v1::RankStep& step) {
  if (step.rank() != options_.rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", step.step(), " is for rank ", step.rank(),
                     ", not for this executor's rank ", options_.rank));
  }
  ASSIGN_OR_RETURN(const RankPlan plan, RankPlanFromRankStep(step));
  const RankPlan scaled = ScaledRankPlan(plan, options_.token_scale);
  if (step.epoch() > epoch_) {
    // No collective of an earlier epoch runs again: a new world.
    groups_->EvictBefore(step.epoch());
    epoch_ = step.epoch();
  }
  absl::StatusOr<train::StepStats> ran = trainer_->Step(scaled);
  if (!ran.ok()) {
    if (IsPeerLoss(ran.status())) groups_->EvictBefore(step.epoch() + 1);
    return ran.status();
  }
  const train::StepStats& stats = *ran;
  StepExecution done;
  done.report = Report(step, stats);
  done.loss = stats.loss;
  done.grad_norm = stats.grad_norm;
  done.tokens = stats.tokens;
  done.weights_digest = trainer_->WeightsDigest();
  done.start_digest = stats.start_digest;
  for (size_t m = 0; m < scaled.tasks.size(); ++m) {
    const RankTask& task = scaled.tasks[m];
    ExecutedTask& executed = done.tasks.emplace_back();
    executed.task_index = task.task_index;
    executed.micro_step = task.micro_step;
    executed.group = task.group_ranks;
    executed.samples = task.samples;
    executed.scaled_tokens = task.total_tokens;
    executed.seconds = done.report.tasks(static_cast<int>(m)).seconds();
  }
  return done;
}

absl::StatusOr<v1::Profile> ModelExecutor::RunProfile(
    const v1::ProfileRequest& request) {
  v1::Profile profile;
  ASSIGN_OR_RETURN(const std::vector<ProfileShape> shapes,
                   ProfileShapes(request, options_.model.heads));
  int64_t sample = 0;
  for (int shape = 0; shape < static_cast<int>(shapes.size()); ++shape) {
    const auto [p, u] = shapes[shape];
    const std::string where =
        absl::StrCat("profile, group size ", p, ", Ulysses degree ", u);
    const v1::CommGroup* group = nullptr;
    if (p > 1) {
      group = GroupOf(request, p, options_.rank);
      if (group == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": no group of the request holds rank ", options_.rank));
      }
    }
    const bool reports = group == nullptr || group->ranks(0) == options_.rank;
    for (int64_t length : request.lengths()) {
      for (int i = 0; i < request.recompute_size(); ++i) {
        // The scheduler expects the points of the same rule, no others.
        if (!ProfilePointMeasured(request, length, shape, i)) continue;
        const double recompute = request.recompute(i);
        absl::StatusOr<v1::ProfileEntry> entry =
            ProfilePoint(request, group, u, length, recompute, sample++);
        if (!entry.ok()) {
          return absl::Status(
              entry.status().code(),
              absl::StrCat(where, ", length ", length, ", recompute ",
                           recompute, ": ", entry.status().message()));
        }
        if (reports) *profile.add_entries() = *std::move(entry);
      }
    }
  }
  return profile;
}

absl::StatusOr<v1::ProfileEntry> ModelExecutor::ProfilePoint(
    const v1::ProfileRequest& request, const v1::CommGroup* group,
    int ulysses, int64_t length, double recompute, int64_t sample) {
  // A one-task step, made like a planned one and scaled like one.
  v1::RankStep probe;
  probe.set_epoch(request.epoch());
  probe.set_step(-1);
  probe.set_rank(options_.rank);
  probe.set_total_tokens(length);
  v1::Task& task = *probe.add_tasks();
  task.set_task_index(0);
  task.add_samples(sample);
  task.add_lengths(length);
  task.set_recompute(recompute);
  task.set_ulysses(ulysses);
  if (group != nullptr) {
    task.set_group_id(group->id());
    *task.mutable_ranks() = group->ranks();
    *probe.add_groups() = *group;
  } else {
    task.add_ranks(options_.rank);
  }
  ASSIGN_OR_RETURN(const RankPlan plan, RankPlanFromRankStep(probe));
  const RankPlan scaled = ScaledRankPlan(plan, options_.token_scale);
  std::vector<double> seconds;
  int64_t peak = 0;
  for (int rep = 0; rep < std::max(1, request.repetitions()); ++rep) {
    RETURN_IF_ERROR(ResetPeakResident());
    ASSIGN_OR_RETURN(const int64_t before, ResidentBytes());
    ASSIGN_OR_RETURN(std::vector<double> run, trainer_->Rehearse(scaled));
    ASSIGN_OR_RETURN(const int64_t high, PeakResidentBytes());
    seconds.push_back(run.front());
    peak = std::max(peak, high - before);
  }
  v1::ProfileEntry entry;
  entry.set_length(length);
  entry.set_group_size(group == nullptr ? 1 : group->ranks_size());
  entry.set_recompute(recompute);
  entry.set_ulysses(ulysses);
  entry.set_seconds(std::max(Median(seconds), 1e-9));
  entry.set_memory_bytes(peak);
  return entry;
}

}  // namespace dcp
