#include "worker_agent/relay/plan_mux.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace dcp {

void PlanMux::Subscribe(PlanSink* sink, v1::StreamPlansRequest request,
                        absl::Time now) {
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->request.rank() != request.rank()) continue;
    PlanSink* older = it->sink;
    pending_.erase(it);
    calls_.erase(older);
    older->End(absl::AbortedError(absl::StrCat(
        "the plan stream of rank ", request.rank(),
        " was replaced by a newer one before it reached the scheduler")));
    break;
  }
  if (pending_.empty()) first_pending_ = now;
  calls_[sink] = 0;
  pending_.push_back(Pending{sink, std::move(request)});
}

std::optional<absl::Time> PlanMux::GatherDeadline() const {
  if (pending_.empty()) return std::nullopt;
  return first_pending_ + gather_window_;
}

std::optional<PlanMux::Upstream> PlanMux::TakeGathered(absl::Time now) {
  const std::optional<absl::Time> due = GatherDeadline();
  if (!due.has_value() || now < *due) return std::nullopt;
  Upstream call;
  call.id = next_id_++;
  Ranks& ranks = upstreams_[call.id];
  for (Pending& p : pending_) {
    ranks[p.request.rank()] = p.sink;
    calls_[p.sink] = call.id;
    *call.request.add_ranks() = std::move(p.request);
  }
  pending_.clear();
  return call;
}

void PlanMux::Deliver(int64_t id, const v1::NodePlanUpdate& update) {
  auto call = upstreams_.find(id);
  if (call == upstreams_.end()) return;
  Ranks& ranks = call->second;
  for (const v1::RankPlanUpdate& part : update.updates()) {
    auto rank = ranks.find(part.rank());
    // A rank whose agent went away, or one the call does not carry.
    if (rank == ranks.end()) continue;
    PlanSink* sink = rank->second;
    if (part.has_update()) {
      sink->Send(part.update());
      continue;
    }
    ranks.erase(rank);
    calls_.erase(sink);
    sink->End(absl::Status(static_cast<absl::StatusCode>(part.end().code()),
                           part.end().message()));
  }
  if (ranks.empty()) upstreams_.erase(call);
}

void PlanMux::EndUpstream(int64_t id, const absl::Status& status) {
  auto call = upstreams_.find(id);
  if (call == upstreams_.end()) return;
  Ranks ranks = std::move(call->second);
  upstreams_.erase(call);
  // The scheduler ends a call OK only after every part ended; a rank left
  // over means the call broke.
  const absl::Status end =
      status.ok() ? absl::UnavailableError(
                        "the scheduler's node plan stream ended before "
                        "this rank's part did")
                  : status;
  for (auto& [rank, sink] : ranks) {
    calls_.erase(sink);
    sink->End(end);
  }
}

std::optional<int64_t> PlanMux::Unsubscribe(PlanSink* sink) {
  auto where = calls_.find(sink);
  if (where == calls_.end()) return std::nullopt;
  const int64_t id = where->second;
  calls_.erase(where);
  if (id == 0) {
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if (it->sink == sink) {
        pending_.erase(it);
        break;
      }
    }
    return std::nullopt;
  }
  auto call = upstreams_.find(id);
  if (call == upstreams_.end()) return std::nullopt;
  for (auto it = call->second.begin(); it != call->second.end(); ++it) {
    if (it->second == sink) {
      call->second.erase(it);
      break;
    }
  }
  if (!call->second.empty()) return std::nullopt;
  upstreams_.erase(call);
  return id;
}

void PlanMux::EndAll(const absl::Status& status) {
  std::vector<PlanSink*> sinks;
  for (const auto& [sink, id] : calls_) sinks.push_back(sink);
  calls_.clear();
  pending_.clear();
  upstreams_.clear();
  for (PlanSink* sink : sinks) sink->End(status);
}

}  // namespace dcp
