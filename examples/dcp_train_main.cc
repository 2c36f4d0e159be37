// dcp-train: trains the libtorch model of train/ on the synthetic corpus,
// over the global batches dcp plans for a length trace, in one of two ways
// that give the same loss at every step (up to float rounding):
//
//   --mode=single   one process runs every step's plan whole
//                   (RankTrainer::ReferenceStep): a plain training loop;
//   --mode=dcp      one rank of a dcp job: its plans come from a
//                   dcp-scheduler through client_lib, its sequence-parallel
//                   groups and gradient all-reduce are c10d Gloo groups
//                   formed through the scheduler's rendezvous store.
//
//   dcp-train --mode=single --steps=100 --loss_log=/tmp/single.jsonl
//   dcp-train --mode=dcp --local_world=4 --steps=100 --loss_log=/tmp/dcp.jsonl
//   dcp-train --mode=dcp --scheduler=10.0.0.1:50051 --rank=3 --world_size=8
//
// `--local_world=N` runs a whole job on this host: a dcp-scheduler in this
// process (planning the trace for N ranks, --steps steps) and N child
// processes of this binary as its ranks. Both modes draw the same batches
// (the step builder's seeded shuffle and token budget, as dcp-plan and
// dcp-scheduler do) and start from the same weights (--seed). Rank 0 writes
// --loss_log: one JSON line a step, {"step","loss","grad_norm","tokens"}.
// With --local_world, --plan_log gets one JSON line a planned step, each
// task's group size and Ulysses degree, and the launcher's last line counts
// the planned tasks by those two (a task of more ranks than the model has
// heads runs Ulysses inside a ring).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ATen/Parallel.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client_lib/client.h"
#include "comm/process_groups.h"
#include "common/clock.h"
#include "common/model_spec.h"
#include "common/security_flags.h"
#include "common/status_macros.h"
#include "common/subprocess.h"
#include "examples/local_planner.h"
#include "examples/loss_log.h"
#include "nlohmann/json.hpp"
#include "proto/plan.pb.h"
#include "scheduler/cli/job_config.h"
#include "scheduler/server/scheduler_server.h"
#include "train/rank_plan.h"
#include "train/torch_threads.h"
#include "train/trainer.h"

// The job: dcp-plan's flags, with defaults a CPU trains in seconds.
ABSL_FLAG(std::string, mode, "single", "single (one process) or dcp (a rank).");
ABSL_FLAG(std::string, lengths, "data/lengths/wikipedia.txt",
          "Length trace the batches are drawn from (the scheduler's, in dcp "
          "mode).");
ABSL_FLAG(std::string, format, "auto",
          "Format of --lengths: text, csv, tsv, jsonl, npy, idx, video_csv, "
          "or auto (by extension).");
ABSL_FLAG(std::string, column, "", "CSV/TSV column or JSONL field of lengths.");
ABSL_FLAG(std::string, model_config, "data/models/cpu-tiny.json",
          "JSON model description (common/model_spec.h) to train.");
ABSL_FLAG(int64_t, window, 128,
          "Context window; longer samples are truncated.");
ABSL_FLAG(int64_t, tokens_per_step, 512, "Token budget of a global batch.");
ABSL_FLAG(uint64_t, seed, 0,
          "Seed of the sample shuffle (as dcp-plan's --seed), of the initial "
          "weights and of the synthetic corpus.");
ABSL_FLAG(int, balance_steps, 0,
          "Steps the step builder looks ahead to even out steps (0 = off); "
          "it changes which samples a step holds.");
ABSL_FLAG(std::string, plan_costs, "llama3-8b",
          "Built-in model whose data-sheet costs the planner starts from, "
          "with --model_config's head counts (empty: --model_config's own). "
          "On an H200 a tiny model's costs are almost all fixed overhead and "
          "the planner keeps each sequence on one rank; a large model's make "
          "it plan the sequence-parallel groups it would plan for that "
          "model. It changes how each step is packed, not which samples it "
          "holds.");
