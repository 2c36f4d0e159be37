#include "scheduler/eval/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
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

bool ReferenceCluster::UlyssesIntraNode(absl::Span<const int> ranks,
                                        int ulysses) const {
  const size_t u = ulysses > 0 ? ulysses : ranks.size();
  for (size_t start = 0; start < ranks.size(); start += u) {
    if (!IntraNode(ranks.subspan(start, u))) return false;
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

double ReferenceCluster::AttentionSeconds(double s, double p, double recompute,
                                          double chunks) const {
  const double flops = 4.0 * s * s * model_.hidden * model_.layers *
                       model_.AttentionFactor() / p;
  // Each ring step attends over chunks of s / c tokens.
  const double chunk = s / chunks;
  const double eff =
      cluster_.attn_eff_max * chunk / (chunk + cluster_.attn_eff_half_tokens);
  return flops * (3.5 + recompute) / (cluster_.peak_flops * eff);
}

ReferenceCluster::GroupLinks ReferenceCluster::LinksOf(
    absl::Span<const int> ranks, int ulysses) const {
  GroupLinks links;
  links.size = static_cast<int>(ranks.size());
  links.intra_node = IntraNode(ranks);
  links.ulysses_intra_node =
      links.intra_node || (ulysses > 0 && UlyssesIntraNode(ranks, ulysses));
  return links;
}

ReferenceCluster::TaskCost ReferenceCluster::CostOn(
    const GroupLinks& group, absl::Span<const int64_t> seq_lengths,
    double recompute, int ulysses) const {
  TaskCost c;
  const double p = static_cast<double>(group.size);
  const double u = ulysses > 0 ? ulysses : p;
  const double ring = p / u;
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
    if (s > 0) {
      c.attention_s +=
          AttentionSeconds(static_cast<double>(s), p, recompute, ring);
    }
  }
  // K/V heads a GPU holds after the Ulysses all-to-all, over the heads.
  const double kv_share = std::max<double>(model_.kv_heads, u) / model_.heads;
  if (u > 1) {
    const bool intra = group.ulysses_intra_node;
    const double bw = intra ? cluster_.intra_node_bw : cluster_.inter_node_bw;
    const double latency =
        intra ? cluster_.intra_node_latency_s : cluster_.inter_node_latency_s;
    const double vol = 2.0 * t * d * (2.0 + 2.0 * kv_share) * (u - 1.0) / u;
    c.all_to_all_s = (vol / bw + 4.0 * latency) * layers * (2.0 + recompute);
  }
  if (ring > 1) {
    // c - 1 passes forward, 2 (c - 1) backward (K/V and their gradients),
    // r (c - 1) recomputing; each moves one K/V block a GPU.
    const bool intra = group.intra_node;
    const double bw = intra ? cluster_.intra_node_bw : cluster_.inter_node_bw;
    const double latency =
        intra ? cluster_.intra_node_latency_s : cluster_.inter_node_latency_s;
    const double block = 2.0 * 2.0 * t * d * kv_share;
    c.ring_s =
        layers * (3.0 + recompute) * (ring - 1.0) * (block / bw + latency);
  }
  c.overhead_s = cluster_.overhead_per_layer_s * layers;
  c.total_s = c.linear_s + AttentionWithRing(c.attention_s, c.ring_s) +
              c.all_to_all_s + c.overhead_s;
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

double ReferenceCluster::SequenceBoundAt(double s, int ulysses, int ring,
                                         double recompute) const {
  const int p = ulysses * ring;
  const double u = ulysses;
  const double t_max = TokensPerGpuAt(recompute);
  const double gemm_eff =
      cluster_.gemm_eff_max * t_max / (t_max + cluster_.gemm_eff_half_tokens);
  const double linear = 2.0 * model_.ParamsPerLayer() * model_.layers * s *
                        (3.0 + recompute) / (cluster_.peak_flops * gemm_eff);
  double all_to_all = 0;
  if (ulysses > 1) {
    // The Ulysses all-to-all on each of the p GPUs, for this sequence's
    // s / p tokens a GPU (the volume is linear in the tokens; the latency,
    // shared by a task's sequences, is left out), at the faster link. The
    // ring is not charged: a task's passes may hide behind its attention.
    const double bw = std::max(cluster_.intra_node_bw, cluster_.inter_node_bw);
    const double vol =
        2.0 * (s / p) * model_.hidden *
        (2.0 + 2.0 * std::max<double>(model_.kv_heads, u) / model_.heads) *
        (u - 1.0) / u;
    all_to_all = p * vol / bw * model_.layers * (2.0 + recompute);
  }
  return linear + AttentionSeconds(s, 1.0, recompute, ring) + all_to_all;
}

double ReferenceCluster::SequenceBound(double s) const {
  // On p = u * c GPUs the sequence fits at r >= r_p (RecomputeToHold of
  // s / p); the bound at (u, c, r) is concave in r (1 / gemm_eff and the
  // other terms are affine in r, the linear work a product of an
  // increasing and a decreasing affine function), so its least over
  // [r_p, 1] is at an end. At a given r a longer ring only lowers the
  // attention's efficiency, so for each u the rings worth trying run from
  // the shortest that holds the sequence at r = 1 to the shortest that
  // holds it at r = 0.
  double best = std::numeric_limits<double>::infinity();
  const double t_most = TokensPerGpuAt(1.0);
  for (int u = 1; u <= std::min(model_.heads, world_size_); ++u) {
    if (model_.heads % u != 0) continue;
    const int longest = world_size_ / u;
    // The shortest ring that could hold it at r = 1, or just below.
    const double shortest = std::floor(s / (u * t_most));
    int c = shortest > longest ? longest + 1
                               : std::max(1, static_cast<int>(shortest));
    while (c <= longest && RecomputeToHold(s / (u * c)) > 1.0) ++c;
    for (; c <= longest; ++c) {
      const double r = RecomputeToHold(s / (u * c));
      best = std::min(
          {best, SequenceBoundAt(s, u, c, r), SequenceBoundAt(s, u, c, 1)});
      if (r == 0.0) break;
    }
  }
  // No group holds it: no plan is valid; the least at p = 1 ignoring memory.
  if (best == std::numeric_limits<double>::infinity()) {
    best = std::min(SequenceBoundAt(s, 1, 1, 0), SequenceBoundAt(s, 1, 1, 1));
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

// A task's group (p = u * c ranks, u dividing the heads) against the rules
// of the model.
absl::Status CheckTaskGroup(const TaskPlan& task, int heads, int p) {
  if (task.ulysses == 0) {
    if (heads % p == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "group size ", p, " must divide the head count (", heads,
        "), or the task must give a Ulysses degree (\"ulysses\") dividing "
        "both, to run as Ulysses subgroups in a ring"));
  }
  const int u = task.ulysses;
  if (u < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Ulysses degree ", u, " must be positive (or 0 for the whole group)"));
  }
  if (p % u != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Ulysses degree ", u, " must divide the group size ", p,
        ": the group is u * c ranks, u-way Ulysses inside a c-way ring"));
  }
  if (heads % u != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Ulysses degree ", u, " must divide the head count (", heads, ")"));
  }
  return absl::OkStatus();
}

// A task's group and recompute ratio against the rules of the model.
absl::Status CheckTaskShape(const ReferenceCluster& cluster,
                            const StepPlan& plan, int i) {
  const TaskPlan& task = plan.tasks[i];
  const int world = cluster.world_size();
  const int p = static_cast<int>(task.ranks.size());
  if (p == 0) return TaskError(plan, i, "has no ranks");
  if (task.samples.empty()) return TaskError(plan, i, "has no samples");
  if (absl::Status group = CheckTaskGroup(task, cluster.model().heads, p);
      !group.ok()) {
    return TaskError(plan, i, std::string(group.message()));
  }
  if (!(task.recompute >= 0.0 && task.recompute <= 1.0)) {
    return TaskError(
        plan, i,
        absl::StrCat("recompute ", task.recompute, " is outside [0, 1]"));
  }
  for (int k = 0; k < p; ++k) {
    const int r = task.ranks[k];
    if (r < 0 || r >= world) {
      return TaskError(
          plan, i,
          absl::StrCat("rank ", r, " is outside the world of ", world));
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
          plan, i,
          absl::StrCat("sample ", id, " is not one of the step's samples"));
    }
    if (!seen.insert(id).second) {
      return TaskError(
          plan, i,
          absl::StrCat("sample ", id, " appears in more than one task"));
    }
    seq.push_back(lengths[id]);
  }
  return absl::OkStatus();
}

