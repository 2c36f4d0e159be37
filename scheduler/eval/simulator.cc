#include "scheduler/eval/simulator.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

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

double ReferenceCluster::MemoryAwareLowerBound(
    absl::Span<const int64_t> seq_lengths) const {
  const double layers = model_.layers;
  const double d = model_.hidden;
  const double free =
      cluster_.MemoryCap() - 16.0 * model_.TotalParams() / world_size_;
  if (free <= 0) return LowerBound(seq_lengths);
  // Seconds per token of linear work at ratio k / layers, at the GEMM
  // efficiency of the most tokens a GPU can hold there. A task's time is
  // concave in r (1 / gemm_eff is affine in it), so the minimum over the
  // grid, which holds both ends, is the minimum over every r in [0, 1].
  std::vector<double> linear_per_token(model_.layers + 1);
  for (int k = 0; k <= model_.layers; ++k) {
    const double r = k / layers;
    const double t_max =
        free / ((1.0 - r) * 34.0 * d * layers + r * 2.0 * d * layers + 34.0 * d);
    const double gemm_eff =
        cluster_.gemm_eff_max * t_max / (t_max + cluster_.gemm_eff_half_tokens);
    linear_per_token[k] = 2.0 * model_.ParamsPerLayer() * layers * (3.0 + r) /
                          (cluster_.peak_flops * gemm_eff);
  }
  double work = 0;
  for (int64_t len : seq_lengths) {
    const double s = static_cast<double>(len);
    if (s <= 0) continue;
    // Attention at r = 0 per unit of (3.5 + r).
    const double attention = AttentionSeconds(s, 1.0, 0.0) / 3.5;
    double best = std::numeric_limits<double>::infinity();
    for (int k = 0; k <= model_.layers; ++k) {
      best = std::min(best, s * linear_per_token[k] +
                                attention * (3.5 + k / layers));
    }
    work += best;
  }
  return work / world_size_ + SyncSeconds();
}

absl::StatusOr<StepReport> ReplayStep(const ReferenceCluster& cluster,
                                      const StepPlan& plan,
                                      const LengthView& lengths) {
  const int world = cluster.world_size();
  const ModelSpec& model = cluster.model();
  auto error = [&](int task, const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat("step ", plan.step, ", task ", task, ": ", what));
  };

  absl::flat_hash_set<int64_t> step_samples;
  step_samples.reserve(plan.samples.size());
  for (int64_t id : plan.samples) {
    if (id < 0 || id >= lengths.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", plan.step, ": sample ", id,
          " is outside the length table of ", lengths.size(), " samples"));
    }
    if (!step_samples.insert(id).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step ", plan.step, ": sample ", id, " is listed twice"));
    }
  }

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
    const int p = static_cast<int>(task.ranks.size());
    if (p == 0) return error(i, "has no ranks");
    if (task.samples.empty()) return error(i, "has no samples");
    if (world % p != 0 || model.heads % p != 0) {
      return error(
          i, absl::StrCat("group size ", p, " must divide the world size (",
                          world, ") and the head count (", model.heads, ")"));
    }
    if (!(task.recompute >= 0.0 && task.recompute <= 1.0)) {
      return error(
          i, absl::StrCat("recompute ", task.recompute, " is outside [0, 1]"));
    }
    for (int k = 0; k < p; ++k) {
      const int r = task.ranks[k];
      if (r < 0 || r >= world) {
        return error(
            i, absl::StrCat("rank ", r, " is outside the world of ", world));
      }
      if (k > 0 && r <= task.ranks[k - 1]) {
        return error(i, "ranks must be distinct and ascending");
      }
    }
    seq.clear();
    for (int64_t id : task.samples) {
      if (!step_samples.contains(id)) {
        return error(i, absl::StrCat("sample ", id,
                                     " is not one of the step's samples"));
      }
      if (!seen.insert(id).second) {
        return error(
            i, absl::StrCat("sample ", id, " appears in more than one task"));
      }
      seq.push_back(lengths[id]);
    }
    const ReferenceCluster::TaskCost c =
        cluster.Cost(task.ranks, seq, task.recompute);
    if (c.memory_bytes > cap) {
      return error(i,
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
  if (seen.size() != step_samples.size()) {
    for (int64_t id : plan.samples) {
      if (!seen.contains(id)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step ", plan.step, ": sample ", id, " is in no task"));
      }
    }
  }
  std::vector<int64_t> all;
  all.reserve(plan.samples.size());
  for (int64_t id : plan.samples) {
    all.push_back(lengths[id]);
    report.tokens += lengths[id];
  }
  report.makespan_s =
      *std::max_element(free_at.begin(), free_at.end()) + report.sync_s;
  report.lower_bound_s = cluster.LowerBound(all);
  report.memory_bound_s = cluster.MemoryAwareLowerBound(all);
  return report;
}

}  // namespace dcp