ABSL_FLAG(int64_t, steps, 100,
          "Steps to train (single mode, and the scheduler --local_world "
          "starts); a rank of another scheduler trains until it drains.");
// The training.
ABSL_FLAG(std::string, text, "",
          "Train on windows of this text file (bytes as tokens; the model "
          "needs vocab >= 256), e.g. /usr/share/common-licenses/GPL-3, "
          "instead of the synthetic corpus's rules.");
ABSL_FLAG(std::string, dtype, "float32", "float32 or float64.");
ABSL_FLAG(double, lr, 1e-2, "AdamW learning rate.");
ABSL_FLAG(int, threads, 1, "libtorch intra-op threads of each process.");
ABSL_FLAG(std::string, loss_log, "",
          "Write one JSON line per step here (rank 0 in dcp mode).");
// A rank (--mode=dcp).
ABSL_FLAG(std::string, scheduler, "", "dcp mode: host:port of dcp-scheduler.");
ABSL_FLAG(int, rank, -1, "dcp mode: this process's global rank.");
ABSL_FLAG(int, world_size, 0,
          "Ranks of the job: dcp mode, the scheduler's world; single mode, "
          "the world the local planner plans for (0 = 1).");
ABSL_FLAG(int, local_world, 0,
          "dcp mode: start a scheduler in this process and this many ranks "
          "as child processes, instead of being one rank.");
ABSL_FLAG(std::string, plan_log, "",
          "--local_world: write one JSON line per step the scheduler plans "
          "here, {\"epoch\":E,\"step\":S,\"tasks\":[{\"group_size\":P,"
          "\"ulysses\":U,\"recompute\":R},...]} in execution order (U < P: "
          "U-way Ulysses inside a ring of P / U).");
ABSL_FLAG(bool, cpu_clock, false,
          "Time steps on the process's CPU clock rather than the wall clock "
          "(--local_world's ranks do: they share this host's cores).");

