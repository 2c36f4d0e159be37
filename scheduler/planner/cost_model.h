#ifndef DCP_SCHEDULER_PLANNER_COST_MODEL_H_
#define DCP_SCHEDULER_PLANNER_COST_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/model_spec.h"

namespace dcp {

/// One measured (or profiled) task: what ran and how long it took.
struct TaskObservation {
  int group_size = 1;
  /// The group's Ulysses degree (0: the whole group, no ring).
  int ulysses = 0;
  bool intra_node = true;
  double recompute = 0;
  /// Lengths of the sequences packed into the task.
  std::vector<int64_t> lengths;
  double seconds = 0;
  /// Peak memory per GPU; 0 when unknown.
  double memory_bytes = 0;

  /// The Ulysses degree the task ran with: `ulysses`, or the group size
  /// when it is 0 (as `TaskPlan::UlyssesDegree`).
  int UlyssesDegree() const { return ulysses > 0 ? ulysses : group_size; }
  /// Whether the task ran a ring of more than one Ulysses group.
  bool HoldsRing() const { return group_size / UlyssesDegree() > 1; }
};

/// The shortest task time a profile or a timing report may claim (a
/// nanosecond; no task runs faster). The relative error of a prediction for
/// a shorter one can overflow to infinity, and a fit to it can zero every
/// time coefficient.
inline constexpr double kMinTaskSeconds = 1e-9;

/// The planner's own cost model: the analytic form of the reference model
/// (docs/COST_MODEL.md) with coefficients that are fitted, not assumed.
///
/// A task runs on p = u * c GPUs: u-way Ulysses inside a c-way ring
/// (u = p, c = 1 when it has no ring; docs/COST_MODEL.md, "Hybrid groups").
///
/// time = lin * (3 + r) * (t + gemm_half)                  (t = tokens / p)
///      + max(attention, ring)     (attention + ring where the cluster's
///                                  ring passes do not overlap attention)
///      + [u > 1] (a2a_byte(intra_u) * vol(t, u) + a2a_fixed(intra_u)) * (2 + r)
///      + fixed
/// attention = attn * (3.5 + r) / p * sum_i s_i * (s_i + c * attn_half)
/// ring = [c > 1] (3 + r) * (c - 1) * (ring_byte(intra) * block(t, u)
///                                      + ring_fixed(intra))
/// where block(t, u) = 4 t d max(kv, u) / heads is a K/V block's bytes, and
/// the Ulysses subgroups count as inside a node (intra_u) when the whole
/// group is, or when the group has a ring and u divides the GPUs of a node
/// (subgroups start on ranks aligned to u, so such ones never straddle
/// nodes; the planner places groups so).
/// memory = mem_static + t * ((1 - r) * mem_token + r * mem_token_recompute
///                            + mem_token_base)
///
/// `FromSpecs` derives the coefficients from hardware and model data sheets;
/// `Fit` re-estimates the time coefficients (the GEMM's half-token constant
/// included) from observed tasks (profiles or
/// timings reported by agents) by minimising their relative error, the
/// quantity `MeanRelativeError` judges, shrunk towards the current values so
/// that few observations cannot derail it; `FitSync` does the same for the
/// gradient sync from measured sync times. A profile table (see
/// `ParseProfileTable`) is just a set of observations.
///
/// Value type; const methods are thread-safe.
///
///   CostModel m = CostModel::FromSpecs(ClusterSpec::H200(), model, 32);
///   double s = m.TaskSeconds(8, true, lengths, 0.0);
class CostModel {
 public:
  /// The fitted coefficients, in seconds, bytes and tokens.
  struct Coefficients {
    double lin = 0;        ///< s per token per GPU per (3 + r) unit
    double gemm_half = 0;  ///< tokens of GEMM inefficiency per task
    double attn = 0;       ///< s per (3.5 + r) per s*(s + attn_half) token^2
    double attn_half = 0;
    double a2a_byte_intra = 0;  ///< s per byte of all-to-all volume
    double a2a_fixed_intra = 0;
    double a2a_byte_inter = 0;
    double a2a_fixed_inter = 0;
    double ring_byte_intra = 0;  ///< s per byte of a ring pass's block
    double ring_fixed_intra = 0;  ///< s per ring pass
    double ring_byte_inter = 0;
    double ring_fixed_inter = 0;
    double fixed = 0;      ///< s per task
    double grad_sync = 0;  ///< s of gradient synchronisation per step
    double mem_static = 0;
    double mem_token = 0;
    double mem_token_recompute = 0;
    double mem_token_base = 0;
    /// `ClusterSpec::ring_overlaps_attention` at first; `Fit` keeps the
    /// form that predicts ring tasks better.
    bool ring_overlaps_attention = true;
  };

