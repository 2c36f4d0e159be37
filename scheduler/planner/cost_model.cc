#include "scheduler/planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dcp {

CostModel CostModel::FromSpecs(const ClusterSpec& cluster,
                               const ModelSpec& model, int world_size) {
  Coefficients c;
  const double layers = model.layers;
  const double d = model.hidden;
  c.lin = 2.0 * model.ParamsPerLayer() * layers /
          (cluster.peak_flops * cluster.gemm_eff_max);
  c.gemm_half = cluster.gemm_eff_half_tokens;
  c.attn = 4.0 * d * layers * model.AttentionFactor() /
           (cluster.peak_flops * cluster.attn_eff_max);
  c.attn_half = cluster.attn_eff_half_tokens;
  c.a2a_byte_intra = layers / cluster.intra_node_bw;
  c.a2a_fixed_intra = 4.0 * cluster.intra_node_latency_s * layers;
  c.a2a_byte_inter = layers / cluster.inter_node_bw;
  c.a2a_fixed_inter = 4.0 * cluster.inter_node_latency_s * layers;
  c.fixed = cluster.overhead_per_layer_s * layers;
  c.grad_sync = 2.0 * (world_size - 1.0) / world_size * 2.0 *
                model.TotalParams() / cluster.grad_sync_bw;
  c.mem_static = 16.0 * model.TotalParams() / world_size;
  c.mem_token = 34.0 * d * layers;
  c.mem_token_recompute = 2.0 * d * layers;
  c.mem_token_base = 34.0 * d;
  return CostModel(c, model, cluster.MemoryCap(), cluster.gpus_per_node);
}

CostModel::CostModel(Coefficients c, ModelSpec model, double memory_cap,
                     int gpus_per_node)
    : c_(c),
      model_(std::move(model)),
      memory_cap_(memory_cap),
      gpus_per_node_(gpus_per_node) {}

double CostModel::AllToAllVolume(double t, int p) const {
  const double pd = p;
  return 2.0 * t * model_.hidden *
         (2.0 + 2.0 * std::max<double>(model_.kv_heads, pd) / model_.heads) *
         (pd - 1.0) / pd;
}

double CostModel::TaskSecondsFromSums(int p, bool intra_node, double tokens,
                                      double attn_units,
                                      double recompute) const {
  const double t = tokens / p;
  double s = c_.lin * (3.0 + recompute) * (t + c_.gemm_half) +
             c_.attn * (3.5 + recompute) / p * attn_units + c_.fixed;
  if (p > 1) {
    const double byte = intra_node ? c_.a2a_byte_intra : c_.a2a_byte_inter;
    const double fixed = intra_node ? c_.a2a_fixed_intra : c_.a2a_fixed_inter;
    s += (byte * AllToAllVolume(t, p) + fixed) * (2.0 + recompute);
  }
  return s;
}

double CostModel::TaskSeconds(int p, bool intra_node,
                              absl::Span<const int64_t> lengths,
                              double recompute) const {
  double tokens = 0;
  double units = 0;
  for (int64_t s : lengths) {
    tokens += static_cast<double>(s);
    units += AttentionUnits(static_cast<double>(s));
  }
  return TaskSecondsFromSums(p, intra_node, tokens, units, recompute);
}

double CostModel::MemoryBytes(double tokens_per_gpu, double recompute) const {
  return c_.mem_static + tokens_per_gpu * ((1.0 - recompute) * c_.mem_token +
                                           recompute * c_.mem_token_recompute +
                                           c_.mem_token_base);
}

double CostModel::MaxTokensPerGpu(double recompute) const {
  const double per_token = (1.0 - recompute) * c_.mem_token +
                           recompute * c_.mem_token_recompute +
                           c_.mem_token_base;
  const double room = memory_cap_ - c_.mem_static;
  if (room <= 0 || per_token <= 0) return 0;
  return room / per_token;
}

namespace {

constexpr int kNumTimeFeatures = 7;

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

}  // namespace

