// CostModel's fits: Fit (the time coefficients, from observed tasks, by
// iteratively reweighted least squares over their relative errors) and
// FitSync (the gradient sync, from measured sync times). cost_model.cc holds
// the predictions and the profile table.

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "scheduler/planner/cost_model.h"

namespace dcp {

namespace {

// The time coefficients `Fit` learns, in a fixed order. A task's predicted
// seconds are linear in them: the GEMM's half-token constant enters as the
// product lin * gemm_half, since
//   lin * (3 + r) * (t + gemm_half) = lin * (3 + r) * t
//                                     + (lin * gemm_half) * (3 + r),
// so a fit learns the shape of the GEMM efficiency curve, not only its
// scale. Attention's half enters the same way, as attn * attn_half, which
// multiplies (3.5 + r) * c * tokens / p for a ring of c chunks: what
// cutting a sequence into a ring's chunks costs its attention. Without a
// ring (c = 1) that is all but collinear with the linear term, and the two
// would trade off freely, so it is fitted only from observations that hold
// a ring, or where the model has no half at all (`BuildRelativeSystem`).
constexpr int kNumTimeCoefficients = 13;
constexpr int kLin = 0, kLinHalf = 1, kAttn = 2, kA2aFirst = 3,
              kRingFirst = 7, kRingEnd = 11, kAttnHalf = 12;
using TimeVector = std::array<double, kNumTimeCoefficients>;

TimeVector TimeValues(const CostModel::Coefficients& c) {
  return {c.lin,
          c.lin * c.gemm_half,
          c.attn,
          c.a2a_byte_intra,
          c.a2a_fixed_intra,
          c.a2a_byte_inter,
          c.a2a_fixed_inter,
          c.ring_byte_intra,
          c.ring_fixed_intra,
          c.ring_byte_inter,
          c.ring_fixed_inter,
          c.fixed,
          c.attn * c.attn_half};
}

// The inverse of `TimeValues`; gemm_half (attn_half) keeps its value when
// lin (attn) is 0: it does not matter then.
void SetTimeValues(const TimeVector& v, CostModel::Coefficients& c) {
  c.lin = v[kLin];
  if (v[kLin] > 0) c.gemm_half = v[kLinHalf] / v[kLin];
  c.attn = v[kAttn];
  if (v[kAttn] > 0) c.attn_half = v[kAttnHalf] / v[kAttn];
  c.a2a_byte_intra = v[3];
  c.a2a_fixed_intra = v[4];
  c.a2a_byte_inter = v[5];
  c.a2a_fixed_inter = v[6];
  c.ring_byte_intra = v[7];
  c.ring_fixed_intra = v[8];
  c.ring_byte_inter = v[9];
  c.ring_fixed_inter = v[10];
  c.fixed = v[11];
}

// The coefficients of a model whose time is the j-th term alone times one
// unit, except for the half-token products (j = kLinHalf, kAttnHalf),
// whose model is lin = 1 (attn = 1) with a half of 1: the caller subtracts
// the lin (attn) term from its time.
CostModel::Coefficients UnitCoefficients(CostModel::Coefficients c, int j) {
  TimeVector unit{};
  unit[j == kLinHalf ? kLin : j == kAttnHalf ? kAttn : j] = 1;
  SetTimeValues(unit, c);
  c.gemm_half = j == kLinHalf ? 1 : 0;
  c.attn_half = j == kAttnHalf ? 1 : 0;
  return c;
}

// A fitted coefficient never falls below 5% of its scaled value: the fit is
// relative to it, so a coefficient at zero could not be moved by later fits.
constexpr double kDeltaFloor = -0.95;
// Relative residuals below this weigh as this in the reweighting, which
// keeps the weighted systems well posed once residuals reach zero.
constexpr double kResidualFloor = 1e-6;
constexpr int kMaxReweightings = 30;
// The attention half (tokens) a fit starts from when the model has none.
constexpr double kAttnHalfFloor = 16;

absl::Status ValidateObservations(
    absl::Span<const TaskObservation> observations) {
  for (size_t i = 0; i < observations.size(); ++i) {
    const TaskObservation& o = observations[i];
    if (o.group_size <= 0 || o.lengths.empty() || !(o.seconds > 0) ||
        !std::isfinite(o.seconds) || !(o.recompute >= 0 && o.recompute <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "observation ", i,
          ": needs a positive group size, at least one length, positive "
          "finite seconds and recompute in [0, 1]"));
    }
    if (o.ulysses < 0 || (o.ulysses > 0 && o.group_size % o.ulysses != 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "observation ", i, ": Ulysses degree ", o.ulysses,
          " must be 0 or divide the group size ", o.group_size));
    }
    for (int64_t s : o.lengths) {
      if (s <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("observation ", i, ": lengths must be positive"));
      }
    }
  }
  return absl::OkStatus();
}