  static CostModel FromSpecs(const ClusterSpec& cluster, const ModelSpec& model,
                             int world_size);

  CostModel(Coefficients c, ModelSpec model, double memory_cap,
            int gpus_per_node);

  /// Predicted seconds of a task on `p` GPUs as `ulysses`-way Ulysses
  /// inside a ring of p / ulysses (0: the whole group, no ring).
  /// Precondition: `ulysses` is 0 or divides `p`.
  double TaskSeconds(int p, bool intra_node, absl::Span<const int64_t> lengths,
                     double recompute, int ulysses = 0) const;
  /// The same from aggregates: total tokens and sum of s*(s + attn_half)
  /// (`AttentionUnits`; the ring's shorter chunks are added here).
  double TaskSecondsFromSums(int p, bool intra_node, double tokens,
                             double attn_units, double recompute,
                             int ulysses = 0) const;
  /// s*(s + attn_half) for one sequence: attention work is additive in it.
  double AttentionUnits(double length) const {
    return length * (length + c_.attn_half);
  }
  /// The attention and the ring passes of a task, before their overlap
  /// (the task waits for the longer, or for both: `AttentionWithRing`).
  void AttentionAndRing(int p, bool intra_node, double tokens,
                        double attn_units, double recompute, int ulysses,
                        double* attention, double* ring) const;
  /// `dcp::AttentionWithRing` in this model's form.
  double AttentionWithRing(double attention, double ring) const {
    return dcp::AttentionWithRing(c_.ring_overlaps_attention, attention, ring);
  }
  /// Predicted memory per GPU for `tokens_per_gpu` tokens on each GPU.
  double MemoryBytes(double tokens_per_gpu, double recompute) const;
  /// Gradient synchronisation at the end of a step.
  double SyncSeconds() const { return c_.grad_sync; }
  /// The most tokens per GPU that fit the memory cap at this recompute (0
  /// when not even the static part fits).
  double MaxTokensPerGpu(double recompute) const;
  double memory_cap() const { return memory_cap_; }
  int gpus_per_node() const { return gpus_per_node_; }
  const ModelSpec& model() const { return model_; }
  const Coefficients& coefficients() const { return c_; }

