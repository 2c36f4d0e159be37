#include "scheduler/control/control_plane_options.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace dcp::control_plane_internal {

CostModel InitialModel(const ControlPlaneOptions& options) {
  if (options.cost_model.has_value()) return *options.cost_model;
  return CostModel::FromSpecs(options.cluster, options.model,
                              options.world_size);
}

absl::Status CheckOptions(const ControlPlaneOptions& o) {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("control plane options: ", what));
  };
  if (o.lengths.empty()) return bad("the length table is empty");
  if (o.rank_timeout < absl::ZeroDuration())
    return bad("rank_timeout must be >= 0");
  if (o.step_timeout < absl::ZeroDuration())
    return bad("step_timeout must be >= 0");
  if (o.window <= 0) return bad("window must be positive");
  if (o.world_size <= 0 || o.world_size > kMaxWorldSize) {
    return bad(absl::StrCat("world_size must be 1 to ", kMaxWorldSize));
  }
  if (o.tokens_per_step <= 0) return bad("tokens_per_step must be positive");
  if (o.lookahead_steps < 1) return bad("lookahead_steps must be at least 1");
  if (o.balance_steps < 0) return bad("balance_steps must be >= 0");
  if (o.max_steps < 0) return bad("max_steps must be >= 0 (0 = unlimited)");
  if (o.refit_every < 1) return bad("refit_every must be at least 1");
  if (!(o.refit_error >= 0) || !std::isfinite(o.refit_error)) {
    return bad("refit_error must be a finite number >= 0");
  }
  if (o.observation_window < 1) {
    return bad("observation_window must be at least 1");
  }
  if (!(o.prior_weight > 0) || !std::isfinite(o.prior_weight)) {
    return bad("prior_weight must be positive and finite");
  }
  if (o.step_error_window < 1) return bad("step_error_window must be >= 1");
  if (o.sync_window < 1) return bad("sync_window must be at least 1");
  if (!(o.max_task_seconds > 0)) return bad("max_task_seconds must be > 0");
  if (o.store_max_key_bytes <= 0 || o.store_max_value_bytes <= 0 ||
      o.store_max_keys <= 0 || o.store_max_total_bytes <= 0) {
    return bad("store limits must be positive");
  }
  if (o.max_message_bytes <= 0) return bad("max_message_bytes must be > 0");
  if (o.cluster.gpus_per_node <= 0) return bad("gpus_per_node must be > 0");
  if (o.profile_at_start) {
    if (o.profile_timeout <= absl::ZeroDuration()) {
      return bad("profile_timeout must be positive");
    }
    if (o.profile_recompute.empty()) {
      return bad("profile_recompute must not be empty");
    }
    for (int64_t length : o.profile_lengths) {
      if (length <= 0) return bad("profile_lengths must be positive");
    }
    for (double r : o.profile_recompute) {
      if (!(r >= 0 && r <= 1))
        return bad("profile_recompute must be in [0, 1]");
    }
    if (o.profile_repetitions < 1) {
      return bad("profile_repetitions must be at least 1");
    }
  }
  if (absl::StrContains(o.session_id, '/')) {
    return bad(
        absl::StrCat("session_id '", o.session_id, "' must not contain '/'"));
  }
  return ValidateModelSpec(o.model);
}

ReportLedgerOptions LedgerOptions(const ControlPlaneOptions& o) {
  return {InitialModel(o),      o.observation_window, o.refit_every,
          o.step_error_window,  o.sync_window,        o.refit_error};
}

ProfileStageOptions ProfileOptions(const ControlPlaneOptions& o,
                                   const std::string& session_id) {
  ProfileStageOptions profile{
      o.profile_at_start, o.profile_timeout,       session_id,
      o.world_size,       o.cluster.gpus_per_node, o.model.heads,
      o.profile_lengths,  o.profile_recompute,     o.profile_repetitions};
  CompleteProfileGrid(InitialModel(o), o.window, profile);
  return profile;
}

StepWindowOptions WindowOptions(const ControlPlaneOptions& o,
                                const std::string& session_id, Clock* clock) {
  StepWindowOptions window{
      session_id,   o.world_size,        o.cluster.gpus_per_node,
      o.model.name, o.max_message_bytes, o.lookahead_steps,
      o.max_steps,  o.max_task_seconds,  clock};
  window.rank_timeout = o.rank_timeout;
  window.step_timeout = o.step_timeout;
  window.on_rank_failure = o.on_rank_failure;
  return window;
}

KvStoreOptions StoreOptions(const ControlPlaneOptions& o,
                            const std::string& session_id) {
  return {session_id, o.store_max_key_bytes, o.store_max_value_bytes,
          o.store_max_keys, o.store_max_total_bytes};
}

absl::Duration LivenessPoll(absl::Duration rank_timeout,
                            absl::Duration step_timeout) {
  absl::Duration shortest = absl::InfiniteDuration();
  for (absl::Duration t : {rank_timeout, step_timeout}) {
    if (t > absl::ZeroDuration()) shortest = std::min(shortest, t);
  }
  return std::clamp(shortest / 10, absl::Milliseconds(10), absl::Seconds(1));
}

}  // namespace dcp::control_plane_internal
