#include "fuzz/control_plane_world.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/model_spec.h"

namespace dcp {
namespace fuzz {

namespace {

// 512 samples of 1..3000 tokens, the same for every input.
const std::vector<int32_t>& Lengths() {
  static const std::vector<int32_t>* const lengths = [] {
    auto* v = new std::vector<int32_t>();
    uint32_t x = 12345;
    for (int i = 0; i < 512; ++i) {
      x = x * 1103515245u + 12345u;
      v->push_back(1 + static_cast<int32_t>((x >> 8) % 3000));
    }
    return v;
  }();
  return *lengths;
}

ModelSpec TinyModel() {
  ModelSpec m;
  m.name = "fuzz-tiny";
  m.layers = 2;
  m.hidden = 256;
  m.heads = 4;
  m.kv_heads = 2;
  m.ffn = 512;
  m.vocab = 1000;
  return m;
}

}  // namespace

ControlPlaneOptions WorldOptions(const World& w, Clock* clock) {
  ControlPlaneOptions o;
  o.lengths = Lengths();
  o.window = 4096;
  o.model = TinyModel();
  o.cluster.gpus_per_node = kGpusPerNode;
  o.world_size = kWorld;
  o.tokens_per_step = 8192;
  o.seed = w.seed();
  o.lookahead_steps = 1 + static_cast<int>(w.lookahead_steps() % 3);
  o.max_steps = w.max_steps() % 8;
  o.refit_every = 1 + static_cast<int>(w.refit_every() % 8);
  o.observation_window = 64;
  o.profile_at_start = w.profile_at_start();
  o.profile_timeout = absl::Minutes(1);
  o.profile_lengths = {256, 1024};
  o.profile_recompute = {0.0, 1.0};
  o.profile_repetitions = 1;
  o.step_error_window = 8;
  o.sync_window = 8;
  o.store_max_key_bytes = 64;
  o.store_max_value_bytes = 256;
  o.store_max_keys = 16;
  o.store_max_total_bytes = 2048;
  o.session_id = kSession;
  o.start_planner_thread = false;
  o.clock = clock;
  return o;
}

bool Purged(const std::string& key, int64_t epoch) {
  const std::string prefix = absl::StrCat(kSession, "/e");
  if (!absl::StartsWith(key, prefix)) return false;
  absl::string_view rest = absl::string_view(key).substr(prefix.size());
  const size_t slash = rest.find('/');
  int64_t key_epoch = 0;
  return slash != absl::string_view::npos &&
         absl::SimpleAtoi(rest.substr(0, slash), &key_epoch) &&
         key_epoch < epoch;
}

int64_t Oracle::ExpectedCompleted() const {
  int64_t step = 0;
  for (auto it = accepted.find(0);
       it != accepted.end() && it->first == step &&
       static_cast<int>(it->second.size()) == kWorld;
       ++it) {
    ++step;
  }
  return step;
}

int64_t Oracle::ExpectedNextStep(int rank, int64_t completed,
                                 int64_t planned) const {
  for (int64_t step = completed; step < planned; ++step) {
    auto it = accepted.find(step);
    if (it == accepted.end() || it->second.count(rank) == 0) return step;
  }
  return planned;
}

int64_t Oracle::HighestReported(int rank) const {
  return std::max(reported_base[rank], reported_since[rank]);
}

}  // namespace fuzz
}  // namespace dcp