  /// Re-estimates the time coefficients from observations: thirteen terms
  /// in which a task's time is linear, lin, lin * gemm_half, attn,
  /// attn * attn_half, the four all-to-all terms, the four ring terms and
  /// fixed (where the ring's passes overlap attention, only the one of the
  /// two this model predicts to be longer is linear in a task's time; the
  /// other's features are zero for it). So the shapes of the GEMM and attention
  /// efficiency curves are learned with their scales: a prior from another GPU
  /// has other half-efficiency token counts. attn * attn_half is fitted only
  /// when an observation holds a ring (without one it is all but collinear with
  /// the linear term) or this model has no attention half (a CPU's sheet).
  /// The memory terms and the gradient sync stay (`FitSync` learns the
  /// latter). With n observations
  /// and w = `prior_weight`:
  ///   1. one common scale s = exp(n * median_i log(measured_i /
  ///      predicted_i) / (n + w)), the median shrunk by w pseudo-observations;
  ///   2. coefficient_j = s * current_j * (1 + delta_j), with delta
  ///      minimising the sum of relative errors plus w pseudo-observations a
  ///      coefficient, each erring by that coefficient's change as a factor:
  ///        sum_i |predicted_i - measured_i| / measured_i
  ///          + w * sum_j |log(1 + delta_j)|,    subject to delta_j >= -0.95,
  ///      approximately, by iteratively reweighted least squares (weights
  ///      1 / max(|residual|, 1e-6), and |log(1 + delta)| / delta^2 a
  ///      coefficient; at most 30 rounds, until one no longer
  ///      lowers the objective; the best round kept). Absolute values, not
  ///      squares, so that a few stalled tasks pull the fit little. In each
  ///      round a coefficient that would fall below 5% of s * current_j is
  ///      held there and the others re-solved. Then a link's all-to-all
  ///      or ring term that no observation exercises takes the delta of
  ///      the same link's other collective, byte with byte and fixed with
  ///      fixed, where that one is exercised (a profile whose rings cross
  ///      nodes but whose Ulysses groups do not still teaches the
  ///      inter-node all-to-all).
  ///   3. Where an observation holds a ring, 1-2 again in the other form
  ///      (`Coefficients::ring_overlaps_attention` flipped: passes beside
  ///      attention or after it), since ring tasks show which the hardware
  ///      and the trainer do.
  ///   4. Of this model and the fits, the one whose `MeanRelativeError` on
  ///      the observations is lowest (this model, then this form, on ties):
  ///      a fit never predicts its own observations worse than its
  ///      starting point.
  /// Deterministic. INVALID_ARGUMENT for observations that make no sense or
  /// a `prior_weight` that is not positive and finite.
  absl::StatusOr<CostModel> Fit(absl::Span<const TaskObservation> observations,
                                double prior_weight = 1.0) const;

  /// Re-estimates the gradient sync (`grad_sync`, the constant a step's
  /// predicted time adds after its last task) from measured sync times, one
  /// per step: their median, shrunk towards the current value by
  /// `prior_weight` (w) pseudo-observations,
  ///   grad_sync = (n * median + w * grad_sync) / (n + w).
  /// The median, not the mean, because a step's sync absorbs whatever
  /// stalled it (a straggler, a pause): one such step must not move the term
  /// by its whole excess. Everything else stays; no measurement returns the
  /// model unchanged. INVALID_ARGUMENT for a negative or non-finite time or
  /// a `prior_weight` that is not positive.
  absl::StatusOr<CostModel> FitSync(absl::Span<const double> sync_seconds,
                                    double prior_weight = 1.0) const;

  /// Mean relative error |predicted - measured| / measured over observations.
  double MeanRelativeError(
      absl::Span<const TaskObservation> observations) const;

 private:
  double AllToAllVolume(double tokens_per_gpu, int u) const;
  /// `Fit`'s steps 1-2 in this model's form, without the comparison.
  CostModel FitInThisForm(absl::Span<const TaskObservation> observations,
                          double prior_weight) const;

  Coefficients c_;
  ModelSpec model_;
  double memory_cap_;
  int gpus_per_node_;
};

/// The header of a profile table. A table without its last column, the
/// Ulysses degree (0: the whole group, no ring), is read as all plain
/// Ulysses.
inline constexpr absl::string_view kProfileHeader =
    "length,group_size,recompute,intra_node,seconds,memory_bytes,ulysses";

/// Parses a profile table: CSV with the header `kProfileHeader` (one task of
/// one sequence per row; `#` starts a comment line). Seconds must be finite
/// and at least `kMinTaskSeconds`, memory finite and non-negative, ulysses 0
/// or a divisor of the group size. Errors name the line.
absl::StatusOr<std::vector<TaskObservation>> ParseProfileTable(
    absl::string_view text, absl::string_view source_name);

/// Reads a profile table file.
absl::StatusOr<std::vector<TaskObservation>> LoadProfileTable(
    const std::string& path);

/// Writes observations (single-sequence tasks) in the profile table format.
std::string FormatProfileTable(absl::Span<const TaskObservation> observations);

}  // namespace dcp

#endif  // DCP_SCHEDULER_PLANNER_COST_MODEL_H_