namespace dcp::examples {
namespace {

using train::RankTrainer;
using train::RankTrainerOptions;
using train::StepStats;

// A plain training loop in one process: each planned step run whole.
absl::Status TrainSingle(RankTrainerOptions training, LocalPlanner& planner,
                         int64_t steps, LossLog& log) {
  ASSIGN_OR_RETURN(auto trainer, RankTrainer::Create(training, nullptr));
  for (int64_t i = 0; i < steps; ++i) {
    ASSIGN_OR_RETURN(v1::StepPlan plan, planner.Next());
    ASSIGN_OR_RETURN(StepStats stats, trainer->ReferenceStep(plan));
    RETURN_IF_ERROR(log.Write(stats));
  }
  return absl::OkStatus();
}

// Runs `step` (its `plan`) on `trainer`: its stats, or nullopt when it was
// given up because a peer is gone (client_lib's `IsPeerLoss`; the weights
// are those before it). The groups of earlier epochs are released first,
// and those of the step's epoch once it is given up, so that the peers'
// collectives on them fail at once.
absl::StatusOr<std::optional<StepStats>> RunOrGiveUp(RankTrainer& trainer,
                                                     ProcessGroups& groups,
                                                     const Step& step,
                                                     const RankPlan& plan) {
  groups.EvictBefore(step.epoch);
  absl::StatusOr<StepStats> stats = trainer.Step(plan);
  if (stats.ok()) return std::optional<StepStats>(*std::move(stats));
  if (!IsPeerLoss(stats.status())) return stats.status();
  absl::FPrintF(stderr, "dcp-train: rank %d gave up step %d of epoch %d: %s\n",
                plan.rank, step.step, step.epoch, stats.status().ToString());
  groups.EvictBefore(step.epoch + 1);
  return std::optional<StepStats>();
}

// The same loop as one rank of a dcp job (README.md quotes both): its part
// of each step from the scheduler, run on c10d groups formed through the
// scheduler's rendezvous store, its timings reported back. It trains until
// the scheduler drains the job.
//
// A step given up because a peer is gone is not reported, and the rank goes
// on at the scheduler's next epoch (`Client::NextEpoch`;
// --on_rank_failure=shrink re-plans the steps not completed for the ranks
// left). That epoch's first step undoes the abandoned steps this rank
// applied and takes the new world's state (`RankTrainer::Step`).
absl::Status TrainRank(RankTrainerOptions training,
                       ClientOptions client_options,
                       ProcessGroups::Options group_options, LossLog& log) {
  ASSIGN_OR_RETURN(auto client, Client::Connect(std::move(client_options)));
  ASSIGN_OR_RETURN(auto groups, ProcessGroups::Create(
                                    client->rendezvous_store(), group_options));
  training.session_id = client->session_id();
  ASSIGN_OR_RETURN(auto trainer, RankTrainer::Create(training, groups.get()));
  bool lost = false;  // A peer is gone: on to the next epoch.
  while (true) {
    ASSIGN_OR_RETURN(Step step, lost ? client->NextEpoch() : client->NextStep());
    if (step.drained) break;
    ASSIGN_OR_RETURN(RankPlan plan, RankPlanFromRankStep(step.plan));
    ASSIGN_OR_RETURN(std::optional<StepStats> stats,
                     RunOrGiveUp(*trainer, *groups, step, plan));
    lost = !stats.has_value();
    if (lost) continue;
    RETURN_IF_ERROR(
        client->ReportStep(step, stats->task_seconds, stats->sync_seconds));
    RETURN_IF_ERROR(log.Write(*stats));
  }
  return absl::OkStatus();
}

// ---- Flags ---------------------------------------------------------------

// An input named on the command line (or a default under data/), from any
// working directory.
std::string Resolved(const std::string& path) {
  return ResolveInput(path, BazelWorkingDirectory());
}

// The contents of --text ("" without it).
absl::StatusOr<std::string> TextFromFlags() {
  const std::string flag = absl::GetFlag(FLAGS_text);
  if (flag.empty()) return std::string();
  const std::string path = Resolved(flag);
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--text=", flag, ": cannot read ", path));
  }
  if (text.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--text=", flag, ": no text in ", path));
  }
  return text;
}

absl::StatusOr<ModelSpec> ModelFromFlags() {
  const std::string path = absl::GetFlag(FLAGS_model_config);
  if (path.empty()) {
    return absl::InvalidArgumentError("--model_config is required");
  }
  absl::StatusOr<ModelSpec> model = LoadModelConfig(Resolved(path));
  if (!model.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model_config=", path, ": ", model.status().message()));
  }
  return model;
}

// The job's trace and batch shape, checked; `world` ranks.
absl::StatusOr<TrainJob> JobFromFlags(int world) {
  TrainJob job;
  job.window = absl::GetFlag(FLAGS_window);
  job.tokens_per_step = absl::GetFlag(FLAGS_tokens_per_step);
  job.seed = absl::GetFlag(FLAGS_seed);
  job.balance_steps = absl::GetFlag(FLAGS_balance_steps);
  job.world_size = world;
  if (job.window <= 0) {
    return absl::InvalidArgumentError("--window must be positive");
  }
  if (job.tokens_per_step <= 0) {
    return absl::InvalidArgumentError("--tokens_per_step must be positive");
  }
  if (job.balance_steps < 0) {
    return absl::InvalidArgumentError("--balance_steps must be >= 0");
  }
  ASSIGN_OR_RETURN(job.model, ModelFromFlags());
  const std::string costs = absl::GetFlag(FLAGS_plan_costs);
  if (!costs.empty()) {
    absl::StatusOr<ModelSpec> cost_model = BuiltinModel(costs);
    if (!cost_model.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--plan_costs=", costs, ": ", cost_model.status().message()));
    }
    cost_model->heads = job.model.heads;
    cost_model->kv_heads = job.model.kv_heads;
    job.cost_model = *std::move(cost_model);
  }
  const std::string path = absl::GetFlag(FLAGS_lengths);
  if (path.empty()) return absl::InvalidArgumentError("--lengths is required");
  absl::StatusOr<std::vector<int32_t>> lengths = LoadLengths(
      Resolved(path), absl::GetFlag(FLAGS_format), absl::GetFlag(FLAGS_column));
  if (!lengths.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lengths=", path, ": ", lengths.status().message()));
  }
  if (lengths->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lengths=", path, ": no lengths"));
  }
  job.lengths = *std::move(lengths);
  return job;
}

// The model, corpus and optimizer every mode trains with; rank `rank` of
// `world`. The session is the scheduler's (TrainRank sets it).
absl::StatusOr<RankTrainerOptions> TrainerFromFlags(int world, int rank) {
  RankTrainerOptions o;
  ASSIGN_OR_RETURN(o.model.model, ModelFromFlags());
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype == "float32") {
    o.model.dtype = at::kFloat;
  } else if (dtype == "float64") {
    o.model.dtype = at::kDouble;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype=", dtype, ": must be float32 or float64"));
  }
  o.model.seed = absl::GetFlag(FLAGS_seed);
  o.corpus.vocab = o.model.model.vocab;
  o.corpus.feature_dim = o.model.model.hidden;  // The DiT variant's features.
  o.corpus.seed = absl::GetFlag(FLAGS_seed);
  ASSIGN_OR_RETURN(o.corpus.text, TextFromFlags());
  o.optimizer.lr = absl::GetFlag(FLAGS_lr);
  if (!(o.optimizer.lr > 0)) {
    return absl::InvalidArgumentError("--lr must be positive");
  }
  o.world_size = world;
  o.rank = rank;
  return o;
}