// Relative residuals of the fit as a linear function of the relative
// changes delta_j of the coefficients from `base`:
//   r_i(delta) = (measured_i - predicted_i) / measured_i = b_i - a_i . delta.
struct RelativeSystem {
  TimeVector base;
  std::vector<TimeVector> a;
  std::vector<double> b;

  double Residual(size_t i, const TimeVector& delta) const {
    double r = b[i];
    for (int j = 0; j < kNumTimeCoefficients; ++j) r -= a[i][j] * delta[j];
    return r;
  }
};

// What a coefficient's relative change `delta` costs against the prior, in
// pseudo-observations of relative error: |log(1 + delta)|, the change as a
// factor either way. A relative error cannot pass 1 when a task runs
// slower than predicted, so a penalty linear in delta would keep a
// coefficient the prior has 20x too small at the prior against any number
// of observations; in log space it costs log(20) = 3.
double PriorCost(double delta) { return std::abs(std::log1p(delta)); }

// sum_i |r_i| + prior_weight * sum_j PriorCost(delta_j): what the fit
// minimises.
double Objective(const RelativeSystem& s, const TimeVector& delta,
                 double prior_weight) {
  double sum = 0;
  for (size_t i = 0; i < s.b.size(); ++i) sum += std::abs(s.Residual(i, delta));
  for (double d : delta) sum += prior_weight * PriorCost(d);
  return sum;
}

// Solves a (small, symmetric positive definite) linear system in place.
bool Solve(std::vector<std::vector<double>>& a, std::vector<double>& b) {
  const int n = static_cast<int>(b.size());
  for (int col = 0; col < n; ++col) {
    int pivot = col;
    for (int r = col + 1; r < n; ++r) {
      if (std::abs(a[r][col]) > std::abs(a[pivot][col])) pivot = r;
    }
    if (std::abs(a[pivot][col]) < 1e-300) return false;
    std::swap(a[pivot], a[col]);
    std::swap(b[pivot], b[col]);
    for (int r = 0; r < n; ++r) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      if (f == 0) continue;
      for (int k = col; k < n; ++k) a[r][k] -= f * a[col][k];
      b[r] -= f * b[col];
    }
  }
  for (int i = 0; i < n; ++i) b[i] /= a[i][i];
  return true;
}

// Minimises sum_i w_i r_i^2 + sum_j v_j delta_j^2 over the deltas not
// `pinned`; pinned ones stay at kDeltaFloor. False on a singular system.
bool SolveWeighted(const RelativeSystem& s, absl::Span<const double> w,
                   const TimeVector& v,
                   const std::array<bool, kNumTimeCoefficients>& pinned,
                   TimeVector& delta) {
  std::vector<int> free;
  for (int j = 0; j < kNumTimeCoefficients; ++j) {
    if (!pinned[j]) free.push_back(j);
  }
  const size_t n = free.size();
  std::vector<std::vector<double>> ata(n, std::vector<double>(n, 0));
  std::vector<double> atb(n, 0);
  for (size_t i = 0; i < s.b.size(); ++i) {
    double y = s.b[i];
    for (int j = 0; j < kNumTimeCoefficients; ++j) {
      if (pinned[j]) y -= s.a[i][j] * kDeltaFloor;
    }
    for (size_t j = 0; j < n; ++j) {
      const double wa = w[i] * s.a[i][free[j]];
      atb[j] += wa * y;
      for (size_t k = 0; k < n; ++k) ata[j][k] += wa * s.a[i][free[k]];
    }
  }
  for (size_t j = 0; j < n; ++j) ata[j][j] += v[free[j]];
  if (!Solve(ata, atb)) return false;
  for (int j = 0; j < kNumTimeCoefficients; ++j) {
    if (pinned[j]) delta[j] = kDeltaFloor;
  }
  for (size_t j = 0; j < n; ++j) delta[free[j]] = atb[j];
  return true;
}

