// One dcp step on several ranks in separate processes (real Gloo, groups
// formed through a real scheduler's rendezvous store, served by this test on
// 127.0.0.1:0) gives the gradients, loss and parameters of one process that
// runs the whole batch (RankTrainer::ReferenceStep).
//
// The test binary is also the rank process: run with `--rank_job` it trains
// one rank of one case and writes what it computed under the job's output
// folder; the parent compares. Every case runs in float64 (epoch 0) and
// float32 (epoch 1) in the same rank processes.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ATen/Parallel.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/plan.pb.h"
#include "scheduler/server/scheduler_server.h"
#include "tests/child_process.h"
#include "tests/rank_processes.h"
#include "torch/optim/adamw.h"
#include "train/rank_plan.h"
#include "train/torch_threads.h"
#include "train/trainer.h"
#include "train/transformer.h"

namespace dcp {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using train::RankTrainer;
using train::RankTrainerOptions;
using train::StepOptions;
using train::StepStats;

constexpr char kSession[] = "equiv";
constexpr int64_t kStep = 7;
// The groups' formation and collective timeout; a failing case must end
// well within it.
constexpr absl::Duration kGroupTimeout = absl::Seconds(60);

struct TaskSpec {
  std::vector<int> ranks;
  std::vector<int64_t> lengths;
  double recompute = 0;
  // Empty: the trainer derives them (length / step tokens).
  std::vector<double> loss_weights;
  // Task.ulysses: 0 is the whole group (no ring).
  int ulysses = 0;
};

struct Case {
  std::string name;
  int world = 4;
  ModelSpec model;
  std::vector<TaskSpec> tasks;
  // The plan cannot run: every rank must fail.
  bool bad = false;
};

ModelSpec Tiny(int hidden, int heads, int kv_heads, bool causal) {
  ModelSpec m;
  m.name = "tiny";
  m.layers = 2;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.ffn = 2 * hidden;
  m.vocab = causal ? 32 : 0;
  m.causal = causal;
  return m;
}

constexpr int kFeatures = 8;

std::vector<Case> Cases() {
  std::vector<Case> cases;
  // Groups of 4, 2 and 1 in one step; micro-steps 3, 1, 2, 2 on ranks
  // 0..3; recompute 0.5, 1 and 0; GQA (2 kv heads) over 4 members; packs
  // of 22 and 13 tokens over groups of 4 and 2.
  cases.push_back({"mixed_groups",
                   4,
                   Tiny(32, 4, 2, true),
                   {{{0, 1, 2, 3}, {7, 9, 6}, 0.5, {}},
                    {{0}, {5, 4}, 1.0, {}},
                    {{2, 3}, {6, 7}, 0.0, {}},
                    {{0}, {8}, 0.0, {}}}});
  // Rank 3 sits the step out; the plan's own loss weights; the DiT variant.
  cases.push_back({"idle_rank_dit",
                   4,
                   Tiny(32, 4, 2, false),
                   {{{0, 1}, {9, 4}, 0.0, {0.3, 0.1}},
                    {{2}, {6, 5}, 1.0, {0.25, 0.2}},
                    {{0, 1}, {7}, 0.5, {0.15}}}});
  // Six ranks, six heads: groups of 3 (2 kv heads over 3 members), one of
  // 6 and one of 1; packs of 17, 19 and 17 tokens.
  cases.push_back({"groups_of_three",
                   6,
                   Tiny(48, 6, 2, true),
                   {{{0, 1, 2}, {10, 7}, 0.5, {}},
                    {{3, 4, 5}, {5, 6, 8}, 1.0, {}},
                    {{0, 1, 2, 3, 4, 5}, {13, 4}, 0.0, {}},
                    {{4}, {6}, 0.0, {}}}});
  // Ulysses inside rings: 2-way Ulysses in a ring of 2 over ranks 0..3, a
  // ring of 2 (u = 1) and one of 3, beside plain Ulysses over a pair; packs
  // of 25, 13, 13 and 13 tokens, none a multiple of 2 c u.
  cases.push_back({"hybrid_rings",
                   4,
                   Tiny(32, 4, 2, true),
                   {{{0, 1, 2, 3}, {11, 9, 5}, 0.5, {}, 2},
                    {{0, 1}, {7, 6}, 0.0, {}, 1},
                    {{2, 3}, {9, 4}, 1.0, {}, 0},
                    {{1, 2, 3}, {8, 5}, 0.5, {}, 1}}});
  // A group of 3 over 4 heads.
  cases.push_back({"bad_group_size",
                   4,
                   Tiny(32, 4, 2, true),
                   {{{3}, {5}, 0.0, {}}, {{0, 1, 2}, {6, 6}, 0.0, {}}},
                   /*bad=*/true});
  return cases;
}

absl::StatusOr<Case> FindCase(const std::string& name) {
  for (Case& c : Cases()) {
    if (c.name == name) return std::move(c);
  }
  return absl::NotFoundError(absl::StrCat("no case ", name));
}

// The plan a scheduler would send: groups numbered in order of first use,
// prefixes "<session>/e<epoch>/g<ranks>", micro-steps filled in.
v1::StepPlan MakePlan(const Case& c, int64_t epoch) {
  v1::StepPlan plan;
  plan.set_epoch(epoch);
  plan.set_step(kStep);
  std::map<std::vector<int>, int> group_ids;
  std::vector<int> tasks_of_rank(c.world, 0);
  int64_t sample = 100 * epoch;
  int64_t total = 0;
  for (size_t t = 0; t < c.tasks.size(); ++t) {
    const TaskSpec& spec = c.tasks[t];
    v1::Task& task = *plan.add_tasks();
    task.set_task_index(static_cast<int32_t>(t));
    for (int r : spec.ranks) {
      task.add_ranks(r);
      task.add_micro_steps(tasks_of_rank[r]++);
    }
    for (int64_t length : spec.lengths) {
      task.add_samples(sample++);
      task.add_lengths(length);
      plan.add_samples(task.samples(task.samples_size() - 1));
      total += length;
    }
    for (double w : spec.loss_weights) task.add_loss_weights(w);
    task.set_recompute(spec.recompute);
    task.set_ulysses(spec.ulysses);
    if (spec.ranks.size() > 1) {
      auto [it, added] =
          group_ids.emplace(spec.ranks, static_cast<int>(group_ids.size()) + 1);
      if (added) {
        v1::CommGroup& group = *plan.add_groups();
        group.set_id(it->second);
        for (int r : spec.ranks) group.add_ranks(r);
        group.set_rendezvous_prefix(absl::StrCat(
            kSession, "/e", epoch, "/g", absl::StrJoin(spec.ranks, "-")));
      }
      task.set_group_id(it->second);
    }
  }
  plan.set_total_tokens(total);
  return plan;
}

RankTrainerOptions TrainerOptions(const Case& c, at::ScalarType dtype,
                                  int rank) {
  RankTrainerOptions o;
  o.model.model = c.model;
  o.model.dtype = dtype;
  o.model.seed = 11;
  o.model.feature_dim = kFeatures;
  o.corpus.vocab = c.model.vocab > 0 ? c.model.vocab : 1;
  o.corpus.feature_dim = kFeatures;
  o.corpus.seed = 5;
  o.optimizer.lr = 1e-2;
  o.optimizer.weight_decay = 0.1;
  o.world_size = c.world;
  o.rank = rank;
  o.session_id = kSession;
  return o;
}

struct Dtype {
  at::ScalarType type;
  const char* name;
  int64_t epoch;
  double tolerance;
};
constexpr Dtype kDtypes[] = {{at::kDouble, "f64", 0, 1e-9},
                             {at::kFloat, "f32", 1, 1e-5}};

// Every tensor flattened into float64, back to back.
std::string RawDoubles(const std::vector<at::Tensor>& tensors) {
  std::string out;
  for (const at::Tensor& t : tensors) {
    at::Tensor d = t.detach().to(at::kDouble).contiguous();
    out.append(reinterpret_cast<const char*>(d.data_ptr<double>()),
               d.numel() * sizeof(double));
  }
  return out;
}

std::vector<double> ToDoubles(const std::vector<at::Tensor>& tensors) {
  const std::string bytes = RawDoubles(tensors);
  std::vector<double> values(bytes.size() / sizeof(double));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(double));
  return values;
}