// --loss_log (when `write`), with stderr lines starting with `prefix` (when
// `echo`).
absl::StatusOr<LossLog> LogFromFlags(bool write, std::string prefix,
                                     bool echo) {
  const std::string path = write ? absl::GetFlag(FLAGS_loss_log) : "";
  absl::StatusOr<LossLog> log =
      LossLog::Open(Resolved(path), std::move(prefix), echo);
  if (!log.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--loss_log=", path, ": ", log.status().message()));
  }
  return log;
}

// ---- The modes -----------------------------------------------------------

absl::Status RunSingle(int64_t steps) {
  const int world = absl::GetFlag(FLAGS_world_size);
  if (world < 0) return absl::InvalidArgumentError("--world_size must be >= 0");
  ASSIGN_OR_RETURN(TrainJob job, JobFromFlags(std::max(world, 1)));
  ASSIGN_OR_RETURN(RankTrainerOptions trainer, TrainerFromFlags(1, 0));
  ASSIGN_OR_RETURN(std::unique_ptr<LocalPlanner> planner,
                   LocalPlanner::Create(std::move(job)));
  ASSIGN_OR_RETURN(LossLog log,
                   LogFromFlags(/*write=*/true, "", /*echo=*/true));
  const absl::Time start = absl::Now();
  RETURN_IF_ERROR(TrainSingle(std::move(trainer), *planner, steps, log));
  absl::FPrintF(stderr, "dcp-train: one process: %s in %.1f s\n", log.Summary(),
                absl::ToDoubleSeconds(absl::Now() - start));
  return absl::OkStatus();
}

