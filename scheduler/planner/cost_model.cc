// CostModel's predictions (its coefficients from data sheets, task time and
// memory, the relative error of its predictions) and the profile table's
// parser and writer. The fits, Fit and FitSync, are in cost_model_fit.cc.

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
  c.ring_byte_intra = layers / cluster.intra_node_bw;
  c.ring_fixed_intra = cluster.intra_node_latency_s * layers;
  c.ring_byte_inter = layers / cluster.inter_node_bw;
  c.ring_fixed_inter = cluster.inter_node_latency_s * layers;
  c.fixed = cluster.overhead_per_layer_s * layers;
  c.grad_sync = 2.0 * (world_size - 1.0) / world_size * 2.0 *
                model.TotalParams() / cluster.grad_sync_bw;
  c.mem_static = 16.0 * model.TotalParams() / world_size;
  c.mem_token = 34.0 * d * layers;
  c.mem_token_recompute = 2.0 * d * layers;
  c.mem_token_base = 34.0 * d;
  c.ring_overlaps_attention = cluster.ring_overlaps_attention;
  return CostModel(c, model, cluster.MemoryCap(), cluster.gpus_per_node);
}

CostModel::CostModel(Coefficients c, ModelSpec model, double memory_cap,
                     int gpus_per_node)
    : c_(c),
      model_(std::move(model)),
      memory_cap_(memory_cap),
      gpus_per_node_(gpus_per_node) {}

double CostModel::AllToAllVolume(double t, int u) const {
  const double ud = u;
  return 2.0 * t * model_.hidden *
         (2.0 + 2.0 * std::max<double>(model_.kv_heads, ud) / model_.heads) *
         (ud - 1.0) / ud;
}

void CostModel::AttentionAndRing(int p, bool intra_node, double tokens,
                                 double attn_units, double recompute,
                                 int ulysses, double* attention,
                                 double* ring) const {
  const int u = ulysses > 0 ? ulysses : p;
  const double c = static_cast<double>(p) / u;
  // Each ring step attends over chunks of s / c tokens: s * (s / c + half)
  // per chunk pair, c of them a GPU's share.
  *attention = c_.attn * (3.5 + recompute) / p *
               (attn_units + (c - 1.0) * c_.attn_half * tokens);
  *ring = 0;
  if (c > 1) {
    const double block = 4.0 * tokens / p * model_.hidden *
                         std::max<double>(model_.kv_heads, u) / model_.heads;
    const double byte = intra_node ? c_.ring_byte_intra : c_.ring_byte_inter;
    const double fixed = intra_node ? c_.ring_fixed_intra : c_.ring_fixed_inter;
    *ring = (3.0 + recompute) * (c - 1.0) * (byte * block + fixed);
  }
}

double CostModel::TaskSecondsFromSums(int p, bool intra_node, double tokens,
                                      double attn_units, double recompute,
                                      int ulysses) const {
  const int u = ulysses > 0 ? ulysses : p;
  const double t = tokens / p;
  double attention = 0, ring = 0;
  AttentionAndRing(p, intra_node, tokens, attn_units, recompute, ulysses,
                   &attention, &ring);
  double s = c_.lin * (3.0 + recompute) * (t + c_.gemm_half) +
             AttentionWithRing(attention, ring) + c_.fixed;
  if (u > 1) {
    // Subgroups of a ring, placed aligned to u, stay inside a node when u
    // divides a node; a plain Ulysses group is the whole group.
    const bool intra = intra_node || (u < p && gpus_per_node_ > 0 &&
                                      gpus_per_node_ % u == 0);
    const double byte = intra ? c_.a2a_byte_intra : c_.a2a_byte_inter;
    const double fixed = intra ? c_.a2a_fixed_intra : c_.a2a_fixed_inter;
    s += (byte * AllToAllVolume(t, u) + fixed) * (2.0 + recompute);
  }
  return s;
}

double CostModel::TaskSeconds(int p, bool intra_node,
                              absl::Span<const int64_t> lengths,
                              double recompute, int ulysses) const {
  double tokens = 0;
  double units = 0;
  for (int64_t s : lengths) {
    tokens += static_cast<double>(s);
    units += AttentionUnits(static_cast<double>(s));
  }
  return TaskSecondsFromSums(p, intra_node, tokens, units, recompute, ulysses);
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

double CostModel::MeanRelativeError(
    absl::Span<const TaskObservation> observations) const {
  if (observations.empty()) return 0;
  double sum = 0;
  for (const TaskObservation& o : observations) {
    const double pred =
        TaskSeconds(o.group_size, o.intra_node, o.lengths, o.recompute,
                    o.ulysses);
    sum += std::abs(pred - o.seconds) / o.seconds;
  }
  return sum / observations.size();
}

absl::StatusOr<std::vector<TaskObservation>> ParseProfileTable(
    absl::string_view text, absl::string_view source_name) {
  std::vector<TaskObservation> out;
  size_t fields = 0;  // 0 until the header
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripTrailingAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    if (fields == 0) {
      if (line == kProfileHeader) {
        fields = 7;
      } else if (line == kProfileHeader.substr(0, kProfileHeader.rfind(','))) {
        fields = 6;  // no ulysses column: every group plain Ulysses
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(source_name, ":", line_no, ": expected the header '",
                         kProfileHeader, "' (its last column optional)"));
      }
      continue;
    }
    std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    auto bad = [&](const std::string& what) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_name, ":", line_no, ": ", what));
    };
    if (f.size() != fields) {
      return bad(absl::StrCat("expected ", fields, " fields, got ", f.size()));
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
    if (!absl::SimpleAtod(f[4], &o.seconds) ||
        !(o.seconds >= kMinTaskSeconds) || !std::isfinite(o.seconds)) {
      return bad(absl::StrCat("seconds must be finite and at least ",
                              kMinTaskSeconds, ", got '", f[4], "'"));
    }
    if (!absl::SimpleAtod(f[5], &o.memory_bytes) || !(o.memory_bytes >= 0) ||
        !std::isfinite(o.memory_bytes)) {
      return bad(absl::StrCat(
          "memory_bytes must be finite and non-negative, got '", f[5], "'"));
    }
    if (fields == 7 &&
        (!absl::SimpleAtoi(f[6], &o.ulysses) || o.ulysses < 0 ||
         (o.ulysses > 0 && o.group_size % o.ulysses != 0))) {
      return bad(absl::StrCat(
          "ulysses must be 0 or a divisor of group_size ", o.group_size,
          ", got '", f[6], "'"));
    }
    o.intra_node = intra == 1;
    o.lengths = {length};
    out.push_back(std::move(o));
  }
  if (fields == 0) {
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
  std::string out = absl::StrCat(kProfileHeader, "\n");
  for (const TaskObservation& o : observations) {
    int64_t length = 0;
    for (int64_t s : o.lengths) length += s;
    absl::StrAppend(&out, length, ",", o.group_size, ",", o.recompute, ",",
                    o.intra_node ? 1 : 0, ",",
                    absl::StrFormat("%.9g", o.seconds), ",",
                    absl::StrFormat("%.0f", o.memory_bytes), ",", o.ulysses,
                    "\n");
  }
  return out;
}

}  // namespace dcp
