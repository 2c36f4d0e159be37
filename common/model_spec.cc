#include "common/model_spec.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_depth.h"
#include "nlohmann/json.hpp"

namespace dcp {

double ModelSpec::ParamsPerLayer() const {
  const double d = hidden;
  return 2.0 * d * d + 2.0 * d * d * (static_cast<double>(kv_heads) / heads) +
         3.0 * d * ffn;
}

double ModelSpec::TotalParams() const {
  return ParamsPerLayer() * layers + static_cast<double>(vocab) * hidden;
}

absl::Status ValidateModelSpec(const ModelSpec& m) {
  if (m.layers <= 0 || m.hidden <= 0 || m.heads <= 0 || m.kv_heads <= 0 ||
      m.ffn <= 0 || m.vocab < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", m.name,
        "': layers, hidden, heads, kv_heads and ffn must be positive and "
        "vocab non-negative"));
  }
  if (m.heads % m.kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", m.name, "': heads (", m.heads,
                     ") must be a multiple of kv_heads (", m.kv_heads, ")"));
  }
  return absl::OkStatus();
}

namespace {

ModelSpec Make(const char* name, int layers, int hidden, int heads,
               int kv_heads, int ffn, int vocab, bool causal) {
  ModelSpec m;
  m.name = name;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.ffn = ffn;
  m.vocab = vocab;
  m.causal = causal;
  return m;
}

std::vector<ModelSpec> Builtins() {
  return {
      Make("llama3-8b", 32, 4096, 32, 8, 14336, 128256, true),
      Make("llama3-70b", 80, 8192, 64, 8, 28672, 128256, true),
      Make("dit-video-1.3b", 30, 1536, 12, 12, 8960, 0, false),
  };
}

}  // namespace

std::vector<std::string> BuiltinModelNames() {
  std::vector<std::string> names;
  for (const ModelSpec& m : Builtins()) names.push_back(m.name);
  return names;
}

absl::StatusOr<ModelSpec> BuiltinModel(absl::string_view name) {
  for (const ModelSpec& m : Builtins()) {
    if (m.name == name) return m;
  }
  return absl::NotFoundError(
      absl::StrCat("unknown model '", name, "'; built-in models are ",
                   absl::StrJoin(BuiltinModelNames(), ", "),
                   "; describe others with a JSON model config"));
}

absl::StatusOr<ModelSpec> ParseModelConfig(absl::string_view json_text,
                                           absl::string_view source_name) {
  if (absl::Status depth = CheckJsonDepth(json_text); !depth.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": not a model config: ", depth.message()));
  }
  nlohmann::json j = nlohmann::json::parse(json_text.begin(), json_text.end(),
                                           nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": not a JSON object"));
  }
  ModelSpec m;
  m.name = std::string(source_name);
  if (j.contains("name")) {
    if (!j["name"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_name, ": field 'name' must be a string"));
    }
    m.name = j["name"].get<std::string>();
  }
  struct IntField {
    const char* key;
    int* dst;
    bool required;
  };
  IntField fields[] = {
      {"layers", &m.layers, true}, {"hidden", &m.hidden, true},
      {"heads", &m.heads, true},   {"kv_heads", &m.kv_heads, false},
      {"ffn", &m.ffn, true},       {"vocab", &m.vocab, false}};
  for (const IntField& f : fields) {
    if (!j.contains(f.key)) {
      if (f.required) {
        return absl::InvalidArgumentError(absl::StrCat(
            source_name, ": missing required field '", f.key, "'"));
      }
      continue;
    }
    const nlohmann::json& v = j[f.key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
        v.get<int64_t>() > (int64_t{1} << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_name, ": field '", f.key,
                       "' must be a non-negative integer, got ", v.dump()));
    }
    *f.dst = v.get<int>();
  }
  if (!j.contains("kv_heads")) m.kv_heads = m.heads;
  if (j.contains("causal")) {
    if (!j["causal"].is_boolean()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_name, ": field 'causal' must be true or false"));
    }
    m.causal = j["causal"].get<bool>();
  }
  absl::Status s = ValidateModelSpec(m);
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": ", s.message()));
  }
  return m;
}

absl::StatusOr<ModelSpec> LoadModelConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot open model config '", path, "'"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseModelConfig(buffer.str(), path);
}

}  // namespace dcp