absl::Status RunRank() {
  const std::string scheduler = absl::GetFlag(FLAGS_scheduler);
  const int rank = absl::GetFlag(FLAGS_rank);
  const int world = absl::GetFlag(FLAGS_world_size);
  if (scheduler.empty()) {
    return absl::InvalidArgumentError(
        "--mode=dcp needs --scheduler=HOST:PORT (or --local_world=N)");
  }
  if (world <= 0 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--mode=dcp needs 0 <= --rank < --world_size; got --rank=", rank,
        " --world_size=", world));
  }
  ASSIGN_OR_RETURN(RankTrainerOptions trainer, TrainerFromFlags(world, rank));
  ProcessCpuClock cpu_clock;
  if (absl::GetFlag(FLAGS_cpu_clock)) trainer.clock = &cpu_clock;
  ClientOptions client;
  client.mode = ClientOptions::Mode::kInProcess;
  client.agent.scheduler_address = scheduler;
  // --tls_ca, --tls_cert, --tls_key, --auth_token_file, --job_id, --insecure.
  client.agent.security = SecurityOptionsFromFlags();
  client.agent.rank = rank;
  client.agent.world_size = world;
  client.form_groups = false;  // The trainer forms its own c10d groups.
  ProcessGroups::Options groups;
  groups.rank = rank;
  const std::string prefix = absl::StrCat("rank ", rank, ": ");
  ASSIGN_OR_RETURN(LossLog log, LogFromFlags(/*write=*/rank == 0, prefix,
                                             /*echo=*/rank == 0));
  const absl::Time start = absl::Now();
  RETURN_IF_ERROR(
      TrainRank(std::move(trainer), std::move(client), groups, log));
  absl::FPrintF(stderr, "dcp-train: %s%s in %.1f s\n", prefix, log.Summary(),
                absl::ToDoubleSeconds(absl::Now() - start));
  return absl::OkStatus();
}

// What the scheduler planned, counted as it plans (on its planner thread).
struct PlannedCounts {
  std::atomic<int64_t> steps{0};
  std::atomic<int64_t> tasks{0};
  // Steps with at least one task over a sequence-parallel group (p > 1).
  std::atomic<int64_t> grouped_steps{0};
  absl::Mutex mu;
  // Tasks by (group size p, Ulysses degree u).
  std::map<std::pair<int, int>, int64_t> shapes ABSL_GUARDED_BY(mu);
  // --plan_log (null without it), and whether every write to it succeeded.
  std::unique_ptr<std::ofstream> plan_log ABSL_GUARDED_BY(mu);
  bool plan_log_ok ABSL_GUARDED_BY(mu) = true;
};

// `e`'s --plan_log line.
std::string PlanLogLine(const PlannedStepEvent& e) {
  nlohmann::ordered_json tasks = nlohmann::ordered_json::array();
  for (size_t i = 0; i < e.task_group_sizes.size(); ++i) {
    tasks.push_back({{"group_size", e.task_group_sizes[i]},
                     {"ulysses", e.task_ulysses[i]},
                     {"recompute", e.task_recompute[i]}});
  }
  const nlohmann::ordered_json line = {
      {"epoch", e.epoch}, {"step", e.step}, {"tasks", std::move(tasks)}};
  return line.dump();
}

// The planned tasks by shape, e.g. "1 rank: 20, 2 ranks (u=2): 5, 4 ranks
// (u=2, ring of 2): 3": a ring shows as u < p.
std::string ShapeSummary(PlannedCounts& counts) {
  absl::MutexLock lock(&counts.mu);
  std::vector<std::string> parts;
  for (const auto& [shape, tasks] : counts.shapes) {
    const auto [p, u] = shape;
    std::string part = absl::StrCat(p, p == 1 ? " rank" : " ranks");
    if (p > 1) absl::StrAppend(&part, " (u=", u);
    if (u < p) absl::StrAppend(&part, ", ring of ", p / u);
    if (p > 1) absl::StrAppend(&part, ")");
    parts.push_back(absl::StrCat(part, ": ", tasks));
  }
  return absl::StrJoin(parts, ", ");
}

