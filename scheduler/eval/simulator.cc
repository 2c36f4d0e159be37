#include "scheduler/eval/simulator.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dcp {

ReferenceCluster::ReferenceCluster(ClusterSpec cluster, ModelSpec model,
                                   int world_size)
    : cluster_(cluster), model_(std::move(model)), world_size_(world_size) {}

bool ReferenceCluster::IntraNode(absl::Span<const int> ranks) const {
  for (int r : ranks) {
    if (cluster_.NodeOf(r) != cluster_.NodeOf(ranks[0])) return false;
  }
  return true;
}

double ReferenceCluster::MemoryBytes(double tokens_per_gpu,
                                     double recompute) const {
  const double d = model_.hidden;
  const double layers = model_.layers;
  const double per_token = (1.0 - recompute) * 34.0 * d * layers +
                           recompute * 2.0 * d * layers + 34.0 * d;
  return 16.0 * model_.TotalParams() / world_size_ + per_token * tokens_per_gpu;
}

double ReferenceCluster::AttentionSeconds(double s, double p,
                                          double recompute) const {
  const double flops = 4.0 * s * s * model_.hidden * model_.layers *
                       model_.AttentionFactor() / p;
  const double eff =
      cluster_.attn_eff_max * s / (s + cluster_.attn_eff_half_tokens);
  return flops * (3.5 + recompute) / (cluster_.peak_flops * eff);
}

ReferenceCluster::TaskCost ReferenceCluster::Cost(
    absl::Span<const int> ranks, absl::Span<const int64_t> seq_lengths,
    double recompute) const {
  TaskCost c;
  const double p = static_cast<double>(ranks.size());
  const double layers = model_.layers;
  const double d = model_.hidden;
  double total_tokens = 0;
  for (int64_t s : seq_lengths) total_tokens += static_cast<double>(s);
  const double t = total_tokens / p;

  const double lin_fwd =
      2.0 * model_.ParamsPerLayer() * layers * total_tokens / p;
  const double gemm_eff =
      cluster_.gemm_eff_max * t / (t + cluster_.gemm_eff_half_tokens);
  c.linear_s =
      t > 0 ? lin_fwd * (3.0 + recompute) / (cluster_.peak_flops * gemm_eff)
            : 0.0;
  for (int64_t s : seq_lengths) {
    if (s > 0)
      c.attention_s += AttentionSeconds(static_cast<double>(s), p, recompute);
  }
  if (ranks.size() > 1) {
    const bool intra = IntraNode(ranks);
    const double bw = intra ? cluster_.intra_node_bw : cluster_.inter_node_bw;
    const double latency =
        intra ? cluster_.intra_node_latency_s : cluster_.inter_node_latency_s;
    const double vol =
        2.0 * t * d *
        (2.0 + 2.0 * std::max<double>(model_.kv_heads, p) / model_.heads) *
        (p - 1.0) / p;
    c.all_to_all_s = (vol / bw + 4.0 * latency) * layers * (2.0 + recompute);
  }
  c.overhead_s = cluster_.overhead_per_layer_s * layers;
  c.total_s = c.linear_s + c.attention_s + c.all_to_all_s + c.overhead_s;
  c.memory_bytes = MemoryBytes(t, recompute);
  return c;
}

double ReferenceCluster::SyncSeconds() const {
  const double w = world_size_;
  return 2.0 * (w - 1.0) / w * 2.0 * model_.TotalParams() /
         cluster_.grad_sync_bw;
}

double ReferenceCluster::LowerBound(
    absl::Span<const int64_t> seq_lengths) const {
  double total_tokens = 0;
  double attention = 0;
  const double layers = model_.layers;
  for (int64_t len : seq_lengths) {
    const double s = static_cast<double>(len);
    total_tokens += s;
    if (s <= 0) continue;
    const double eff =
        cluster_.attn_eff_max * s / (s + cluster_.attn_eff_half_tokens);
    attention += 3.5 * 4.0 * s * s * model_.hidden * layers *
                 model_.AttentionFactor() / (cluster_.peak_flops * eff);
  }
  const double linear = 6.0 * model_.ParamsPerLayer() * layers * total_tokens /
                        (cluster_.peak_flops * cluster_.gemm_eff_max);
  return (linear + attention) / world_size_ + SyncSeconds();
}

double ReferenceCluster::TokensPerGpuAt(double recompute) const {
  const double d = model_.hidden;
  const double layers = model_.layers;
  const double free =
      cluster_.MemoryCap() - 16.0 * model_.TotalParams() / world_size_;
  return free / ((1.0 - recompute) * 34.0 * d * layers +
                 recompute * 2.0 * d * layers + 34.0 * d);
}