std::vector<at::Tensor> Parameters(const RankTrainer& trainer) {
  return trainer.model().parameters();
}

std::string StatsLine(const StepStats& s, double step_seconds) {
  return absl::StrFormat("%.17g %.17g %d %.6f\n", s.loss, s.grad_norm, s.tokens,
                         step_seconds);
}

// ---- The rank process ----------------------------------------------------

// What one rank process does: --rank_job <case> <rank> <address> <out_dir>.
// Exit 0: every dtype trained; 3: a step failed (its error written).
int RankMain(const std::vector<std::string>& args) {
  if (args.size() != 4) return 2;
  absl::StatusOr<Case> c = FindCase(args[0]);
  int rank = -1;
  if (!c.ok() || !absl::SimpleAtoi(args[1], &rank)) return 2;
  const std::string& out = args[3];
  dcp::train::SetTorchThreads(1);
  absl::StatusOr<testing_ranks::RankGroups> groups =
      testing_ranks::ConnectRankGroups(args[2], kSession, rank, kGroupTimeout);
  if (!groups.ok()) {
    std::cerr << groups.status() << "\n";
    return 2;
  }
  for (const Dtype& dtype : kDtypes) {
    const std::string base = absl::StrCat(out, "/", dtype.name, ".rank", rank);
    absl::StatusOr<std::unique_ptr<RankTrainer>> trainer = RankTrainer::Create(
        TrainerOptions(*c, dtype.type, rank), groups->groups.get());
    absl::StatusOr<RankPlan> plan =
        RankPlanFromStep(MakePlan(*c, dtype.epoch), rank);
    if (!trainer.ok() || !plan.ok()) {
      std::cerr << trainer.status() << " " << plan.status() << "\n";
      return 2;
    }
    const absl::Time start = absl::Now();
    StepOptions step_options;
    step_options.keep_gradients = true;
    absl::StatusOr<StepStats> stats = (*trainer)->Step(*plan, step_options);
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (!stats.ok()) {
      testing_process::WriteFile(
          base + ".error",
          absl::StrCat(seconds, "\n", stats.status().ToString()));
      return 3;
    }
    if (!testing_process::WriteFile(base + ".grads",
                                    RawDoubles((*trainer)->gradients())) ||
        !testing_process::WriteFile(base + ".params",
                                    RawDoubles(Parameters(**trainer))) ||
        !testing_process::WriteFile(base + ".stats",
                                    StatsLine(*stats, seconds))) {
      return 2;
    }
  }
  return 0;
}