// The scheduler --local_world starts, planning `job` for `steps` steps. It
// draws the batches LocalPlanner does: ControlPlane::Start gives its step
// builder the window, budget, seed and balance_steps set here, and its
// planner starts from the same cost model. Its other options
// (lookahead_steps, refits from the ranks' timings) change when a step is
// planned and how its samples are packed and placed, never which samples
// it holds, so they keep the daemon's defaults.
SchedulerServerOptions SchedulerOptions(TrainJob job, int64_t steps,
                                        std::shared_ptr<PlannedCounts> counts) {
  SchedulerServerOptions options;
  options.listen_address = "127.0.0.1:0";
  ControlPlaneOptions& cp = options.control_plane;
  cp.cost_model = InitialCostModel(job);
  cp.lengths = std::move(job.lengths);
  cp.window = job.window;
  cp.tokens_per_step = job.tokens_per_step;
  cp.seed = job.seed;
  cp.balance_steps = job.balance_steps;
  cp.model = std::move(job.model);
  cp.world_size = job.world_size;
  cp.max_steps = steps;
  cp.profile_at_start = false;  // The ranks answer no profile request.
  cp.on_step_planned = [counts](const PlannedStepEvent& e) {
    counts->steps += 1;
    counts->tasks += e.tasks;
    if (e.groups > 0) counts->grouped_steps += 1;
    absl::MutexLock lock(&counts->mu);
    for (size_t i = 0; i < e.task_group_sizes.size(); ++i) {
      counts->shapes[{e.task_group_sizes[i], e.task_ulysses[i]}] += 1;
    }
    if (counts->plan_log != nullptr) {
      *counts->plan_log << PlanLogLine(e) << "\n" << std::flush;
      if (!counts->plan_log->good()) counts->plan_log_ok = false;
    }
  };
  return options;
}

// This binary as rank `rank` of the scheduler at `address`, with this
// process's training flags.
std::vector<std::string> RankArgv(const std::string& self,
                                  const std::string& address, int rank,
                                  int world) {
  const std::string log =
      rank == 0 ? Resolved(absl::GetFlag(FLAGS_loss_log)) : "";
  return {self,
          "--mode=dcp",
          absl::StrCat("--scheduler=", address),
          absl::StrCat("--rank=", rank),
          absl::StrCat("--world_size=", world),
          absl::StrCat("--model_config=",
                       Resolved(absl::GetFlag(FLAGS_model_config))),
          absl::StrCat("--dtype=", absl::GetFlag(FLAGS_dtype)),
          absl::StrFormat("--lr=%.17g", absl::GetFlag(FLAGS_lr)),
          absl::StrCat("--seed=", absl::GetFlag(FLAGS_seed)),
          absl::StrCat("--text=", absl::GetFlag(FLAGS_text).empty()
                                      ? ""
                                      : Resolved(absl::GetFlag(FLAGS_text))),
          absl::StrCat("--threads=", absl::GetFlag(FLAGS_threads)),
          "--cpu_clock=true",
          absl::StrCat("--loss_log=", log)};
}

