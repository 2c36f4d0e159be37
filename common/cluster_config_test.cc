#include "common/cluster_config.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace dcp {
namespace {

// The floating-point fields of a config; `gpus_per_node` is the integer one.
const char* const kDoubleKeys[] = {
    "peak_flops",           "hbm_bytes",
    "usable_fraction",      "intra_node_bw",
    "intra_node_latency_s", "inter_node_bw",
    "inter_node_latency_s", "gemm_eff_max",
    "gemm_eff_half_tokens", "attn_eff_max",
    "attn_eff_half_tokens", "overhead_per_layer_s",
    "grad_sync_bw"};

nlohmann::json H200Json() {
  return nlohmann::json::parse(ClusterConfigJson(ClusterSpec::H200()));
}

void ExpectSameFigures(const ClusterSpec& a, const ClusterSpec& b) {
  EXPECT_EQ(a.peak_flops, b.peak_flops);
  EXPECT_EQ(a.hbm_bytes, b.hbm_bytes);
  EXPECT_EQ(a.usable_fraction, b.usable_fraction);
  EXPECT_EQ(a.gpus_per_node, b.gpus_per_node);
  EXPECT_EQ(a.intra_node_bw, b.intra_node_bw);
  EXPECT_EQ(a.intra_node_latency_s, b.intra_node_latency_s);
  EXPECT_EQ(a.inter_node_bw, b.inter_node_bw);
  EXPECT_EQ(a.inter_node_latency_s, b.inter_node_latency_s);
  EXPECT_EQ(a.gemm_eff_max, b.gemm_eff_max);
  EXPECT_EQ(a.gemm_eff_half_tokens, b.gemm_eff_half_tokens);
  EXPECT_EQ(a.attn_eff_max, b.attn_eff_max);
  EXPECT_EQ(a.attn_eff_half_tokens, b.attn_eff_half_tokens);
  EXPECT_EQ(a.overhead_per_layer_s, b.overhead_per_layer_s);
  EXPECT_EQ(a.grad_sync_bw, b.grad_sync_bw);
  EXPECT_EQ(a.ring_overlaps_attention, b.ring_overlaps_attention);
}

TEST(ClusterConfigTest, H200BuiltinIsTheReferenceCluster) {
  absl::StatusOr<ClusterSpec> c = BuiltinCluster("h200");
  ASSERT_TRUE(c.ok()) << c.status();
  ExpectSameFigures(*c, ClusterSpec::H200());
  EXPECT_EQ(c->name, "h200");
}

TEST(ClusterConfigTest, EveryBuiltinIsValidAndRoundTripsThroughJson) {
  ASSERT_EQ(BuiltinClusterNames().size(), 3u);
  for (const std::string& name : BuiltinClusterNames()) {
    SCOPED_TRACE(name);
    absl::StatusOr<ClusterSpec> c = ResolveClusterConfig(name);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->name, name);
    EXPECT_TRUE(ValidateClusterSpec(*c).ok());
    absl::StatusOr<ClusterSpec> back =
        ParseClusterConfig(ClusterConfigJson(*c), "back.json");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->name, name);
    ExpectSameFigures(*back, *c);
  }
}

TEST(ClusterConfigTest, BuiltinsDifferWhereTheirDataSheetsDo) {
  const ClusterSpec h200 = *BuiltinCluster("h200");
  const ClusterSpec h100 = *BuiltinCluster("h100-sxm");
  const ClusterSpec a100 = *BuiltinCluster("a100-80g");
  EXPECT_EQ(h100.peak_flops, h200.peak_flops);
  EXPECT_LT(h100.hbm_bytes, h200.hbm_bytes);
  EXPECT_LT(a100.peak_flops, h100.peak_flops);
  EXPECT_LT(a100.intra_node_bw, h100.intra_node_bw);
  EXPECT_LT(a100.inter_node_bw, h100.inter_node_bw);
}

// The one optional field: absent, a GPU's overlap; false round-trips; any
// value but a boolean is an error naming the field, and the config is not
// taken.
TEST(ClusterConfigTest, RingOverlapIsOptionalAndBoolean) {
  nlohmann::json j = H200Json();
  ASSERT_TRUE(j.contains("ring_overlaps_attention"));
  j.erase("ring_overlaps_attention");
  absl::StatusOr<ClusterSpec> absent = ParseClusterConfig(j.dump(), "a.json");
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_TRUE(absent->ring_overlaps_attention);

  j["ring_overlaps_attention"] = false;
  absl::StatusOr<ClusterSpec> host = ParseClusterConfig(j.dump(), "host.json");
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_FALSE(host->ring_overlaps_attention);
  absl::StatusOr<ClusterSpec> back =
      ParseClusterConfig(ClusterConfigJson(*host), "back.json");
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameFigures(*back, *host);

  for (const nlohmann::json& bad :
       {nlohmann::json(0), nlohmann::json("false"), nlohmann::json(nullptr)}) {
    j["ring_overlaps_attention"] = bad;
    absl::StatusOr<ClusterSpec> c = ParseClusterConfig(j.dump(), "bad.json");
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find("ring_overlaps_attention"),
              std::string::npos)
        << c.status();
  }
}