// `SolveWeighted` subject to delta_j >= kDeltaFloor: while a free delta
// comes out below the floor, the lowest one is pinned there and the others
// re-solved. False on a singular system.
bool SolveWeightedAboveFloor(const RelativeSystem& s,
                             absl::Span<const double> w, const TimeVector& v,
                             TimeVector& delta) {
  std::array<bool, kNumTimeCoefficients> pinned{};
  for (int round = 0; round < kNumTimeCoefficients; ++round) {
    if (!SolveWeighted(s, w, v, pinned, delta)) return false;
    int lowest = -1;
    for (int j = 0; j < kNumTimeCoefficients; ++j) {
      if (!pinned[j] && delta[j] < kDeltaFloor &&
          (lowest < 0 || delta[j] < delta[lowest])) {
        lowest = j;
      }
    }
    if (lowest < 0) return true;
    pinned[lowest] = true;
  }
  // Every round pinned one more: all are pinned now, at the floor (the last
  // one still holds the value it was solved to, below the floor).
  delta.fill(kDeltaFloor);
  return true;
}

// Iteratively reweighted least squares for `Objective`: each round solves
// the weighted problem with w_i = 1 / |r_i| and v_j = prior_weight *
// PriorCost(delta_j) / delta_j^2 from the previous round (the first is
// plain ridge least squares), so its quadratic matches the objective's
// terms at that point.
// Stops when a round no longer lowers the objective; returns the deltas of
// the lowest objective seen (delta = 0 included).
TimeVector MinimiseRelativeError(const RelativeSystem& s, double prior_weight) {
  TimeVector best{};
  double best_objective = Objective(s, best, prior_weight);
  double previous = std::numeric_limits<double>::infinity();
  std::vector<double> w(s.b.size(), 1.0);
  TimeVector v;
  v.fill(prior_weight);
  for (int round = 0; round < kMaxReweightings; ++round) {
    TimeVector delta{};
    if (!SolveWeightedAboveFloor(s, w, v, delta)) break;
    const double objective = Objective(s, delta, prior_weight);
    if (objective < best_objective) {
      best = delta;
      best_objective = objective;
    }
    if (objective >= previous * (1 - 1e-9)) break;
    previous = objective;
    for (size_t i = 0; i < s.b.size(); ++i) {
      w[i] = 1 / std::max(std::abs(s.Residual(i, delta)), kResidualFloor);
    }
    for (int j = 0; j < kNumTimeCoefficients; ++j) {
      v[j] = prior_weight *
             std::max(PriorCost(delta[j]), kResidualFloor) /
             std::max(delta[j] * delta[j], kResidualFloor * kResidualFloor);
    }
  }
  return best;
}

// Task i's seconds per unit of each time coefficient of `model`: what a
// model with that coefficient 1 and the others 0 predicts.
std::vector<TimeVector> TimeFeatures(
    const CostModel& model, absl::Span<const TaskObservation> observations) {
  std::vector<TimeVector> features(observations.size());
  for (int j = 0; j < kNumTimeCoefficients; ++j) {
    const CostModel m(UnitCoefficients(model.coefficients(), j), model.model(),
                      model.memory_cap(), model.gpus_per_node());
    for (size_t i = 0; i < observations.size(); ++i) {
      const TaskObservation& o = observations[i];
      features[i][j] =
          m.TaskSeconds(o.group_size, o.intra_node, o.lengths, o.recompute,
                        o.ulysses);
      if (j == kLinHalf) features[i][j] -= features[i][kLin];
      if (j == kAttnHalf) features[i][j] -= features[i][kAttn];
    }
  }
  // Where the ring's passes do not overlap attention both add to a task's
  // time, and both are fitted. Where they do only the longer adds: the
  // other's features are zero for the task, as `model` sees it.
  if (!model.coefficients().ring_overlaps_attention) return features;
  for (size_t i = 0; i < observations.size(); ++i) {
    const TaskObservation& o = observations[i];
    double tokens = 0, units = 0;
    for (int64_t s : o.lengths) {
      tokens += static_cast<double>(s);
      units += model.AttentionUnits(static_cast<double>(s));
    }
    double attention = 0, ring = 0;
    model.AttentionAndRing(o.group_size, o.intra_node, tokens, units,
                           o.recompute, o.ulysses, &attention, &ring);
    if (ring > attention) {
      features[i][kAttn] = 0;
      features[i][kAttnHalf] = 0;
    } else {
      for (int j = kRingFirst; j < kRingEnd; ++j) features[i][j] = 0;
    }
  }
  return features;
}

