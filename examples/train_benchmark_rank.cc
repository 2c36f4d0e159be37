#include "examples/train_benchmark_rank.h"

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "ATen/ATen.h"
#include "ATen/Parallel.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/collectives.h"
#include "comm/comm_key.h"
#include "common/clock.h"
#include "common/process_memory.h"
#include "common/status_macros.h"
#include "examples/rendezvous_ranks.h"
#include "examples/train_benchmark_job.h"
#include "train/rank_plan.h"
#include "train/torch_threads.h"
#include "train/trainer.h"

namespace dcp::train_benchmark {
namespace {

// Allocations from this size up are mapped and unmapped one by one, so that
// the resident memory falls when torch frees a tensor. Setting the
// threshold also turns off glibc's raising it as large blocks are freed.
constexpr int kMmapThresholdBytes = 128 * 1024;
// glibc's largest mmap threshold (32 MiB on 64-bit), and a trim threshold
// no step reaches.
constexpr int kKeepMmapThresholdBytes = 32 * 1024 * 1024;
constexpr int kKeepTrimThresholdBytes = 1 << 30;

// The Gloo probe: all-to-alls of a few floats to each peer (their time is
// the latency) and of many (the bandwidth), and runs of each.
constexpr int64_t kProbeSmallFloatsPerPeer = 64;
constexpr int64_t kProbeLargeFloatsPerPeer = 256 * 1024;
constexpr int kProbeWarmUps = 3;
constexpr int kProbeRuns = 15;
// Runs of each timed task (the fastest kept), after one warm-up task.
constexpr int kProbeTaskRuns = 3;

// The task shapes the probe times on the world's groups, as fractions of
// the window (CalibrateCpuCosts's one-rank shapes, less the shortest).
std::vector<std::vector<int64_t>> ProbeShapes(int64_t w) {
  return {{w}, {w / 2}, {w / 4, w / 4, w / 4, w / 4}, {w / 8}};
}

// The Ulysses degrees of a group of `size` the probe times: plain Ulysses
// where the size divides the heads, each smaller degree dividing both
// inside a ring, and the plain ring (u = 1).
std::vector<int> ProbeUlyssesDegrees(int size, int heads) {
  std::vector<int> out;
  for (int u = size; u >= 1; --u) {
    if (size % u == 0 && heads % u == 0) out.push_back(u);
  }
  return out;
}

// Step s of both kinds: which runs first alternates with s.
std::vector<PlanKind> OrderOfStep(int step) {
  if (step % 2 == 0) return {PlanKind::kDcp, PlanKind::kStatic};
  return {PlanKind::kStatic, PlanKind::kDcp};
}

int KindIndex(PlanKind kind) { return kind == PlanKind::kDcp ? 0 : 1; }

// Every plan of the job, in the wire form and as this rank runs it.
struct RankSteps {
  std::vector<v1::StepPlan> wire[2];
  std::vector<RankPlan> mine[2];
};

absl::StatusOr<RankSteps> LoadRankSteps(const std::string& dir, const Job& job,
                                        int rank) {
  RankSteps out;
  for (PlanKind kind : kPlanKinds) {
    for (int s = 0; s < job.steps; ++s) {
      ASSIGN_OR_RETURN(v1::StepPlan plan, ReadPlan(dir, kind, s));
      ASSIGN_OR_RETURN(RankPlan mine, RankPlanFromStep(plan, rank));
      out.wire[KindIndex(kind)].push_back(std::move(plan));
      out.mine[KindIndex(kind)].push_back(std::move(mine));
    }
  }
  return out;
}

// Forms the world's group and every group of this rank in the order the
// steps first use them, the same order on every rank (formation blocks
// until every member asks), before anything is timed.
absl::Status FormGroups(const Job& job, int rank, const RankSteps& steps,
                        ProcessGroups& groups) {
  RETURN_IF_ERROR(groups
                      .DataParallel(job.world_size, /*epoch=*/0,
                                    absl::StrCat(job.session, "/e0/dp"))
                      .status());
  absl::flat_hash_set<std::string> formed;
  for (int s = 0; s < job.steps; ++s) {
    for (PlanKind kind : OrderOfStep(s)) {
      for (const v1::CommGroup& g : steps.wire[KindIndex(kind)][s].groups()) {
        const std::vector<int> ranks(g.ranks().begin(), g.ranks().end());
        bool member = false;
        for (int r : ranks) member = member || r == rank;
        if (!member || !formed.insert(g.rendezvous_prefix()).second) continue;
        ASSIGN_OR_RETURN(CommKey key, CommKey::Make(ranks, /*epoch=*/0));
        RETURN_IF_ERROR(groups.Get(key, g.rendezvous_prefix()).status());
      }
    }
  }
  return absl::OkStatus();
}

// One Step, timed on both clocks; the trainer's own clock is the CPU one.
absl::StatusOr<StepRecord> TimedStep(train::RankTrainer& trainer,
                                     const RankPlan& plan, PlanKind kind) {
  const absl::Time start = absl::Now();
  absl::StatusOr<train::StepStats> stats = trainer.Step(plan);
  const absl::Time end = absl::Now();
  if (!stats.ok()) {
    return absl::Status(
        stats.status().code(),
        absl::StrCat(PlanKindName(kind), " plan, step ", plan.step, ": ",
                     stats.status().message()));
  }
  StepRecord r;
  r.kind = kind;
  r.step = static_cast<int>(plan.step);
  r.wall_s = absl::ToDoubleSeconds(end - start);
  r.cpu_s = stats->seconds;
  r.tokens = stats->tokens;
  r.loss = stats->loss;
  return r;
}

// The median wall time of `kProbeRuns` runs of `what` over `group` (after
// `kProbeWarmUps`), each started from a barrier so that every member enters
// it together.
absl::StatusOr<double> MedianSeconds(
    c10d::ProcessGroup& group, const std::string& what,
    const std::function<c10::intrusive_ptr<c10d::Work>()>& start) {
  std::vector<double> seconds;
  for (int i = 0; i < kProbeWarmUps + kProbeRuns; ++i) {
    RETURN_IF_ERROR(
        RunCollective("the probe's barrier", [&] { return group.barrier(); }));
    const absl::Time begin = absl::Now();
    RETURN_IF_ERROR(RunCollective(what, start));
    if (i >= kProbeWarmUps) {
      seconds.push_back(absl::ToDoubleSeconds(absl::Now() - begin));
    }
  }
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2,
                   seconds.end());
  return seconds[seconds.size() / 2];
}

// The probe's training tasks: every shape of `ProbeShapes` on one rank (all
// ranks at once, each its own task) and on groups of every size dividing
// the world (all of the size at once, as in training: the planner's groups
// of 2 on 4 ranks share the cores with the other pair) at every Ulysses
// degree of `ProbeUlyssesDegrees`, at recompute 0 and 1, each run
// `kProbeTaskRuns` times on a wall clock; rank 0 writes the fastest of each
// of its own group's (`AppendTaskRecord`). A trainer of its own, its
// data-parallel group apart from the training's ("<session>/probe").
absl::Status ProbeTasks(const std::string& dir, const Job& job, int rank,
                        ProcessGroups& groups) {
  train::RankTrainerOptions options =
      TrainerOptions(job, job.world_size, rank, RealClock::Default());
  options.session_id = absl::StrCat(job.session, "/probe");
  ASSIGN_OR_RETURN(std::unique_ptr<train::RankTrainer> trainer,
                   train::RankTrainer::Create(options, &groups));
  const int64_t window = job.window;
  int64_t step = 0;
  auto run = [&](int size, int u, const std::vector<int64_t>& lengths,
                 double recompute) -> absl::StatusOr<double> {
    const v1::StepPlan plan =
        GroupTaskPlan(step, job.world_size, size, u, lengths, recompute,
                      absl::StrCat(job.session, "/probe/p", size, "u", u));
    ASSIGN_OR_RETURN(RankPlan mine, RankPlanFromStep(plan, rank));
    ++step;
    ASSIGN_OR_RETURN(train::StepStats stats, trainer->Step(mine));
    if (stats.task_seconds.size() != 1) {
      return absl::InternalError("the trainer timed no task");
    }
    return stats.task_seconds[0];
  };
  // (size, u) of every shape: one rank, then each group size dividing the
  // world at each of its Ulysses degrees.
  std::vector<std::pair<int, int>> shapes = {{1, 1}};
  for (int size = 2; size <= job.world_size; ++size) {
    if (job.world_size % size != 0) continue;
    for (int u : ProbeUlyssesDegrees(size, job.model.heads)) {
      shapes.emplace_back(size, u);
    }
  }
  for (const auto& [size, u] : shapes) {
    RETURN_IF_ERROR(run(size, u, {window / 8}, 0).status());  // Warm-up.
    for (const std::vector<int64_t>& lengths : ProbeShapes(window)) {
      for (double recompute : {0.0, 1.0}) {
        TaskObservation record;
        record.group_size = size;
        record.ulysses = u == size ? 0 : u;
        record.recompute = recompute;
        record.lengths = lengths;
        record.seconds = std::numeric_limits<double>::infinity();
        for (int i = 0; i < kProbeTaskRuns; ++i) {
          ASSIGN_OR_RETURN(double seconds, run(size, u, lengths, recompute));
          record.seconds = std::min(record.seconds, seconds);
        }
        if (rank == 0) RETURN_IF_ERROR(AppendTaskRecord(dir, record));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunGlooProbe(const std::string& dir, int rank,
                          const std::string& address) {
  train::SetTorchThreads(1);
  RETURN_IF_ERROR(KeepFreedMemory());  // As the ranks train.
  ASSIGN_OR_RETURN(Job job, ReadJob(dir));
  ASSIGN_OR_RETURN(
      examples::RankGroups groups,
      examples::ConnectRankGroups(address, job.session, rank,
                                  absl::Seconds(job.group_timeout_s)));
  ASSIGN_OR_RETURN(
      c10d::ProcessGroup * world,
      groups.groups->DataParallel(job.world_size, /*epoch=*/0,
                                  absl::StrCat(job.session, "/probe/world")));
  std::vector<GlooRecord> records;
  for (int64_t per_peer :
       {kProbeSmallFloatsPerPeer, kProbeLargeFloatsPerPeer}) {
    const int64_t floats = per_peer * job.world_size;
    at::Tensor in = at::ones({floats});
    at::Tensor out = at::empty({floats});
    std::vector<int64_t> even;  // Equal splits.
    ASSIGN_OR_RETURN(
        double seconds,
        MedianSeconds(
            *world, absl::StrCat("an all-to-all of ", floats, " floats"),
            [&] { return world->alltoall_base(out, in, even, even); }));
    records.push_back({"all_to_all", floats, seconds});
  }
  const int64_t params = static_cast<int64_t>(job.model.TotalParams());
  std::vector<at::Tensor> gradient = {at::ones({params})};
  ASSIGN_OR_RETURN(
      double seconds,
      MedianSeconds(*world,
                    absl::StrCat("an all-reduce of ", params, " floats"),
                    [&] { return world->allreduce(gradient); }));
  records.push_back({"all_reduce", params, seconds});
  if (rank == 0) {
    for (const GlooRecord& r : records) {
      RETURN_IF_ERROR(AppendGlooRecord(dir, r));
    }
  }
  return ProbeTasks(dir, job, rank, *groups.groups);
}

absl::Status KeepFreedMemory() {
  if (mallopt(M_MMAP_THRESHOLD, kKeepMmapThresholdBytes) != 1 ||
      mallopt(M_TRIM_THRESHOLD, kKeepTrimThresholdBytes) != 1) {
    return absl::InternalError("mallopt refused the thresholds");
  }
  return absl::OkStatus();
}

absl::Status RunRank(const std::string& dir, int rank,
                     const std::string& address) {
  train::SetTorchThreads(1);
  RETURN_IF_ERROR(KeepFreedMemory());
  ASSIGN_OR_RETURN(Job job, ReadJob(dir));
  ASSIGN_OR_RETURN(
      examples::RankGroups groups,
      examples::ConnectRankGroups(address, job.session, rank,
                                  absl::Seconds(job.group_timeout_s)));
  ASSIGN_OR_RETURN(RankSteps steps, LoadRankSteps(dir, job, rank));
  RETURN_IF_ERROR(FormGroups(job, rank, steps, *groups.groups));
  ProcessCpuClock clock;
  std::unique_ptr<train::RankTrainer> trainers[2];
  for (PlanKind kind : kPlanKinds) {
    ASSIGN_OR_RETURN(trainers[KindIndex(kind)],
                     train::RankTrainer::Create(
                         TrainerOptions(job, job.world_size, rank, &clock),
                         groups.groups.get()));
  }
  for (int s = 0; s < job.steps; ++s) {
    for (PlanKind kind : OrderOfStep(s)) {
      const int k = KindIndex(kind);
      ASSIGN_OR_RETURN(StepRecord record,
                       TimedStep(*trainers[k], steps.mine[k][s], kind));
      RETURN_IF_ERROR(AppendStepRecord(dir, rank, record));
    }
  }
  return absl::OkStatus();
}

absl::Status RunMemoryCheck(const std::string& dir) {
  train::SetTorchThreads(1);
  if (mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes) != 1 ||
      mallopt(M_TRIM_THRESHOLD, kMmapThresholdBytes) != 1) {
    return absl::InternalError("mallopt refused the thresholds");
  }
  ASSIGN_OR_RETURN(Job job, ReadJob(dir));
  ASSIGN_OR_RETURN(
      std::unique_ptr<train::RankTrainer> trainer,
      train::RankTrainer::Create(
          TrainerOptions(job, /*world=*/1, /*rank=*/0, nullptr), nullptr));
  const std::vector<int64_t> lengths = {job.memory_length};
  // A first step allocates what every later one keeps (gradients, the
  // optimizer's moments), so that the baselines hold them.
  int64_t step = 0;
  ASSIGN_OR_RETURN(RankPlan warm_up,
                   RankPlanFromStep(SingleRankPlan(step++, lengths, 1.0), 0));
  RETURN_IF_ERROR(trainer->Step(warm_up).status());
  for (double recompute : {1.0, 0.5, 0.0}) {
    ASSIGN_OR_RETURN(
        RankPlan plan,
        RankPlanFromStep(SingleRankPlan(step++, lengths, recompute), 0));
    MemoryRecord r;
    r.recompute = recompute;
    // The trainer's rule (PackedTask::recompute_ratio): round half away
    // from zero.
    r.layers_recomputed =
        static_cast<int>(std::round(recompute * job.model.layers));
    RETURN_IF_ERROR(ResetPeakResident());
    ASSIGN_OR_RETURN(r.baseline_bytes, ResidentBytes());
    RETURN_IF_ERROR(trainer->Step(plan).status());
    ASSIGN_OR_RETURN(r.peak_bytes, PeakResidentBytes());
    RETURN_IF_ERROR(AppendMemoryRecord(dir, r));
  }
  return absl::OkStatus();
}

}  // namespace dcp::train_benchmark
