#include "common/cluster_config.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_depth.h"
#include "nlohmann/json.hpp"

namespace dcp {
namespace {

/// What a field's value must be.
enum class Range {
  kPositive,     // > 0
  kNonNegative,  // >= 0
  kFraction,     // in (0, 1]
};

/// One floating-point field of a config.
struct DoubleField {
  const char* key;
  double ClusterSpec::*member;
  Range range;
};

constexpr DoubleField kDoubleFields[] = {
    {"peak_flops", &ClusterSpec::peak_flops, Range::kPositive},
    {"hbm_bytes", &ClusterSpec::hbm_bytes, Range::kPositive},
    {"usable_fraction", &ClusterSpec::usable_fraction, Range::kFraction},
    {"intra_node_bw", &ClusterSpec::intra_node_bw, Range::kPositive},
    {"intra_node_latency_s", &ClusterSpec::intra_node_latency_s,
     Range::kNonNegative},
    {"inter_node_bw", &ClusterSpec::inter_node_bw, Range::kPositive},
    {"inter_node_latency_s", &ClusterSpec::inter_node_latency_s,
     Range::kNonNegative},
    {"gemm_eff_max", &ClusterSpec::gemm_eff_max, Range::kFraction},
    {"gemm_eff_half_tokens", &ClusterSpec::gemm_eff_half_tokens,
     Range::kNonNegative},
    {"attn_eff_max", &ClusterSpec::attn_eff_max, Range::kFraction},
    {"attn_eff_half_tokens", &ClusterSpec::attn_eff_half_tokens,
     Range::kNonNegative},
    {"overhead_per_layer_s", &ClusterSpec::overhead_per_layer_s,
     Range::kNonNegative},
    {"grad_sync_bw", &ClusterSpec::grad_sync_bw, Range::kPositive},
};

constexpr char kGpusPerNode[] = "gpus_per_node";
constexpr char kRingOverlapsAttention[] = "ring_overlaps_attention";
constexpr int kMaxGpusPerNode = 1 << 16;

bool InRange(double v, Range range) {
  if (!std::isfinite(v)) return false;
  switch (range) {
    case Range::kPositive:
      return v > 0;
    case Range::kNonNegative:
      return v >= 0;
    case Range::kFraction:
      return v > 0 && v <= 1;
  }
  return false;
}

const char* RangeText(Range range) {
  switch (range) {
    case Range::kPositive:
      return "a positive finite number";
    case Range::kNonNegative:
      return "a non-negative finite number";
    case Range::kFraction:
      return "a number in (0, 1]";
  }
  return "";
}

// The figures of docs/CLUSTERS.md; the sources are cited there.
ClusterSpec H100Sxm() {
  ClusterSpec c;
  c.name = "h100-sxm";
  c.hbm_bytes = 80e9;
  // Same compute, 3.35 TB/s instead of 4.8 TB/s: the GEMM roofline's ridge
  // point, and with it the half-efficiency token count, moves up by 4.8/3.35.
  c.gemm_eff_half_tokens = 1100;
  return c;
}

ClusterSpec A100_80g() {
  ClusterSpec c;
  c.name = "a100-80g";
  c.peak_flops = 312e12;
  c.hbm_bytes = 80e9;
  c.intra_node_bw = 200e9;       // NVLink 3, 600 GB/s: 2/3 of the H200's
  c.inter_node_bw = 20e9;        // HDR 200 Gb/s a GPU at the H200's 80% of line
  c.gemm_eff_half_tokens = 570;  // ridge 312/2.039 against 989/4.8
  c.attn_eff_max = 0.6;          // FlashAttention-2 rather than -3
  c.grad_sync_bw = 20e9;
  return c;
}

std::vector<ClusterSpec> Builtins() {
  return {ClusterSpec::H200(), H100Sxm(), A100_80g()};
}

}  // namespace

absl::Status ValidateClusterSpec(const ClusterSpec& cluster) {
  for (const DoubleField& f : kDoubleFields) {
    const double v = cluster.*(f.member);
    if (!InRange(v, f.range)) {
      return absl::InvalidArgumentError(
          absl::StrCat("cluster '", cluster.name, "': field '", f.key,
                       "' must be ", RangeText(f.range), ", got ", v));
    }
  }
  if (cluster.gpus_per_node <= 0 || cluster.gpus_per_node > kMaxGpusPerNode) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster '", cluster.name, "': field '", kGpusPerNode,
                     "' must be an integer in [1, ", kMaxGpusPerNode, "], got ",
                     cluster.gpus_per_node));
  }
  return absl::OkStatus();
}