absl::StatusOr<CostModel> CostModel::Fit(
    absl::Span<const TaskObservation> observations, double prior_weight) const {
  if (prior_weight <= 0) {
    return absl::InvalidArgumentError("prior_weight must be positive");
  }
  // First one common scale for every time coefficient: the geometric mean
  // of measured / predicted, shrunk towards 1 by `prior_weight`
  // pseudo-observations. Hardware that is uniformly slower or faster than its
  // data sheet (or a CPU standing in for a GPU) is then matched at once, and
  // the per-coefficient fit below only has to correct the shape.
  double log_ratio = 0;
  for (size_t i = 0; i < observations.size(); ++i) {
    const TaskObservation& o = observations[i];
    if (o.group_size <= 0 || o.lengths.empty() || !(o.seconds > 0) ||
        !(o.recompute >= 0 && o.recompute <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "observation ", i,
          ": needs a positive group size, at least one length, positive "
          "seconds and recompute in [0, 1]"));
    }
    for (int64_t s : o.lengths) {
      if (s <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("observation ", i, ": lengths must be positive"));
      }
    }
    log_ratio += std::log(o.seconds / TaskSeconds(o.group_size, o.intra_node,
                                                  o.lengths, o.recompute));
  }
  const double scale = std::exp(
      log_ratio / (static_cast<double>(observations.size()) + prior_weight));
  // Then a relative parametrisation: coefficient_j = scaled_j * (1 + delta_j),
  // so the prior pulls every delta to 0 on the same scale, and residuals are
  // divided by the measured time so that long and short tasks count alike.
  const double base[kNumTimeFeatures] = {scale * c_.lin,
                                         scale * c_.attn,
                                         scale * c_.a2a_byte_intra,
                                         scale * c_.a2a_fixed_intra,
                                         scale * c_.a2a_byte_inter,
                                         scale * c_.a2a_fixed_inter,
                                         scale * c_.fixed};
  std::vector<std::vector<double>> ata(
      kNumTimeFeatures, std::vector<double>(kNumTimeFeatures, 0));
  std::vector<double> atb(kNumTimeFeatures, 0);
  for (size_t i = 0; i < observations.size(); ++i) {
    const TaskObservation& o = observations[i];
    double tokens = 0, units = 0;
    for (int64_t s : o.lengths) {
      tokens += static_cast<double>(s);
      units += AttentionUnits(static_cast<double>(s));
    }
    const double p = o.group_size;
    const double r = o.recompute;
    const double t = tokens / p;
    double x[kNumTimeFeatures] = {0};
    x[0] = (3.0 + r) * (t + c_.gemm_half);
    x[1] = (3.5 + r) / p * units;
    if (o.group_size > 1) {
      const double vol = AllToAllVolume(t, o.group_size) * (2.0 + r);
      (o.intra_node ? x[2] : x[4]) = vol;
      (o.intra_node ? x[3] : x[5]) = 2.0 + r;
    }
    x[6] = 1.0;
    double predicted = 0;
    for (int j = 0; j < kNumTimeFeatures; ++j) {
      x[j] *= base[j];
      predicted += x[j];
    }
    const double y = (o.seconds - predicted) / o.seconds;
    for (int j = 0; j < kNumTimeFeatures; ++j) {
      const double xj = x[j] / o.seconds;
      atb[j] += xj * y;
      for (int k = 0; k < kNumTimeFeatures; ++k) {
        ata[j][k] += xj * x[k] / o.seconds;
      }
    }
  }
  for (int j = 0; j < kNumTimeFeatures; ++j) ata[j][j] += prior_weight;
  if (!Solve(ata, atb)) {
    return absl::InternalError("cost model fit: singular system");
  }
  Coefficients c = c_;
  double* out[kNumTimeFeatures] = {&c.lin,
                                   &c.attn,
                                   &c.a2a_byte_intra,
                                   &c.a2a_fixed_intra,
                                   &c.a2a_byte_inter,
                                   &c.a2a_fixed_inter,
                                   &c.fixed};
  for (int j = 0; j < kNumTimeFeatures; ++j) {
    // A coefficient may shrink a lot but never turn negative.
    *out[j] = base[j] * std::max(0.05, 1.0 + atb[j]);
  }
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
  c.grad_sync =
      (static_cast<double>(n) * median + prior_weight * c_.grad_sync) /
      (static_cast<double>(n) + prior_weight);
  return CostModel(c, model_, memory_cap_, gpus_per_node_);
}