double ReferenceCluster::RecomputeToHold(double tokens_per_gpu) const {
  const double d = model_.hidden;
  const double layers = model_.layers;
  const double free =
      cluster_.MemoryCap() - 16.0 * model_.TotalParams() / world_size_;
  // free / tokens = (1 - r) * 34 d L + r * 2 d L + 34 d, solved for r.
  const double r = (34.0 * d * layers + 34.0 * d - free / tokens_per_gpu) /
                   (32.0 * d * layers);
  return std::max(r, 0.0);
}

double ReferenceCluster::SequenceBoundAt(double s, int p,
                                         double recompute) const {
  const double t_max = TokensPerGpuAt(recompute);
  const double gemm_eff =
      cluster_.gemm_eff_max * t_max / (t_max + cluster_.gemm_eff_half_tokens);
  const double linear = 2.0 * model_.ParamsPerLayer() * model_.layers * s *
                        (3.0 + recompute) / (cluster_.peak_flops * gemm_eff);
  double all_to_all = 0;
  if (p > 1) {
    // The task's all-to-all, p GPUs long, for this sequence's s / p tokens
    // a GPU (the volume is linear in the tokens; the latency, shared by a
    // task's sequences, is left out), at the faster of the two links.
    const double bw = std::max(cluster_.intra_node_bw, cluster_.inter_node_bw);
    const double vol =
        2.0 * (s / p) * model_.hidden *
        (2.0 + 2.0 * std::max<double>(model_.kv_heads, p) / model_.heads) *
        (p - 1.0) / p;
    all_to_all = p * vol / bw * model_.layers * (2.0 + recompute);
  }
  return linear + AttentionSeconds(s, 1.0, recompute) + all_to_all;
}

double ReferenceCluster::SequenceBound(double s) const {
  // For a group size p the sequence fits at r >= r_p (RecomputeToHold of
  // s / p); the bound at (p, r) is concave in r (1 / gemm_eff and the
  // other terms are affine in r, the linear work a product of an
  // increasing and a decreasing affine function), so its least over
  // [r_p, 1] is at an end. Larger p only add all-to-all at a given r.
  double best = std::numeric_limits<double>::infinity();
  for (int p = 1; p <= world_size_; ++p) {
    if (world_size_ % p != 0 || model_.heads % p != 0) continue;
    const double r = RecomputeToHold(s / p);
    if (r > 1.0) continue;
    best = std::min({best, SequenceBoundAt(s, p, r), SequenceBoundAt(s, p, 1)});
  }
  // No group holds it: no plan is valid; the least at p = 1 ignoring memory.
  if (best == std::numeric_limits<double>::infinity()) {
    best = std::min(SequenceBoundAt(s, 1, 0), SequenceBoundAt(s, 1, 1));
  }
  return best;
}

double ReferenceCluster::MemoryAwareLowerBound(
    absl::Span<const int64_t> seq_lengths) const {
  if (TokensPerGpuAt(1.0) <= 0) return LowerBound(seq_lengths);
  double work = 0;
  for (int64_t len : seq_lengths) {
    if (len > 0) work += SequenceBound(static_cast<double>(len));
  }
  return work / world_size_ + SyncSeconds();
}

namespace {

absl::Status TaskError(const StepPlan& plan, int task,
                       const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("step ", plan.step, ", task ", task, ": ", what));
}

// The step's samples, each in the length table and listed once.
absl::StatusOr<absl::flat_hash_set<int64_t>> StepSamples(
    const StepPlan& plan, const LengthView& lengths) {
  absl::flat_hash_set<int64_t> samples;
  samples.reserve(plan.samples.size());
  for (int64_t id : plan.samples) {
    if (id < 0 || id >= lengths.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", plan.step, ": sample ", id,
          " is outside the length table of ", lengths.size(), " samples"));
    }
    if (!samples.insert(id).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", plan.step, ": sample ", id, " is listed twice"));
    }
  }
  return samples;
}