std::vector<std::string> BuiltinClusterNames() {
  std::vector<std::string> names;
  for (const ClusterSpec& c : Builtins()) names.push_back(c.name);
  return names;
}

absl::StatusOr<ClusterSpec> BuiltinCluster(absl::string_view name) {
  for (const ClusterSpec& c : Builtins()) {
    if (c.name == name) return c;
  }
  return absl::NotFoundError(
      absl::StrCat("unknown cluster '", name, "'; built-in clusters are ",
                   absl::StrJoin(BuiltinClusterNames(), ", "),
                   "; describe others with a JSON cluster config"));
}

namespace {

absl::Status Bad(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

absl::Status CheckKeys(const nlohmann::json& j, absl::string_view source) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    bool known =
        key == "name" || key == kGpusPerNode || key == kRingOverlapsAttention;
    for (const DoubleField& f : kDoubleFields) known = known || key == f.key;
    if (!known) {
      return Bad(source, absl::StrCat("unknown field '", key, "'"));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadFields(const nlohmann::json& j, absl::string_view source,
                        ClusterSpec& c) {
  for (const DoubleField& f : kDoubleFields) {
    if (!j.contains(f.key)) {
      return Bad(source, absl::StrCat("missing required field '", f.key, "'"));
    }
    const nlohmann::json& v = j[f.key];
    if (!v.is_number() || !InRange(v.get<double>(), f.range)) {
      return Bad(source, absl::StrCat("field '", f.key, "' must be ",
                                      RangeText(f.range), ", got ", v.dump()));
    }
    c.*(f.member) = v.get<double>();
  }
  if (!j.contains(kGpusPerNode)) {
    return Bad(source,
               absl::StrCat("missing required field '", kGpusPerNode, "'"));
  }
  const nlohmann::json& g = j[kGpusPerNode];
  if (!g.is_number_integer() || g.get<int64_t>() <= 0 ||
      g.get<int64_t>() > kMaxGpusPerNode) {
    return Bad(source, absl::StrCat("field '", kGpusPerNode,
                                    "' must be an integer in [1, ",
                                    kMaxGpusPerNode, "], got ", g.dump()));
  }
  c.gpus_per_node = g.get<int>();
  if (j.contains(kRingOverlapsAttention)) {
    const nlohmann::json& o = j[kRingOverlapsAttention];
    if (!o.is_boolean()) {
      return Bad(source,
                 absl::StrCat("field '", kRingOverlapsAttention,
                              "' must be true or false, got ", o.dump()));
    }
    c.ring_overlaps_attention = o.get<bool>();
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClusterSpec> ParseClusterConfig(absl::string_view json_text,
                                               absl::string_view source_name) {
  if (absl::Status depth = CheckJsonDepth(json_text); !depth.ok()) {
    return Bad(source_name,
               absl::StrCat("not a cluster config: ", depth.message()));
  }
  const nlohmann::json j = nlohmann::json::parse(
      json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Bad(source_name, "not a JSON object");
  }
  if (absl::Status s = CheckKeys(j, source_name); !s.ok()) return s;
  ClusterSpec c;
  c.name = std::string(source_name);
  if (j.contains("name")) {
    if (!j["name"].is_string() || j["name"].get<std::string>().empty()) {
      return Bad(source_name, "field 'name' must be a non-empty string");
    }
    c.name = j["name"].get<std::string>();
  }
  if (absl::Status s = ReadFields(j, source_name, c); !s.ok()) return s;
  return c;
}

absl::StatusOr<ClusterSpec> LoadClusterConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot open cluster config '", path, "'"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseClusterConfig(buffer.str(), path);
}

absl::StatusOr<ClusterSpec> ResolveClusterConfig(
    const std::string& name_or_path) {
  absl::StatusOr<ClusterSpec> builtin = BuiltinCluster(name_or_path);
  if (builtin.ok()) return builtin;
  absl::StatusOr<ClusterSpec> loaded = LoadClusterConfig(name_or_path);
  if (absl::IsNotFound(loaded.status())) {
    return absl::NotFoundError(absl::StrCat(
        "--cluster_config='", name_or_path, "' is neither a built-in (",
        absl::StrJoin(BuiltinClusterNames(), ", "), ") nor a readable file"));
  }
  return loaded;
}

std::string ClusterConfigJson(const ClusterSpec& cluster) {
  nlohmann::json j;
  j["name"] = cluster.name;
  for (const DoubleField& f : kDoubleFields) j[f.key] = cluster.*(f.member);
  j[kGpusPerNode] = cluster.gpus_per_node;
  j[kRingOverlapsAttention] = cluster.ring_overlaps_attention;
  return j.dump(2);
}

}  // namespace dcp