// One common scale of every time coefficient: the median of
// log(measured / predicted), shrunk towards 0 by `prior_weight`
// pseudo-observations. Hardware that is uniformly slower or faster than its
// data sheet (or a CPU standing in for a GPU) is then matched at once and
// costs no prior; the deltas only correct the shape. The median, so that a
// few stalled tasks do not move it.
double CommonScale(const CostModel& model,
                   absl::Span<const TaskObservation> observations,
                   double prior_weight) {
  std::vector<double> log_ratios;
  for (const TaskObservation& o : observations) {
    const double predicted =
        model.TaskSeconds(o.group_size, o.intra_node, o.lengths, o.recompute,
                         o.ulysses);
    if (predicted > 0) log_ratios.push_back(std::log(o.seconds / predicted));
  }
  if (log_ratios.empty()) return 1;
  std::sort(log_ratios.begin(), log_ratios.end());
  const size_t n = log_ratios.size();
  const double median = n % 2 == 1
                            ? log_ratios[n / 2]
                            : 0.5 * (log_ratios[n / 2 - 1] + log_ratios[n / 2]);
  return std::exp(static_cast<double>(n) * median /
                  (static_cast<double>(n) + prior_weight));
}

// The fit's residuals around `model`'s coefficients times `CommonScale`.
RelativeSystem BuildRelativeSystem(
    const CostModel& model, absl::Span<const TaskObservation> observations,
    double prior_weight) {
  const double scale = CommonScale(model, observations, prior_weight);
  const TimeVector current = TimeValues(model.coefficients());
  RelativeSystem s;
  for (int j = 0; j < kNumTimeCoefficients; ++j) s.base[j] = scale * current[j];
  std::vector<TimeVector> features = TimeFeatures(model, observations);
  const double half = model.coefficients().attn_half;
  if (!(half > 0)) {
    // A sheet without an attention half (a CPU's) has the wrong shape for
    // any accelerator, so its half is learnt even without a ring, where the
    // recompute ratio alone tells it from the linear term. A relative fit
    // cannot move a coefficient from zero: it starts from kAttnHalfFloor
    // tokens.
    s.base[kAttnHalf] = s.base[kAttn] * kAttnHalfFloor;
  } else if (std::none_of(
                 observations.begin(), observations.end(),
                 [](const TaskObservation& o) { return o.HoldsRing(); })) {
    // No ring: the half stays as it is, a part of attention's term.
    for (TimeVector& f : features) {
      f[kAttn] += half * f[kAttnHalf];
      f[kAttnHalf] = 0;
    }
  }
  for (size_t i = 0; i < observations.size(); ++i) {
    TimeVector& a = s.a.emplace_back();
    double b = 1;
    for (int j = 0; j < kNumTimeCoefficients; ++j) {
      a[j] = s.base[j] * features[i][j] / observations[i].seconds;
      b -= a[j];
    }
    s.b.push_back(b);
  }
  return s;
}

