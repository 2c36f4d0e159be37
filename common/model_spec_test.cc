#include "common/model_spec.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace dcp {
namespace {

TEST(ModelSpecTest, BuiltinParameterCountsFollowTheCostModel) {
  absl::StatusOr<ModelSpec> m = BuiltinModel("llama3-8b");
  ASSERT_TRUE(m.ok()) << m.status();
  const double d = 4096;
  const double pl = 2 * d * d + 2 * d * d * 8.0 / 32 + 3 * d * 14336;
  EXPECT_DOUBLE_EQ(m->ParamsPerLayer(), pl);
  EXPECT_DOUBLE_EQ(m->TotalParams(), pl * 32 + 128256 * d);
  EXPECT_EQ(m->AttentionFactor(), 0.5);

  absl::StatusOr<ModelSpec> dit = BuiltinModel("dit-video-1.3b");
  ASSERT_TRUE(dit.ok());
  EXPECT_FALSE(dit->causal);
  EXPECT_EQ(dit->AttentionFactor(), 1.0);
  EXPECT_EQ(dit->vocab, 0);
}

TEST(ModelSpecTest, UnknownBuiltinNamesTheKnownOnes) {
  absl::StatusOr<ModelSpec> m = BuiltinModel("gpt-5");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("llama3-70b"), std::string::npos);
}

TEST(ModelSpecTest, ParsesJsonConfig) {
  absl::StatusOr<ModelSpec> m = ParseModelConfig(
      R"({"name": "tiny", "layers": 2, "hidden": 64, "heads": 4,
          "ffn": 256, "vocab": 100, "causal": false})",
      "tiny.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->name, "tiny");
  EXPECT_EQ(m->kv_heads, 4);  // defaults to heads
  EXPECT_FALSE(m->causal);
}

TEST(ModelSpecTest, RejectsBadConfigsWithActionableMessages) {
  EXPECT_NE(ParseModelConfig("{", "a.json").status().message().find("a.json"),
            std::string::npos);
  absl::Status missing =
      ParseModelConfig(R"({"layers": 2, "hidden": 64, "heads": 4})", "b.json")
          .status();
  EXPECT_NE(missing.message().find("'ffn'"), std::string::npos);
  absl::Status bad_type =
      ParseModelConfig(
          R"({"layers": "two", "hidden": 64, "heads": 4, "ffn": 8})", "c.json")
          .status();
  EXPECT_NE(bad_type.message().find("'layers'"), std::string::npos);
  absl::Status bad_kv =
      ParseModelConfig(
          R"({"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 3, "ffn": 8})",
          "d.json")
          .status();
  EXPECT_NE(bad_kv.message().find("kv_heads"), std::string::npos);
}

// Found by //fuzz:model_config_fuzzer: quoting a value this deep in the
// error message overflowed the stack.
TEST(ModelSpecTest, RejectsDeeplyNestedConfigs) {
  const int depth = 100000;
  absl::Status deep =
      ParseModelConfig(absl::StrCat(R"({"layers": )", std::string(depth, '['),
                                    std::string(depth, ']'), "}"),
                       "deep.json")
          .status();
  EXPECT_EQ(deep.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(deep.message().find("deep.json: not a model config: nested more "
                                "than 512 levels deep"),
            std::string::npos)
      << deep;
}

}  // namespace
}  // namespace dcp
