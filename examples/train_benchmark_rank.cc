#include "examples/train_benchmark_rank.h"

#include <malloc.h>

#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "ATen/Parallel.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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

}  // namespace

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