// A task's group and recompute ratio against the rules of the model.
absl::Status CheckTaskShape(const ReferenceCluster& cluster,
                            const StepPlan& plan, int i) {
  const TaskPlan& task = plan.tasks[i];
  const int world = cluster.world_size();
  const int heads = cluster.model().heads;
  const int p = static_cast<int>(task.ranks.size());
  if (p == 0) return TaskError(plan, i, "has no ranks");
  if (task.samples.empty()) return TaskError(plan, i, "has no samples");
  if (world % p != 0 || heads % p != 0) {
    return TaskError(
        plan, i,
        absl::StrCat("group size ", p, " must divide the world size (", world,
                     ") and the head count (", heads, ")"));
  }
  if (!(task.recompute >= 0.0 && task.recompute <= 1.0)) {
    return TaskError(plan, i,
                     absl::StrCat("recompute ", task.recompute,
                                  " is outside [0, 1]"));
  }
  for (int k = 0; k < p; ++k) {
    const int r = task.ranks[k];
    if (r < 0 || r >= world) {
      return TaskError(
          plan, i, absl::StrCat("rank ", r, " is outside the world of ", world));
    }
    if (k > 0 && r <= task.ranks[k - 1]) {
      return TaskError(plan, i, "ranks must be distinct and ascending");
    }
  }
  return absl::OkStatus();
}

// The lengths of task `i`'s samples into `seq`; each must be the step's and
// in no earlier task (`seen`, which gets them).
absl::Status TaskLengths(const StepPlan& plan, int i,
                         const absl::flat_hash_set<int64_t>& step_samples,
                         const LengthView& lengths,
                         absl::flat_hash_set<int64_t>& seen,
                         std::vector<int64_t>& seq) {
  seq.clear();
  for (int64_t id : plan.tasks[i].samples) {
    if (!step_samples.contains(id)) {
      return TaskError(
          plan, i, absl::StrCat("sample ", id, " is not one of the step's samples"));
    }
    if (!seen.insert(id).second) {
      return TaskError(
          plan, i, absl::StrCat("sample ", id, " appears in more than one task"));
    }
    seq.push_back(lengths[id]);
  }
  return absl::OkStatus();
}

// The bounds and token count of the step's samples.
void AddStepTotals(const ReferenceCluster& cluster, const StepPlan& plan,
                   const LengthView& lengths, StepReport& report) {
  std::vector<int64_t> all;
  all.reserve(plan.samples.size());
  for (int64_t id : plan.samples) {
    all.push_back(lengths[id]);
    report.tokens += lengths[id];
  }
  report.lower_bound_s = cluster.LowerBound(all);
  report.memory_bound_s = cluster.MemoryAwareLowerBound(all);
}

}  // namespace

absl::StatusOr<StepReport> ReplayStep(const ReferenceCluster& cluster,
                                      const StepPlan& plan,
                                      const LengthView& lengths) {
  ASSIGN_OR_RETURN(const absl::flat_hash_set<int64_t> step_samples,
                   StepSamples(plan, lengths));
  const int world = cluster.world_size();
  StepReport report;
  report.rank_busy_s.assign(world, 0.0);
  report.sync_s = cluster.SyncSeconds();
  std::vector<double> free_at(world, 0.0);
  absl::flat_hash_set<int64_t> seen;
  seen.reserve(plan.samples.size());
  std::vector<int64_t> seq;
  const double cap = cluster.cluster().MemoryCap();
  for (size_t ti = 0; ti < plan.tasks.size(); ++ti) {
    const TaskPlan& task = plan.tasks[ti];
    const int i = static_cast<int>(ti);
    RETURN_IF_ERROR(CheckTaskShape(cluster, plan, i));
    RETURN_IF_ERROR(TaskLengths(plan, i, step_samples, lengths, seen, seq));
    const ReferenceCluster::TaskCost c =
        cluster.Cost(task.ranks, seq, task.recompute);
    if (c.memory_bytes > cap) {
      return TaskError(plan, i,
                       absl::StrCat("needs ", c.memory_bytes / 1e9,
                                    " GB per GPU; the cap is ", cap / 1e9,
                                    " GB"));
    }
    report.max_memory_bytes = std::max(report.max_memory_bytes, c.memory_bytes);
    double start = 0;
    for (int r : task.ranks) start = std::max(start, free_at[r]);
    for (int r : task.ranks) {
      free_at[r] = start + c.total_s;
      report.rank_busy_s[r] += c.total_s;
    }
    ++report.num_tasks;
  }
  for (int64_t id : plan.samples) {
    if (seen.size() == step_samples.size()) break;
    if (!seen.contains(id)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", plan.step, ": sample ", id, " is in no task"));
    }
  }
  report.makespan_s =
      *std::max_element(free_at.begin(), free_at.end()) + report.sync_s;
  AddStepTotals(cluster, plan, lengths, report);
  return report;
}

}  // namespace dcp