// The bounds and token count of the step's samples.
void AddStepTotals(const ReferenceCluster& cluster, const StepPlan& plan,
                   const LengthView& lengths, StepBounds bounds,
                   StepReport& report) {
  std::vector<int64_t> all;
  all.reserve(plan.samples.size());
  for (int64_t id : plan.samples) {
    all.push_back(lengths[id]);
    report.tokens += lengths[id];
  }
  if (bounds == StepBounds::kWithout) return;
  report.lower_bound_s = cluster.LowerBound(all);
  report.memory_bound_s = cluster.MemoryAwareLowerBound(all);
}

}  // namespace

absl::StatusOr<StepReport> ReplayStep(const ReferenceCluster& cluster,
                                      const StepPlan& plan,
                                      const LengthView& lengths,
                                      StepBounds bounds) {
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
        cluster.Cost(task.ranks, seq, task.recompute, task.ulysses);
    if (c.memory_bytes > cap) {
      return TaskError(
          plan, i,
          absl::StrCat("needs ", c.memory_bytes / 1e9,
                       " GB per GPU; the cap is ", cap / 1e9, " GB"));
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
      return absl::InvalidArgumentError(
          absl::StrCat("step ", plan.step, ": sample ", id, " is in no task"));
    }
  }
  report.makespan_s =
      *std::max_element(free_at.begin(), free_at.end()) + report.sync_s;
  AddStepTotals(cluster, plan, lengths, bounds, report);
  return report;
}

}  // namespace dcp
