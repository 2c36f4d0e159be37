#ifndef DCP_COMMON_MODEL_SPEC_H_
#define DCP_COMMON_MODEL_SPEC_H_

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace dcp {

/// The shape of a transformer, as far as its cost and memory go.
///
/// Plain value type; thread-compatible. Built-in models come from
/// `BuiltinModel("llama3-8b")`; any other from a JSON file:
///
///   {"name": "my-7b", "layers": 32, "hidden": 4096, "heads": 32,
///    "kv_heads": 8, "ffn": 11008, "vocab": 32000, "causal": true}
struct ModelSpec {
  std::string name;
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;
  int ffn = 0;
  int vocab = 0;
  /// Causal (decoder) attention costs half of full (bidirectional) attention.
  bool causal = true;

  /// Parameters of one layer: 2d^2 + 2d^2*(kv/heads) + 3*d*ffn.
  double ParamsPerLayer() const;
  /// All parameters: per-layer parameters times layers plus the embedding.
  double TotalParams() const;
  /// 0.5 for causal attention, 1 for full attention.
  double AttentionFactor() const { return causal ? 0.5 : 1.0; }
};

/// Checks that every field is positive (vocab may be 0) and that heads is a
/// multiple of kv_heads.
absl::Status ValidateModelSpec(const ModelSpec& model);

/// The models of docs/COST_MODEL.md: "llama3-8b", "llama3-70b",
/// "dit-video-1.3b". NOT_FOUND names the known ones.
absl::StatusOr<ModelSpec> BuiltinModel(absl::string_view name);

/// Names accepted by BuiltinModel.
std::vector<std::string> BuiltinModelNames();

/// Parses a model description (the JSON object documented on ModelSpec).
absl::StatusOr<ModelSpec> ParseModelConfig(absl::string_view json_text,
                                           absl::string_view source_name);

/// Reads and parses a model description file.
absl::StatusOr<ModelSpec> LoadModelConfig(const std::string& path);

/// The hardware constants of the reference cluster (docs/COST_MODEL.md).
///
/// Plain value type. `H200()` gives the reference values; tests and the
/// planner's refittable model may vary them; `common/cluster_config.h`
/// reads others (built-ins and JSON files).
struct ClusterSpec {
  /// What the figures describe (a built-in name or a config's "name").
  std::string name = "h200";
  double peak_flops = 989e12;
  double hbm_bytes = 141e9;
  double usable_fraction = 0.9;
  int gpus_per_node = 8;
  double intra_node_bw = 300e9;
  double intra_node_latency_s = 15e-6;
  double inter_node_bw = 40e9;
  double inter_node_latency_s = 30e-6;
  double gemm_eff_max = 0.75;
  double gemm_eff_half_tokens = 768;
  double attn_eff_max = 0.65;
  double attn_eff_half_tokens = 1024;
  double overhead_per_layer_s = 30e-6;
  double grad_sync_bw = 40e9;
  /// Whether a ring's passes run beside its attention, so that a task waits
  /// for the longer of the two (docs/COST_MODEL.md; GPUs, where NCCL's
  /// transfers use their own engines and SMs), or after it, the two adding
  /// up: a CPU host, where one core computes and copies Gloo's messages
  /// too. Optional in a cluster config; true unless it says false.
  bool ring_overlaps_attention = true;

  /// Usable memory per GPU in bytes.
  double MemoryCap() const { return hbm_bytes * usable_fraction; }
  /// Node of a global rank.
  int NodeOf(int rank) const { return rank / gpus_per_node; }

  static ClusterSpec H200() { return ClusterSpec(); }
};

/// What a task waits for of its attention and its ring's passes: the
/// longer where the passes overlap attention
/// (`ClusterSpec::ring_overlaps_attention`), else both. The one definition
/// of the form for the planner's model and the reference cluster.
inline double AttentionWithRing(bool ring_overlaps_attention,
                                double attention_s, double ring_s) {
  return ring_overlaps_attention ? std::max(attention_s, ring_s)
                                 : attention_s + ring_s;
}

}  // namespace dcp

#endif  // DCP_COMMON_MODEL_SPEC_H_