// A term no observation exercises (its column all zero, in this form) moves
// by the factor its link's other collective moved, when that one is
// exercised: both cross the same wires, and a data sheet prices both from
// one bandwidth and latency. Otherwise, say, a profile whose rings span
// nodes but whose Ulysses groups stay inside one would leave the inter-node
// all-to-all at the prior's guess while learning the ring's.
void FollowTheLink(const RelativeSystem& s, TimeVector& delta) {
  const auto exercised = [&](int j) {
    return std::any_of(s.a.begin(), s.a.end(),
                       [j](const TimeVector& row) { return row[j] != 0; });
  };
  // The all-to-all terms stand in TimeVector in the ring's order (byte
  // and fixed, intra- then inter-node): term i of one is its link's twin
  // of term i of the other.
  for (int i = 0; i < kRingEnd - kRingFirst; ++i) {
    const int a2a = kA2aFirst + i, ring = kRingFirst + i;
    const bool a2a_seen = exercised(a2a), ring_seen = exercised(ring);
    if (!a2a_seen && ring_seen) delta[a2a] = delta[ring];
    if (a2a_seen && !ring_seen) delta[ring] = delta[a2a];
  }
}

}  // namespace

absl::StatusOr<CostModel> CostModel::Fit(
    absl::Span<const TaskObservation> observations, double prior_weight) const {
  if (!(prior_weight > 0) || !std::isfinite(prior_weight)) {
    return absl::InvalidArgumentError(
        "prior_weight must be positive and finite");
  }
  RETURN_IF_ERROR(ValidateObservations(observations));
  // The minimum includes the prior's pull, and the common scale moved the
  // starting point, so a fit can predict its own observations worse than
  // this model does; then this model stands.
  CostModel best = *this;
  double best_error = MeanRelativeError(observations);
  const auto consider = [&](const CostModel& candidate) {
    const double error = candidate.MeanRelativeError(observations);
    if (error < best_error) {
      best = candidate;
      best_error = error;
    }
  };
  consider(FitInThisForm(observations, prior_weight));
  // Whether a ring's passes overlap its attention is the hardware's (and
  // the trainer's: a ring that waits for each pass before computing never
  // overlaps), and ring tasks show it: the other form is fitted too, and
  // the better of all stands. Without a ring task both forms predict alike.
  const bool rings =
      std::any_of(observations.begin(), observations.end(),
                  [](const TaskObservation& o) { return o.HoldsRing(); });
  if (rings) {
    Coefficients other = c_;
    other.ring_overlaps_attention = !c_.ring_overlaps_attention;
    consider(CostModel(other, model_, memory_cap_, gpus_per_node_)
                 .FitInThisForm(observations, prior_weight));
  }
  return best;
}

CostModel CostModel::FitInThisForm(
    absl::Span<const TaskObservation> observations, double prior_weight) const {
  const RelativeSystem s =
      BuildRelativeSystem(*this, observations, prior_weight);
  TimeVector delta = MinimiseRelativeError(s, prior_weight);
  FollowTheLink(s, delta);
  Coefficients c = c_;
  TimeVector fitted_values;
  for (int j = 0; j < kNumTimeCoefficients; ++j) {
    fitted_values[j] = s.base[j] * (1 + delta[j]);
  }
  SetTimeValues(fitted_values, c);
  return CostModel(c, model_, memory_cap_, gpus_per_node_);
}

absl::StatusOr<CostModel> CostModel::FitSync(
    absl::Span<const double> sync_seconds, double prior_weight) const {
  if (!(prior_weight > 0) || !std::isfinite(prior_weight)) {
    return absl::InvalidArgumentError(
        "prior_weight must be positive and finite");
  }
  for (size_t i = 0; i < sync_seconds.size(); ++i) {
    if (!std::isfinite(sync_seconds[i]) || sync_seconds[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sync time ", i, ": ", sync_seconds[i], " is not finite and >= 0"));
    }
  }
  if (sync_seconds.empty()) return *this;
  std::vector<double> sorted(sync_seconds.begin(), sync_seconds.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median =
      n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  Coefficients c = c_;
  const double w = static_cast<double>(n) / (static_cast<double>(n) + prior_weight);
  // A time is a scale: shrunk in log space (as the task coefficients'
  // common scale is), so a prior 100x off weighs like one measurement 100x
  // off, not like a hundred. A median of 0 (syncs that took no time) has
  // no logarithm: then the mean of the two.
  c.grad_sync = median > 0 && c_.grad_sync > 0
                    ? std::exp(w * std::log(median) +
                               (1 - w) * std::log(c_.grad_sync))
                    : w * median + (1 - w) * c_.grad_sync;
  return CostModel(c, model_, memory_cap_, gpus_per_node_);
}

}  // namespace dcp