absl::Status RunLocalWorld(int world, int64_t steps) {
  if (!absl::GetFlag(FLAGS_scheduler).empty() ||
      absl::GetFlag(FLAGS_rank) >= 0) {
    return absl::InvalidArgumentError(
        "--local_world starts its own scheduler and ranks: drop --scheduler "
        "and --rank");
  }
  const int world_flag = absl::GetFlag(FLAGS_world_size);
  if (world_flag != 0 && world_flag != world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--world_size=", world_flag, " disagrees with --local_world=", world));
  }
  ASSIGN_OR_RETURN(TrainJob job, JobFromFlags(world));
  // What every rank would refuse, refused once before anything starts.
  RETURN_IF_ERROR(TrainerFromFlags(world, 0).status());
  RETURN_IF_ERROR(LogFromFlags(/*write=*/true, "", /*echo=*/false).status());
  auto counts = std::make_shared<PlannedCounts>();
  const std::string plan_log = absl::GetFlag(FLAGS_plan_log);
  if (!plan_log.empty()) {
    auto out =
        std::make_unique<std::ofstream>(Resolved(plan_log), std::ios::trunc);
    if (!out->is_open()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--plan_log=", plan_log, ": cannot open ",
                       Resolved(plan_log), " for writing"));
    }
    absl::MutexLock lock(&counts->mu);
    counts->plan_log = std::move(out);
  }
  ASSIGN_OR_RETURN(std::string self, subprocess::SelfExecutable());
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(
      std::unique_ptr<SchedulerServer> server,
      SchedulerServer::Start(SchedulerOptions(std::move(job), steps, counts)));
  absl::FPrintF(stderr, "dcp-train: scheduler on %s, session %s; %d ranks\n",
                server->address(), server->control_plane().session_id(), world);
  // On this process's stdout and stderr; Wait kills the rest when one fails.
  subprocess::Children ranks;
  for (int r = 0; r < world; ++r) {
    RETURN_IF_ERROR(ranks.Start(absl::StrCat("rank ", r),
                                RankArgv(self, server->address(), r, world)));
  }
  const absl::Status done = ranks.Wait();
  server->Shutdown();
  RETURN_IF_ERROR(done);
  const v1::StatusResponse status = server->control_plane().Status();
  absl::FPrintF(stderr,
                "dcp-train: %d ranks trained %d steps in %.1f s; the scheduler "
                "planned %d tasks (%d of %d steps used sequence-parallel "
                "groups) and refitted its cost model %d times\n",
                world, status.completed_steps(),
                absl::ToDoubleSeconds(absl::Now() - start),
                counts->tasks.load(), counts->grouped_steps.load(),
                counts->steps.load(), status.refits());
  absl::FPrintF(stderr, "dcp-train: planned tasks by group: %s\n",
                ShapeSummary(*counts));
  absl::MutexLock lock(&counts->mu);
  if (!counts->plan_log_ok) {
    return absl::DataLossError(absl::StrCat(
        "--plan_log=", plan_log, ": cannot write to ", Resolved(plan_log)));
  }
  return absl::OkStatus();
}

absl::Status Run() {
  const int threads = absl::GetFlag(FLAGS_threads);
  if (threads < 1) return absl::InvalidArgumentError("--threads must be >= 1");
  const int64_t steps = absl::GetFlag(FLAGS_steps);
  if (steps <= 0) return absl::InvalidArgumentError("--steps must be positive");
  const std::string mode = absl::GetFlag(FLAGS_mode);
  const int local_world = absl::GetFlag(FLAGS_local_world);
  if (mode != "single" && mode != "dcp") {
    return absl::InvalidArgumentError(
        absl::StrCat("--mode=", mode, ": must be single or dcp"));
  }
  if (local_world < 0 || (local_world > 0 && mode != "dcp")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--local_world=", local_world,
                     ": must be a positive rank count, with --mode=dcp"));
  }
  const std::string plan_log = absl::GetFlag(FLAGS_plan_log);
  if (!plan_log.empty() && local_world == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--plan_log=", plan_log,
                     ": needs --mode=dcp --local_world=N (the scheduler "
                     "it starts writes it)"));
  }
  train::SetTorchThreads(threads);
  if (mode == "single") return RunSingle(steps);
  if (local_world > 0) return RunLocalWorld(local_world, steps);
  return RunRank();
}

}  // namespace
}  // namespace dcp::examples

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Trains train/'s model over dcp's planned batches.\n"
      "  dcp-train --mode=single|dcp --lengths=FILE --model_config=FILE "
      "--window=TOKENS\n"
      "    --tokens_per_step=T --steps=N --seed=S --loss_log=FILE "
      "[--dtype=float32|float64] [--lr=LR]\n"
      "    dcp mode: --scheduler=HOST:PORT --rank=R --world_size=N, or "
      "--local_world=N");
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = dcp::examples::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "dcp-train: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
