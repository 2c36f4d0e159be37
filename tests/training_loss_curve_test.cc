// A loss curve of real dcp plans: N steps that the planner made for a world
// of 4 over a bundled trace, trained from the same initial weights on 4 rank
// processes (RankTrainer::Step; real Gloo; groups formed through an
// in-process SchedulerServer's rendezvous store) and in one process
// (RankTrainer::ReferenceStep), give the same loss at every step, and the
// loss falls.
//
// The test binary is also the rank process: run with `--rank_job` it trains
// one rank over the plans the parent wrote and writes one JSON line per step
// ({"step","loss","grad_norm","tokens"}) under the job's output folder.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ATen/Parallel.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/model_spec.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/plan.pb.h"
#include "scheduler/lengths/length_reader.h"
#include "scheduler/planner/cost_model.h"
#include "scheduler/planner/plan.h"
#include "scheduler/planner/plan_proto.h"
#include "scheduler/planner/planner.h"
#include "scheduler/planner/step_builder.h"
#include "scheduler/server/scheduler_server.h"
#include "tests/child_process.h"
#include "tests/rank_processes.h"
#include "train/rank_plan.h"
#include "train/torch_threads.h"
#include "train/trainer.h"

namespace dcp {
namespace {

using train::RankTrainer;
using train::RankTrainerOptions;
using train::StepStats;

constexpr char kSession[] = "curve";
constexpr int kWorld = 4;
constexpr int64_t kSteps = 100;
// With a window of 64 every trace sample is short enough that the planner
// keeps it on one rank; at 128 most tasks run over groups of 2 and 4.
constexpr int64_t kWindow = 128;
constexpr int64_t kTokensPerStep = 512;
constexpr char kTrace[] = "data/lengths/wikipedia.txt";
constexpr double kLossTolerance = 1e-7;  // Relative, float64.
constexpr absl::Duration kGroupTimeout = absl::Seconds(60);

ModelSpec TinyModel() {
  ModelSpec m;
  m.name = "tiny";
  m.layers = 2;
  m.hidden = 32;
  m.heads = 4;
  m.kv_heads = 2;
  m.ffn = 64;
  m.vocab = 64;
  m.causal = true;
  return m;
}

// What the planner plans for: llama3-8b's costs with the tiny model's heads.
// The tiny model's own costs on an H200 are all fixed overhead, so the
// planner would rightly never split a sequence; a large model's costs make
// it place long sequences over groups of 2 and 4 (the divisors of the 4
// heads and the world), plans the tiny model runs as they are.
absl::StatusOr<ModelSpec> PlanningModel() {
  absl::StatusOr<ModelSpec> m = BuiltinModel("llama3-8b");
  if (!m.ok()) return m.status();
  m->heads = TinyModel().heads;
  m->kv_heads = TinyModel().kv_heads;
  return m;
}

RankTrainerOptions TrainerOptions(int world, int rank) {
  RankTrainerOptions o;
  o.model.model = TinyModel();
  o.model.dtype = at::kDouble;
  o.model.seed = 11;
  o.corpus.vocab = o.model.model.vocab;
  o.corpus.seed = 5;
  o.optimizer.lr = 1e-2;
  o.optimizer.weight_decay = 0.1;
  o.world_size = world;
  o.rank = rank;
  o.session_id = kSession;
  return o;
}

std::string PlanPath(const std::string& dir, int64_t step) {
  return absl::StrCat(dir, "/plan.", step, ".pb");
}

std::string StatsPath(const std::string& dir, int rank) {
  return absl::StrCat(dir, "/stats.rank", rank, ".jsonl");
}

absl::StatusOr<v1::StepPlan> ReadPlan(const std::string& dir, int64_t step) {
  v1::StepPlan plan;
  if (!plan.ParseFromString(testing_process::ReadFile(PlanPath(dir, step)))) {
    return absl::DataLossError(
        absl::StrCat("cannot parse ", PlanPath(dir, step)));
  }
  return plan;
}

// ---- The rank process ----------------------------------------------------

// --rank_job <rank> <address> <dir> <steps>. Exit 0: every step trained;
// 3: a step failed (its error on stderr); 2: bad arguments or set-up.
int RankMain(const std::vector<std::string>& args) {
  int rank = -1;
  int64_t steps = 0;
  if (args.size() != 4 || !absl::SimpleAtoi(args[0], &rank) ||
      !absl::SimpleAtoi(args[3], &steps)) {
    return 2;
  }
  const std::string& dir = args[2];
  dcp::train::SetTorchThreads(1);
  absl::StatusOr<testing_ranks::RankGroups> groups =
      testing_ranks::ConnectRankGroups(args[1], kSession, rank, kGroupTimeout);
  if (!groups.ok()) {
    std::cerr << groups.status() << "\n";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<RankTrainer>> trainer =
      RankTrainer::Create(TrainerOptions(kWorld, rank), groups->groups.get());
  if (!trainer.ok()) {
    std::cerr << trainer.status() << "\n";
    return 2;
  }
  std::ofstream out(StatsPath(dir, rank));
  for (int64_t i = 0; i < steps; ++i) {
    absl::StatusOr<v1::StepPlan> plan = ReadPlan(dir, i);
    absl::StatusOr<RankPlan> mine =
        plan.ok() ? RankPlanFromStep(*plan, rank)
                  : absl::StatusOr<RankPlan>(plan.status());
    absl::StatusOr<StepStats> stats =
        mine.ok() ? (*trainer)->Step(*mine)
                  : absl::StatusOr<StepStats>(mine.status());
    if (!stats.ok()) {
      std::cerr << "step " << i << ": " << stats.status() << "\n";
      return 3;
    }
    const nlohmann::json line = {{"step", stats->step},
                                 {"loss", stats->loss},
                                 {"grad_norm", stats->grad_norm},
                                 {"tokens", stats->tokens}};
    out << line.dump() << "\n" << std::flush;
  }
  return out.good() ? 0 : 2;
}

// ---- The parent ----------------------------------------------------------

// The first `steps` plans dcp would run for a world of 4 over the trace:
// the step builder's batches (dcp-plan's shuffle and budget), planned with
// `PlanningModel`'s costs, in the wire form with the rendezvous
// prefixes a scheduler gives the groups.
absl::StatusOr<std::vector<v1::StepPlan>> MakePlans(
    const std::vector<int32_t>& lengths, int64_t steps) {
  const LengthView view(lengths, kWindow);
  StepBuilderOptions builder;
  builder.tokens_per_step = kTokensPerStep;
  builder.seed = 42;
  absl::StatusOr<std::vector<std::vector<int64_t>>> batches =
      BuildSteps(view, builder, steps);
  if (!batches.ok()) return batches.status();
  PlannerOptions planner_options;
  planner_options.world_size = kWorld;
  absl::StatusOr<ModelSpec> planning_model = PlanningModel();
  if (!planning_model.ok()) return planning_model.status();
  absl::StatusOr<Planner> planner = Planner::Create(
      CostModel::FromSpecs(ClusterSpec(), *planning_model, kWorld),
      planner_options);
  if (!planner.ok()) return planner.status();
  std::vector<v1::StepPlan> plans;
  for (int64_t i = 0; i < steps; ++i) {
    absl::StatusOr<StepPlan> plan = planner->PlanStep(i, (*batches)[i], view);
    if (!plan.ok()) return plan.status();
    v1::StepPlan wire = ToProto(*plan, view, /*epoch=*/0);
    for (v1::CommGroup& group : *wire.mutable_groups()) {
      group.set_rendezvous_prefix(
          absl::StrCat(kSession, "/e0/g", absl::StrJoin(group.ranks(), "-")));
    }
    plans.push_back(std::move(wire));
  }
  return plans;
}

std::vector<StepStats> ReadStats(const std::string& path) {
  std::vector<StepStats> out;
  for (absl::string_view line : absl::StrSplit(testing_process::ReadFile(path),
                                               '\n', absl::SkipEmpty())) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << path << ": " << line;
    if (j.is_discarded()) return out;
    StepStats s;
    s.step = j.at("step").get<int64_t>();
    s.loss = j.at("loss").get<double>();
    s.grad_norm = j.at("grad_norm").get<double>();
    s.tokens = j.at("tokens").get<int64_t>();
    out.push_back(s);
  }
  return out;
}

double MeanLoss(const std::vector<StepStats>& stats, size_t from) {
  double sum = 0;
  for (size_t i = from; i < stats.size(); ++i) sum += stats[i].loss;
  return sum / static_cast<double>(stats.size() - from);
}

TEST(TrainingLossCurveTest, RanksTrainPlannedStepsLikeOneProcess) {
  const absl::Time start = absl::Now();
  LengthSourceOptions source;
  source.path = testing_process::Binary(kTrace);
  source.format = GuessLengthFormat(source.path);
  absl::StatusOr<std::vector<int32_t>> lengths = ReadAllLengths(source);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  absl::StatusOr<std::vector<v1::StepPlan>> plans = MakePlans(*lengths, kSteps);
  ASSERT_TRUE(plans.ok()) << plans.status();

  const std::string dir = testing_process::TmpPath("loss_curve");
  std::filesystem::create_directories(dir);
  int64_t multi_rank_tasks = 0, tasks = 0;
  for (const v1::StepPlan& plan : *plans) {
    ASSERT_TRUE(testing_process::WriteFile(PlanPath(dir, plan.step()),
                                           plan.SerializeAsString()));
    for (const v1::Task& task : plan.tasks()) {
      ++tasks;
      if (task.ranks_size() > 1) ++multi_rank_tasks;
    }
  }
  // The plans exercise sequence parallelism, not only data parallelism.
  EXPECT_GT(multi_rank_tasks, 0);

  absl::StatusOr<std::unique_ptr<SchedulerServer>> server =
      testing_ranks::StartRendezvousServer(kWorld, kSession);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<testing_process::Child> ranks;
  testing_process::ChildReaper reaper({&ranks});
  for (int r = 0; r < kWorld; ++r) {
    ranks.push_back(testing_process::Spawn(
        absl::StrCat("rank", r),
        {testing_ranks::SelfPath(), "--rank_job", absl::StrCat(r),
         (*server)->address(), dir, absl::StrCat(kSteps)}));
  }

  // The reference runs while the ranks do.
  RankTrainerOptions options = TrainerOptions(/*world=*/1, /*rank=*/0);
  absl::StatusOr<std::unique_ptr<RankTrainer>> reference =
      RankTrainer::Create(options, nullptr);
  ASSERT_TRUE(reference.ok()) << reference.status();
  std::vector<StepStats> want;
  for (const v1::StepPlan& plan : *plans) {
    absl::StatusOr<StepStats> stats = (*reference)->ReferenceStep(plan);
    ASSERT_TRUE(stats.ok()) << stats.status();
    want.push_back(*stats);
  }

  ASSERT_TRUE(testing_process::ExpectAllExit(
      ranks, absl::Now() + absl::Minutes(4), "the rank processes"));
  for (const testing_process::Child& rank : ranks) {
    ASSERT_EQ(rank.exit_code, 0) << testing_process::Describe(ranks);
  }

  double worst = 0;
  int64_t worst_step = -1;
  std::vector<StepStats> rank0;
  for (int r = 0; r < kWorld; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    const std::vector<StepStats> got = ReadStats(StatsPath(dir, r));
    ASSERT_EQ(got.size(), want.size());
    if (r == 0) rank0 = got;
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE(absl::StrCat("step ", i));
      EXPECT_EQ(got[i].step, want[i].step);
      EXPECT_EQ(got[i].tokens, want[i].tokens);
      // Every rank reports the world's loss and norm, bit for bit.
      EXPECT_EQ(got[i].loss, rank0[i].loss);
      EXPECT_EQ(got[i].grad_norm, rank0[i].grad_norm);
      const double rel =
          std::fabs(got[i].loss - want[i].loss) / std::fabs(want[i].loss);
      EXPECT_LE(rel, kLossTolerance) << got[i].loss << " vs " << want[i].loss;
      if (rel >= worst) {
        worst = rel;
        worst_step = static_cast<int64_t>(i);
      }
    }
  }

  // The corpus's rules are table lookups a small model learns in tens of
  // steps (train/corpus.h): its loss falls from about ln(vocab) (above it
  // at a random start) towards the noise's entropy. The last 10 steps must
  // be a quarter of ln(vocab) nats below the first, far more than the
  // step-to-step spread of batches of 512 tokens.
  const double first = want.front().loss;
  const double last10 = MeanLoss(want, want.size() - 10);
  EXPECT_LT(last10, first - 0.25 * std::log(TinyModel().vocab));

  std::cout << "[loss curve] " << kSteps << " steps, " << tasks << " tasks ("
            << multi_rank_tasks << " over groups); reference loss "
            << want.front().loss << " -> " << want.back().loss
            << ", ranks loss " << rank0.front().loss << " -> "
            << rank0.back().loss << "; mean of the last 10 " << last10
            << "; max relative loss difference " << worst << " (step "
            << worst_step << "); " << absl::Now() - start << std::endl;
}

}  // namespace
}  // namespace dcp

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--rank_job") {
    return dcp::RankMain(std::vector<std::string>(argv + 2, argv + argc));
  }
  dcp::train::SetTorchThreads(1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
