#ifndef DCP_COMMON_CLUSTER_CONFIG_H_
#define DCP_COMMON_CLUSTER_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_spec.h"

namespace dcp {

/// Cluster configs: the hardware figures of a `ClusterSpec` (the planner's
/// data-sheet prior), built in or read from JSON. A config names every field
/// of `ClusterSpec` except `name`, which defaults to the source:
///
///   {"name": "my-gpu", "peak_flops": 989e12, "hbm_bytes": 141e9,
///    "usable_fraction": 0.9, "gpus_per_node": 8,
///    "intra_node_bw": 300e9, "intra_node_latency_s": 15e-6,
///    "inter_node_bw": 40e9, "inter_node_latency_s": 30e-6,
///    "gemm_eff_max": 0.75, "gemm_eff_half_tokens": 768,
///    "attn_eff_max": 0.65, "attn_eff_half_tokens": 1024,
///    "overhead_per_layer_s": 30e-6, "grad_sync_bw": 40e9}
///
/// Every field is required (a config that silently inherited another GPU's
/// figures would hide the mismatch it is meant to state) and an unknown one
/// is an error (a misspelt field must not pass as a default). The one
/// exception is the boolean "ring_overlaps_attention", true for every GPU
/// and said false by a CPU host's config. The built-ins
/// and the sources of their figures are in docs/CLUSTERS.md.
///
///   absl::StatusOr<ClusterSpec> c = ResolveClusterConfig("a100-80g");

/// Checks that the figures make sense: rates, sizes and latencies positive
/// and finite (latencies and the overhead may be 0), the efficiencies in
/// (0, 1], the usable fraction in (0, 1], at least one GPU a node.
/// INVALID_ARGUMENT naming the field.
absl::Status ValidateClusterSpec(const ClusterSpec& cluster);

/// The built-in configs: "h200" (the reference cluster of
/// docs/COST_MODEL.md, equal to `ClusterSpec::H200()`), "h100-sxm",
/// "a100-80g". NOT_FOUND names the known ones.
absl::StatusOr<ClusterSpec> BuiltinCluster(absl::string_view name);

/// Names accepted by `BuiltinCluster`.
std::vector<std::string> BuiltinClusterNames();

/// Parses a cluster config (the JSON object documented above). Errors are
/// INVALID_ARGUMENT and name `source_name` and the field.
absl::StatusOr<ClusterSpec> ParseClusterConfig(absl::string_view json_text,
                                               absl::string_view source_name);

/// Reads and parses a cluster config file (NOT_FOUND when it cannot be
/// opened).
absl::StatusOr<ClusterSpec> LoadClusterConfig(const std::string& path);

/// A built-in name, or else the path of a config file.
absl::StatusOr<ClusterSpec> ResolveClusterConfig(
    const std::string& name_or_path);

/// The config JSON of `cluster` (what `ParseClusterConfig` reads back).
std::string ClusterConfigJson(const ClusterSpec& cluster);

}  // namespace dcp

#endif  // DCP_COMMON_CLUSTER_CONFIG_H_