double CostModel::MeanRelativeError(
    absl::Span<const TaskObservation> observations) const {
  if (observations.empty()) return 0;
  double sum = 0;
  for (const TaskObservation& o : observations) {
    const double pred =
        TaskSeconds(o.group_size, o.intra_node, o.lengths, o.recompute);
    sum += std::abs(pred - o.seconds) / o.seconds;
  }
  return sum / observations.size();
}

absl::StatusOr<std::vector<TaskObservation>> ParseProfileTable(
    absl::string_view text, absl::string_view source_name) {
  std::vector<TaskObservation> out;
  bool header_seen = false;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripTrailingAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    if (!header_seen) {
      if (line !=
          "length,group_size,recompute,intra_node,seconds,memory_bytes") {
        return absl::InvalidArgumentError(absl::StrCat(
            source_name, ":", line_no,
            ": expected the header "
            "'length,group_size,recompute,intra_node,seconds,memory_bytes'"));
      }
      header_seen = true;
      continue;
    }
    std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    auto bad = [&](const std::string& what) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_name, ":", line_no, ": ", what));
    };
    if (f.size() != 6) {
      return bad(absl::StrCat("expected 6 fields, got ", f.size()));
    }
    TaskObservation o;
    int64_t length = 0;
    int intra = 0;
    if (!absl::SimpleAtoi(f[0], &length) || length <= 0) {
      return bad(
          absl::StrCat("length must be a positive integer, got '", f[0], "'"));
    }
    if (!absl::SimpleAtoi(f[1], &o.group_size) || o.group_size <= 0) {
      return bad(absl::StrCat("group_size must be a positive integer, got '",
                              f[1], "'"));
    }
    if (!absl::SimpleAtod(f[2], &o.recompute) || !(o.recompute >= 0) ||
        o.recompute > 1) {
      return bad(absl::StrCat("recompute must be in [0, 1], got '", f[2], "'"));
    }
    if (!absl::SimpleAtoi(f[3], &intra) || (intra != 0 && intra != 1)) {
      return bad(absl::StrCat("intra_node must be 0 or 1, got '", f[3], "'"));
    }
    if (!absl::SimpleAtod(f[4], &o.seconds) || !(o.seconds > 0)) {
      return bad(absl::StrCat("seconds must be positive, got '", f[4], "'"));
    }
    if (!absl::SimpleAtod(f[5], &o.memory_bytes) || !(o.memory_bytes >= 0)) {
      return bad(
          absl::StrCat("memory_bytes must be non-negative, got '", f[5], "'"));
    }
    o.intra_node = intra == 1;
    o.lengths = {length};
    out.push_back(std::move(o));
  }
  if (!header_seen) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": empty profile table"));
  }
  return out;
}

absl::StatusOr<std::vector<TaskObservation>> LoadProfileTable(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot open profile table '", path, "'"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseProfileTable(buffer.str(), path);
}

std::string FormatProfileTable(absl::Span<const TaskObservation> observations) {
  std::string out =
      "length,group_size,recompute,intra_node,seconds,memory_bytes\n";
  for (const TaskObservation& o : observations) {
    int64_t length = 0;
    for (int64_t s : o.lengths) length += s;
    absl::StrAppend(&out, length, ",", o.group_size, ",", o.recompute, ",",
                    o.intra_node ? 1 : 0, ",",
                    absl::StrFormat("%.9g", o.seconds), ",",
                    absl::StrFormat("%.0f", o.memory_bytes), "\n");
  }
  return out;
}

}  // namespace dcp
