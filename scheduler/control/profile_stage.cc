#include "scheduler/control/profile_stage.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dcp {
namespace {

std::shared_ptr<const v1::PlanUpdate> RequestUpdate(
    const ProfileStageOptions& options) {
  auto update = std::make_shared<v1::PlanUpdate>();
  *update->mutable_profile() = ProfileStage::MakeRequest(options);
  return update;
}

}  // namespace

std::vector<int> ProfiledDegrees(int p, int heads) {
  const int most = std::gcd(p, heads);
  if (most < p) return {most};
  if (p == 1) return {1};
  int ring = p / 2;  // the largest degree below p: the shortest ring
  while (p % ring != 0) --ring;
  return {p, ring};
}

std::vector<int64_t> DefaultProfileLengths(int64_t window) {
  std::vector<int64_t> out;
  for (int64_t length = 256; length < window; length *= 4) {
    out.push_back(length);
  }
  out.push_back(std::max<int64_t>(window, 256));
  return out;
}

void CompleteProfileGrid(const CostModel& model, int64_t window,
                         ProfileStageOptions& options) {
  if (options.lengths.empty()) options.lengths = DefaultProfileLengths(window);
  options.max_tokens_per_gpu.clear();
  for (double r : options.recompute) {
    options.max_tokens_per_gpu.push_back(
        static_cast<int64_t>(std::floor(model.MaxTokensPerGpu(r))));
  }
  options.all_groups_up_to_length = kProfileAllGroupsUpToLength;
}

ProfileStage::ProfileStage(ProfileStageOptions options)
    : options_(std::move(options)),
      request_(RequestUpdate(options_)),
      pending_(options_.enabled),
      answered_(options_.world_size, false) {}

v1::ProfileRequest ProfileStage::MakeRequest(
    const ProfileStageOptions& options) {
  v1::ProfileRequest request;
  request.set_epoch(0);
  for (int64_t length : options.lengths) request.add_lengths(length);
  for (double r : options.recompute) request.add_recompute(r);
  request.set_repetitions(options.repetitions);
  for (int64_t cap : options.max_tokens_per_gpu) {
    request.add_max_tokens_per_gpu(cap);
  }
  request.set_all_groups_up_to_length(options.all_groups_up_to_length);
  const int world = options.world_size;
  const int node = options.gpus_per_node;
  std::vector<int> sizes;
  for (int p = 1; p <= std::min(world, node); ++p) {
    if (world % p == 0) sizes.push_back(p);
  }
  if (2 * node <= world && world % (2 * node) == 0) sizes.push_back(2 * node);
  int group_id = 1;
  for (int p : sizes) {
    for (int u : ProfiledDegrees(p, options.heads)) {
      request.add_group_sizes(p);
      request.add_ulysses(u);
    }
    if (p == 1) continue;
    for (int first = 0; first < world; first += p) {
      v1::CommGroup& group = *request.add_groups();
      group.set_id(group_id++);
      for (int r = first; r < first + p; ++r) group.add_ranks(r);
      group.set_rendezvous_prefix(
          absl::StrCat(options.session_id, "/e", request.epoch(), "/profile/g",
                       absl::StrJoin(group.ranks(), "-")));
    }
  }
  return request;
}

bool ProfileStage::pending() const {
  absl::MutexLock lock(&mu_);
  return pending_;
}

bool ProfileStage::ShouldAsk(int rank) const {
  absl::MutexLock lock(&mu_);
  return pending_ && !answered_[rank];
}

void ProfileStage::OnRegistration(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (pending_ && deadline_ == absl::InfiniteFuture()) {
    deadline_ = now + options_.timeout;
  }
}

bool ProfileStage::Answer(int rank) {
  absl::MutexLock lock(&mu_);
  if (!pending_ || ending_ || answered_[rank]) return false;
  answered_[rank] = true;
  return ++answers_ == options_.world_size;
}

std::optional<bool> ProfileStage::BeginEnd(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (!pending_ || ending_) return std::nullopt;
  const bool all_answered = answers_ == options_.world_size;
  if (!all_answered && now < deadline_) return std::nullopt;
  ending_ = true;
  return !all_answered;
}

ProfileDoneEvent ProfileStage::Outcome(bool timed_out,
                                       int64_t observations) const {
  ProfileDoneEvent done;
  done.timed_out = timed_out;
  done.observations = observations;
  absl::MutexLock lock(&mu_);
  for (int r = 0; r < options_.world_size; ++r) {
    (answered_[r] ? done.answered : done.missing).push_back(r);
  }
  return done;
}

void ProfileStage::End() {
  absl::MutexLock lock(&mu_);
  pending_ = false;
}

}  // namespace dcp
