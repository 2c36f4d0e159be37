#include "scheduler/control/job_journal.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/fnv1a.h"
#include "common/status_macros.h"

namespace dcp {

uint64_t LengthsDigest(const std::vector<int32_t>& lengths) {
  Fnv1a64 hash;
  for (int32_t length : lengths) {
    const uint32_t v = static_cast<uint32_t>(length);
    const char bytes[4] = {static_cast<char>(v), static_cast<char>(v >> 8),
                           static_cast<char>(v >> 16),
                           static_cast<char>(v >> 24)};
    hash.Update(absl::string_view(bytes, sizeof(bytes)));
  }
  return hash.digest();
}

std::string ModelText(const ModelSpec& m) {
  return absl::StrCat(m.name, " layers=", m.layers, " hidden=", m.hidden,
                      " heads=", m.heads, " kv_heads=", m.kv_heads,
                      " ffn=", m.ffn, " vocab=", m.vocab,
                      " causal=", m.causal ? 1 : 0);
}

state::CostModelState ModelState(const CostModel& model, int64_t refits) {
  const CostModel::Coefficients& c = model.coefficients();
  state::CostModelState out;
  out.set_lin(c.lin);
  out.set_gemm_half(c.gemm_half);
  out.set_attn(c.attn);
  out.set_attn_half(c.attn_half);
  out.set_a2a_byte_intra(c.a2a_byte_intra);
  out.set_a2a_fixed_intra(c.a2a_fixed_intra);
  out.set_a2a_byte_inter(c.a2a_byte_inter);
  out.set_a2a_fixed_inter(c.a2a_fixed_inter);
  out.set_ring_byte_intra(c.ring_byte_intra);
  out.set_ring_fixed_intra(c.ring_fixed_intra);
  out.set_ring_byte_inter(c.ring_byte_inter);
  out.set_ring_fixed_inter(c.ring_fixed_inter);
  out.set_fixed(c.fixed);
  out.set_grad_sync(c.grad_sync);
  out.set_mem_static(c.mem_static);
  out.set_mem_token(c.mem_token);
  out.set_mem_token_recompute(c.mem_token_recompute);
  out.set_mem_token_base(c.mem_token_base);
  out.set_ring_overlaps_attention(c.ring_overlaps_attention);
  out.set_refits(refits);
  return out;
}

CostModel ModelFromState(const state::CostModelState& stored,
                         const CostModel& like) {
  CostModel::Coefficients c;
  c.lin = stored.lin();
  c.gemm_half = stored.gemm_half();
  c.attn = stored.attn();
  c.attn_half = stored.attn_half();
  c.a2a_byte_intra = stored.a2a_byte_intra();
  c.a2a_fixed_intra = stored.a2a_fixed_intra();
  c.a2a_byte_inter = stored.a2a_byte_inter();
  c.a2a_fixed_inter = stored.a2a_fixed_inter();
  if (stored.ring_byte_intra() == 0 && stored.ring_fixed_intra() == 0 &&
      stored.ring_byte_inter() == 0 && stored.ring_fixed_inter() == 0) {
    const CostModel::Coefficients& prior = like.coefficients();
    c.ring_byte_intra = prior.ring_byte_intra;
    c.ring_fixed_intra = prior.ring_fixed_intra;
    c.ring_byte_inter = prior.ring_byte_inter;
    c.ring_fixed_inter = prior.ring_fixed_inter;
  } else {
    c.ring_byte_intra = stored.ring_byte_intra();
    c.ring_fixed_intra = stored.ring_fixed_intra();
    c.ring_byte_inter = stored.ring_byte_inter();
    c.ring_fixed_inter = stored.ring_fixed_inter();
  }
  c.fixed = stored.fixed();
  c.grad_sync = stored.grad_sync();
  c.mem_static = stored.mem_static();
  c.mem_token = stored.mem_token();
  c.mem_token_recompute = stored.mem_token_recompute();
  c.mem_token_base = stored.mem_token_base();
  c.ring_overlaps_attention = stored.has_ring_overlaps_attention()
                                  ? stored.ring_overlaps_attention()
                                  : like.coefficients().ring_overlaps_attention;
  return CostModel(c, like.model(), like.memory_cap(), like.gpus_per_node());
}

// ------------------------------------------------------------------ journal

absl::Status JobJournal::Write(const state::StateRecord& record,
                               absl::string_view what) const {
  if (store_ == nullptr) return absl::OkStatus();
  absl::Status written = store_->Write(record);
  if (written.ok()) return written;
  return absl::Status(
      written.code(),
      absl::StrCat("cannot make ", what, " durable: ", written.message()));
}

absl::Status JobJournal::WriteJob(const state::JobIdentity& job) const {
  state::StateRecord record;
  *record.mutable_job() = job;
  return Write(record, "the job");
}

absl::Status JobJournal::WritePlan(v1::StepPlan& plan) const {
  if (store_ == nullptr) return absl::OkStatus();
  state::StateRecord record;
  record.mutable_planned_step()->Swap(&plan);
  absl::Status kept = Write(
      record, absl::StrCat("the plan of step ", record.planned_step().step()));
  plan.Swap(record.mutable_planned_step());
  return kept;
}

absl::Status JobJournal::WriteReport(const v1::TimingReport& report) const {
  if (store_ == nullptr) return absl::OkStatus();
  state::StateRecord record;
  *record.mutable_report() = report;
  return Write(record, absl::StrCat("the report of rank ", report.rank(),
                                    " for step ", report.step()));
}

absl::Status JobJournal::WriteStoreSet(absl::string_view key,
                                       absl::string_view value) const {
  if (store_ == nullptr) return absl::OkStatus();
  state::StateRecord record;
  record.mutable_store_set()->set_key(std::string(key));
  record.mutable_store_set()->set_value(std::string(value));
  return Write(record, absl::StrCat("the store key '", key, "'"));
}

absl::Status JobJournal::WriteStorePurge(int64_t epoch) const {
  state::StateRecord record;
  record.set_store_purge_before(epoch);
  return Write(record, "a purge of the store");
}

absl::Status JobJournal::WriteModel(const CostModel& model,
                                    int64_t refits) const {
  state::StateRecord record;
  *record.mutable_model() = ModelState(model, refits);
  return Write(record, "the refitted cost model");
}

absl::Status JobJournal::WriteWorldChange(const EpochChange& change) const {
  if (store_ == nullptr) return absl::OkStatus();
  state::StateRecord record;
  state::WorldChange* world = record.mutable_world_change();
  world->set_epoch(change.epoch);
  world->mutable_members()->Add(change.members.begin(), change.members.end());
  world->set_abandoned_from(change.abandoned_from);
  world->set_abandoned_to(change.abandoned_to);
  for (const ReservedStep& step : change.reserve) {
    state::AbandonedStep* abandoned = world->add_reserve();
    abandoned->set_step(step.step);
    abandoned->mutable_samples()->Add(step.samples.begin(),
                                      step.samples.end());
  }
  return Write(record,
               absl::StrCat("epoch ", change.epoch, " (ranks [",
                            absl::StrJoin(change.members, ","), "])"));
}

// ------------------------------------------------------------------- resume

absl::Status ReplayStepBuilder(const DurableState& durable,
                               StepBuilder& builder) {
  // The kept steps that drew from the builder drew its last draws, in
  // order: every step after a kept one is kept too.
  std::vector<const v1::StepPlan*> drawn;
  for (const DurableState::Step& step : durable.steps) {
    if (step.reserve_of < 0) drawn.push_back(&step.plan);
  }
  const int64_t draws = durable.planned_steps() - durable.reserved_planned;
  const int64_t first_kept = draws - static_cast<int64_t>(drawn.size());
  for (int64_t draw = 0; draw < draws; ++draw) {
    ASSIGN_OR_RETURN(std::vector<int64_t> samples, builder.NextStep());
    if (draw < first_kept) continue;
    const v1::StepPlan& plan = *drawn[draw - first_kept];
    std::vector<int64_t> kept(plan.samples().begin(), plan.samples().end());
    std::sort(kept.begin(), kept.end());
    std::sort(samples.begin(), samples.end());
    if (kept != samples) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the kept plan of step ", plan.step(),
          " has other samples than the step builder draws for it: the "
          "state is not this job's (or another dcp version's)"));
    }
  }
  return absl::OkStatus();
}

RestoredWindow WindowStateOf(const DurableState& durable) {
  RestoredWindow window;
  window.epoch = durable.epoch;
  window.completed_steps = durable.completed_steps;
  window.members = durable.members;
  for (const DurableState::Step& step : durable.steps) {
    window.steps.push_back({step.plan, step.members, step.reserve_of});
  }
  for (const state::AbandonedStep& step : durable.reserve) {
    window.reserve.push_back(
        {step.step(), {step.samples().begin(), step.samples().end()}});
  }
  window.abandoned = durable.abandoned;
  window.reserved_planned = durable.reserved_planned;
  window.epoch_abandoned_from = durable.epoch_abandoned_from;
  return window;
}

}  // namespace dcp