// ---- The parent ----------------------------------------------------------

std::unique_ptr<SchedulerServer> StartServer(int world) {
  absl::StatusOr<std::unique_ptr<SchedulerServer>> server =
      testing_ranks::StartRendezvousServer(world, kSession);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// max |a - b| / max |b| over one tensor.
double RelativeDifference(const double* a, const double* b, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

std::vector<double> ReadDoubles(const std::string& path) {
  const std::string bytes = testing_process::ReadFile(path);
  std::vector<double> values(bytes.size() / sizeof(double));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(double));
  return values;
}

// The worst per-tensor relative difference of `got` from `want`, both the
// model's tensors back to back; fails the test when the sizes differ.
double WorstTensor(const std::vector<double>& got,
                   const std::vector<double>& want,
                   const std::vector<std::pair<std::string, at::Tensor>>& named,
                   std::string* worst_name) {
  EXPECT_EQ(got.size(), want.size());
  if (got.size() != want.size()) return INFINITY;
  double worst = 0;
  int64_t offset = 0;
  for (const auto& [name, tensor] : named) {
    const double rel = RelativeDifference(got.data() + offset,
                                          want.data() + offset, tensor.numel());
    if (rel >= worst) {
      worst = rel;
      *worst_name = name;
    }
    offset += tensor.numel();
  }
  return worst;
}

struct Reference {
  std::vector<double> gradients;
  std::vector<double> parameters;
  StepStats stats;
  std::vector<std::pair<std::string, at::Tensor>> named;
};

Reference RunReference(const Case& c, const Dtype& dtype) {
  Reference ref;
  RankTrainerOptions options = TrainerOptions(c, dtype.type, 0);
  options.world_size = 1;  // The whole batch, alone.
  absl::StatusOr<std::unique_ptr<RankTrainer>> trainer =
      RankTrainer::Create(options, nullptr);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return ref;
  StepOptions step_options;
  step_options.keep_gradients = true;
  absl::StatusOr<StepStats> stats =
      (*trainer)->ReferenceStep(MakePlan(c, dtype.epoch), step_options);
  EXPECT_TRUE(stats.ok()) << stats.status();
  if (!stats.ok()) return ref;
  ref.stats = *stats;
  ref.gradients = ToDoubles((*trainer)->gradients());
  ref.parameters = ToDoubles(Parameters(**trainer));
  ref.named = (*trainer)->model().named_parameters();
  return ref;
}

// One AdamW step, with the trainer's coefficients, from the initial weights
// with `gradients` (the model's tensors back to back): what a rank's
// parameters must be given the gradients it summed.
std::vector<double> AdamWStep(const Case& c, const Dtype& dtype,
                              const std::vector<double>& gradients) {
  const RankTrainerOptions o = TrainerOptions(c, dtype.type, 0);
  absl::StatusOr<std::unique_ptr<train::Transformer>> model =
      train::Transformer::Create(o.model);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  std::vector<at::Tensor> params = (*model)->parameters();
  torch::optim::AdamW adamw(
      params, torch::optim::AdamWOptions(o.optimizer.lr)
                  .betas(std::make_tuple(o.optimizer.beta1, o.optimizer.beta2))
                  .eps(o.optimizer.eps)
                  .weight_decay(o.optimizer.weight_decay));
  int64_t offset = 0;
  for (at::Tensor& p : params) {
    EXPECT_LE(offset + p.numel(), static_cast<int64_t>(gradients.size()));
    if (offset + p.numel() > static_cast<int64_t>(gradients.size())) return {};
    p.mutable_grad() =
        at::tensor(std::vector<double>(gradients.begin() + offset,
                                       gradients.begin() + offset + p.numel()),
                   at::kDouble)
            .view_as(p)
            .to(dtype.type);
    offset += p.numel();
  }
  adamw.step();
  return ToDoubles(params);
}

// The rank processes of one case, started against `address`, writing under
// `out`.
std::vector<testing_process::Child> SpawnRanks(const Case& c,
                                               const std::string& address,
                                               const std::string& out) {
  std::vector<testing_process::Child> ranks;
  for (int r = 0; r < c.world; ++r) {
    ranks.push_back(
        testing_process::Spawn(absl::StrCat(c.name, "-rank", r),
                               {testing_ranks::SelfPath(), "--rank_job", c.name,
                                absl::StrCat(r), address, out}));
  }
  return ranks;
}

std::string OutputDir(const std::string& name) {
  const std::string dir = testing_process::TmpPath(name);
  std::filesystem::create_directories(dir);
  return dir;
}

// Compares what the ranks wrote for `dtype` with the reference.
void CompareWithReference(const Case& c, const Dtype& dtype,
                          const Reference& ref, const std::string& out) {
  SCOPED_TRACE(dtype.name);
  double worst_grad = 0, worst_param = 0;
  std::string grad_name, param_name;
  std::vector<double> params0;
  std::string stats0;
  for (int r = 0; r < c.world; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    const std::string base = absl::StrCat(out, "/", dtype.name, ".rank", r);
    std::string name;
    const double grad = WorstTensor(ReadDoubles(base + ".grads"), ref.gradients,
                                    ref.named, &name);
    if (grad >= worst_grad) {
      worst_grad = grad;
      grad_name = name;
    }
    const std::vector<double> params = ReadDoubles(base + ".params");
    const double param = WorstTensor(params, ref.parameters, ref.named, &name);
    if (param >= worst_param) {
      worst_param = param;
      param_name = name;
    }
    // Every rank ends the step with the same parameters, bit for bit, and
    // the same loss and gradient norm.
    const std::string stats = testing_process::ReadFile(base + ".stats");
    const std::vector<std::string> fields = absl::StrSplit(stats, ' ');
    ASSERT_EQ(fields.size(), 4u) << stats;
    if (r == 0) {
      params0 = params;
      stats0 = stats;
      // The rank's optimizer step is exactly AdamW on the gradients it
      // summed.
      const std::vector<double> stepped =
          AdamWStep(c, dtype, ReadDoubles(base + ".grads"));
      EXPECT_TRUE(stepped == params)
          << "parameters are not AdamW's step on the rank's gradients";
    }
    EXPECT_TRUE(params == params0) << "parameters differ from rank 0's";
    const std::vector<std::string> fields0 = absl::StrSplit(stats0, ' ');
    EXPECT_EQ(fields[0], fields0[0]) << "loss differs from rank 0's";
    EXPECT_EQ(fields[1], fields0[1]) << "grad norm differs from rank 0's";
    double loss = 0, norm = 0;
    int64_t tokens = 0;
    ASSERT_TRUE(absl::SimpleAtod(fields[0], &loss) &&
                absl::SimpleAtod(fields[1], &norm) &&
                absl::SimpleAtoi(fields[2], &tokens))
        << stats;
    EXPECT_LE(std::fabs(loss - ref.stats.loss),
              dtype.tolerance * std::fabs(ref.stats.loss));
    EXPECT_LE(std::fabs(norm - ref.stats.grad_norm),
              dtype.tolerance * ref.stats.grad_norm);
    EXPECT_EQ(tokens, ref.stats.tokens);
  }
  EXPECT_LE(worst_grad, dtype.tolerance) << grad_name;
  // AdamW's first step moves each weight by about lr * g / (|g| + eps), so a
  // gradient element near eps turns float32 rounding of the gradient into
  // a much larger change of the weight: the parameters are compared with the
  // reference's in float64, where that rounding is far below eps; in float32
  // the check above (AdamW exactly applied to gradients that match) stands
  // in for it.
  if (dtype.type == at::kDouble) {
    EXPECT_LE(worst_param, dtype.tolerance) << param_name;
  }
  std::cout << "[" << c.name << " " << dtype.name << "] max relative "
            << "difference per tensor: gradients " << worst_grad << " ("
            << grad_name << "), parameters after AdamW " << worst_param << " ("
            << param_name << "); loss " << ref.stats.loss << std::endl;
}

class TrainingEquivalenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainingEquivalenceTest, RanksMatchOneProcess) {
  absl::StatusOr<Case> c = FindCase(GetParam());
  ASSERT_TRUE(c.ok()) << c.status();
  std::unique_ptr<SchedulerServer> server = StartServer(c->world);
  ASSERT_NE(server, nullptr);
  const std::string out = OutputDir(c->name);
  std::vector<testing_process::Child> ranks;
  testing_process::ChildReaper reaper({&ranks});
  ranks = SpawnRanks(*c, server->address(), out);
  // The reference runs while the ranks do.
  std::vector<Reference> refs;
  for (const Dtype& dtype : kDtypes) refs.push_back(RunReference(*c, dtype));
  ASSERT_TRUE(testing_process::ExpectAllExit(
      ranks, absl::Now() + absl::Minutes(4), "the rank processes"));
  for (const testing_process::Child& rank : ranks) {
    ASSERT_EQ(rank.exit_code, 0) << testing_process::Describe(ranks);
  }
  for (size_t d = 0; d < refs.size(); ++d) {
    ASSERT_FALSE(refs[d].gradients.empty());
    CompareWithReference(*c, kDtypes[d], refs[d], out);
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, TrainingEquivalenceTest,
                         ::testing::Values("mixed_groups", "idle_rank_dit",
                                           "groups_of_three", "hybrid_rings"),
                         [](const auto& info) { return info.param; });

// A group of 3 over 4 heads: the group's members refuse the task, the rank
// outside it hears so in the world's agreement; every rank fails, naming
// itself, the step and the task, long before the groups' timeout.
TEST(TrainingEquivalenceBadPlanTest, GroupSizeNotDividingHeadsFailsEveryRank) {
  absl::StatusOr<Case> c = FindCase("bad_group_size");
  ASSERT_TRUE(c.ok()) << c.status();
  std::unique_ptr<SchedulerServer> server = StartServer(c->world);
  ASSERT_NE(server, nullptr);
  const std::string out = OutputDir(c->name);
  std::vector<testing_process::Child> ranks;
  testing_process::ChildReaper reaper({&ranks});
  ranks = SpawnRanks(*c, server->address(), out);
  ASSERT_TRUE(testing_process::ExpectAllExit(
      ranks, absl::Now() + absl::Minutes(2), "the rank processes"));
  for (int r = 0; r < c->world; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    EXPECT_EQ(ranks[r].exit_code, 3) << testing_process::Describe(ranks);
    const std::string error =
        testing_process::ReadFile(absl::StrCat(out, "/f64.rank", r, ".error"));
    const std::vector<std::string> lines =
        absl::StrSplit(error, absl::MaxSplits('\n', 1));
    ASSERT_EQ(lines.size(), 2u) << error;
    double seconds = 0;
    ASSERT_TRUE(absl::SimpleAtod(lines[0], &seconds)) << error;
    EXPECT_LT(seconds, absl::ToDoubleSeconds(kGroupTimeout) / 4) << error;
    const std::string where = absl::StrCat("rank ", r, ", step ", kStep);
    if (r < 3) {
      EXPECT_THAT(lines[1],
                  AllOf(HasSubstr("INVALID_ARGUMENT"), HasSubstr(where),
                        HasSubstr("task 1"), HasSubstr("heads")));
    } else {
      EXPECT_THAT(lines[1], AllOf(HasSubstr("ABORTED"), HasSubstr(where),
                                  HasSubstr("task 1 failed on another rank")));
    }
    std::cout << "[bad_group_size] rank " << r << " failed after " << seconds
              << " s: " << lines[1] << std::endl;
  }
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