TEST(ClusterConfigTest, UnknownNameListsTheBuiltins) {
  absl::StatusOr<ClusterSpec> c = BuiltinCluster("b200");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("a100-80g"), std::string::npos);
  absl::StatusOr<ClusterSpec> r = ResolveClusterConfig("/no/such/file.json");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("h100-sxm"), std::string::npos);
}

TEST(ClusterConfigTest, NameDefaultsToTheSource) {
  nlohmann::json j = H200Json();
  j.erase("name");
  absl::StatusOr<ClusterSpec> c = ParseClusterConfig(j.dump(), "mine.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "mine.json");
}

// Each field, missing, of the wrong type or out of range, is an
// INVALID_ARGUMENT that names it.
TEST(ClusterConfigTest, EachFieldsErrorNamesIt) {
  std::vector<std::string> keys(std::begin(kDoubleKeys), std::end(kDoubleKeys));
  keys.push_back("gpus_per_node");
  for (const std::string& key : keys) {
    SCOPED_TRACE(key);
    const bool fraction = key == "usable_fraction" || key == "gemm_eff_max" ||
                          key == "attn_eff_max";
    std::vector<nlohmann::json> bad_values = {"1", -1.0, nullptr};
    if (fraction) bad_values.push_back(1.5);
    if (key == "gpus_per_node") bad_values.push_back(8.5);
    for (const nlohmann::json& bad : bad_values) {
      nlohmann::json j = H200Json();
      j[key] = bad;
      absl::StatusOr<ClusterSpec> c = ParseClusterConfig(j.dump(), "c.json");
      EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument)
          << bad.dump();
      EXPECT_NE(c.status().message().find(absl::StrCat("'", key, "'")),
                std::string::npos)
          << c.status();
      EXPECT_NE(c.status().message().find("c.json"), std::string::npos);
    }
    nlohmann::json missing = H200Json();
    missing.erase(key);
    absl::StatusOr<ClusterSpec> c =
        ParseClusterConfig(missing.dump(), "c.json");
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find(
                  absl::StrCat("missing required field '", key, "'")),
              std::string::npos)
        << c.status();
  }
}

TEST(ClusterConfigTest, RejectsUnknownFieldsBadNamesAndNonObjects) {
  nlohmann::json typo = H200Json();
  typo["peak_flop"] = 1e15;
  absl::StatusOr<ClusterSpec> c = ParseClusterConfig(typo.dump(), "c.json");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("unknown field 'peak_flop'"),
            std::string::npos);
  nlohmann::json name = H200Json();
  name["name"] = 3;
  EXPECT_EQ(ParseClusterConfig(name.dump(), "c.json").status().code(),
            absl::StatusCode::kInvalidArgument);
  for (const char* text : {"[]", "{", "", "3", "null"}) {
    EXPECT_EQ(ParseClusterConfig(text, "c.json").status().code(),
              absl::StatusCode::kInvalidArgument)
        << text;
  }
}

TEST(ClusterConfigTest, ValidateNamesTheField) {
  ClusterSpec c = ClusterSpec::H200();
  c.attn_eff_max = 0;
  absl::Status s = ValidateClusterSpec(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'attn_eff_max'"), std::string::npos);
  c = ClusterSpec::H200();
  c.gpus_per_node = 0;
  EXPECT_NE(ValidateClusterSpec(c).message().find("'gpus_per_node'"),
            std::string::npos);
}

TEST(ClusterConfigTest, ResolvesAPathToAFile) {
  const char* dir = std::getenv("TEST_TMPDIR");
  ASSERT_NE(dir, nullptr);
  const std::string path = absl::StrCat(dir, "/gpu.json");
  nlohmann::json j = H200Json();
  j["name"] = "half-h200";
  j["peak_flops"] = 989e12 / 2;
  std::ofstream(path) << j.dump();
  absl::StatusOr<ClusterSpec> c = ResolveClusterConfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "half-h200");
  EXPECT_EQ(c->peak_flops, 989e12 / 2);
}

}  // namespace
}  // namespace dcp
