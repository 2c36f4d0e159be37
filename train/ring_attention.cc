#include "train/ring_attention.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dcp::train {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Tag bases: pass s of each kind uses base + s, so no two passes of one call
// (forward K/V, backward K/V, backward dK/dV) share a tag.
constexpr int kForwardKvTag = 1 << 20;
constexpr int kBackwardKvTag = 2 << 20;
constexpr int kBackwardGradTag = 3 << 20;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The part of one block's attention that one sample makes: its local
// queries (`queries`, shard indices) against its keys in the block
// (`keys`), and which of those pairs may attend (`allowed`, [nq, nk]).
// Attention never crosses samples, so a block is the sum of its tiles: a
// pack of n samples costs the sum of their squares, not its own square.
struct Tile {
  at::Tensor queries;  // int64 [nq]
  at::Tensor keys;     // int64 [nk]
  at::Tensor allowed;  // bool [nq, nk]
};

// What the forward and backward passes of one call share.
struct RingPlan : torch::CustomClassHolder {
  c10::intrusive_ptr<c10d::ProcessGroup> group;  // Null for a ring of one.
  int size = 1;
  int rank = 0;
  double scale = 1.0;
  // [c]: the tiles of this rank's queries against ring position r's keys;
  // empty where no key of that block may be read.
  std::vector<std::vector<Tile>> tiles;
};

// The tiles of `mask`'s ring position `rank` against position `source`.
std::vector<Tile> MakeTiles(const RingMask& mask, int rank, int source) {
  const std::vector<int64_t>& q_samples = mask.samples[rank];
  const std::vector<int64_t>& k_samples = mask.samples[source];
  std::map<int64_t, std::pair<std::vector<int64_t>, std::vector<int64_t>>>
      by_sample;
  for (size_t i = 0; i < q_samples.size(); ++i) {
    if (q_samples[i] >= 0) by_sample[q_samples[i]].first.push_back(i);
  }
  for (size_t j = 0; j < k_samples.size(); ++j) {
    auto it = by_sample.find(k_samples[j]);
    if (it != by_sample.end()) it->second.second.push_back(j);
  }
  std::vector<Tile> tiles;
  for (const auto& [sample, indices] : by_sample) {
    const auto& [queries, keys] = indices;
    if (keys.empty()) continue;
    Tile tile;
    tile.queries = at::tensor(queries, at::kLong);
    tile.keys = at::tensor(keys, at::kLong);
    if (mask.causal) {
      // Positions read from the mask's own vectors: each tile gathers just
      // its tokens'.
      std::vector<int64_t> q_pos, k_pos;
      for (int64_t i : queries) q_pos.push_back(mask.positions[rank][i]);
      for (int64_t j : keys) k_pos.push_back(mask.positions[source][j]);
      // Some pair may attend when the earliest key is at or before the
      // latest query.
      if (*std::min_element(k_pos.begin(), k_pos.end()) >
          *std::max_element(q_pos.begin(), q_pos.end())) {
        continue;
      }
      tile.allowed = at::tensor(k_pos, at::kLong)
                         .unsqueeze(0)
                         .le(at::tensor(q_pos, at::kLong).unsqueeze(1));
    } else {
      tile.allowed = at::ones({static_cast<int64_t>(queries.size()),
                               static_cast<int64_t>(keys.size())},
                              at::kBool);
    }
    tiles.push_back(std::move(tile));
  }
  return tiles;
}

// One ring pass: `send` to ring rank j + 1 while receiving the same shape
// from j - 1. The buffers live here until Finish.
class Pass {
 public:
  Pass(const RingPlan& plan, const at::Tensor& send, int tag)
      : send_{send.contiguous()}, recv_{at::empty_like(send_[0])} {
    const int c = plan.size, j = plan.rank;
    send_work_ = plan.group->send(send_, (j + 1) % c, tag);
    recv_work_ = plan.group->recv(recv_, (j + c - 1) % c, tag);
  }
  at::Tensor Finish() {
    send_work_->wait();
    recv_work_->wait();
    return recv_[0];
  }

 private:
  std::vector<at::Tensor> send_, recv_;
  c10::intrusive_ptr<c10d::Work> send_work_, recv_work_;
};

// -inf (a row with no key yet) as 0, so that exp(x - Safe(m)) is 0, not NaN.
at::Tensor Safe(const at::Tensor& lse) {
  return at::where(lse.isneginf(), at::zeros_like(lse), lse);
}

// [S, e, d] -> [h, S, d], each kv head repeated for its `group` query heads.
at::Tensor ToHeads(const at::Tensor& x, int64_t group) {
  at::Tensor t = x.transpose(0, 1);
  return group > 1 ? t.repeat_interleave(group, 0) : t;
}

// The gradient of ToHeads: [h, S, d] -> [S, e, d].
at::Tensor FromHeads(const at::Tensor& x, int64_t kv_heads) {
  return x.reshape({kv_heads, x.size(0) / kv_heads, x.size(1), x.size(2)})
      .sum(1)
      .transpose(0, 1);
}

// Masked scores of local queries qh [h, S, d] against one block's keys.
at::Tensor Scores(const at::Tensor& qh, const at::Tensor& kh,
                  const at::Tensor& allowed, double scale) {
  return (at::matmul(qh, kh.transpose(1, 2)) * scale)
      .masked_fill(allowed.logical_not(), kNegInf);
}

struct RingFunction : torch::autograd::Function<RingFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v,
                            c10::intrusive_ptr<RingPlan> plan) {
    const int c = plan->size;
    const int64_t group = q.size(1) / k.size(1);
    at::Tensor qh = q.transpose(0, 1);  // [h, S, d]
    at::Tensor out = at::zeros_like(qh);
    at::Tensor lse = at::full({qh.size(0), qh.size(1)}, kNegInf, q.options());
    at::Tensor kv = at::stack({k, v});  // [2, S, e, d]
    for (int s = 0; s < c; ++s) {
      const int source = (plan->rank - s + c) % c;
      std::optional<Pass> next;
      if (s + 1 < c) next.emplace(*plan, kv, kForwardKvTag + s);
      const std::vector<Tile>& tiles = plan->tiles[source];
      if (!tiles.empty()) {
        // The block's log-sum-exp and output, tile by tile; rows no tile
        // reaches stay -inf and 0.
        at::Tensor block_lse = at::full_like(lse, kNegInf);  // [h, S]
        at::Tensor block_out = at::zeros_like(qh);            // [h, S, d]
        const at::Tensor kh = ToHeads(kv[0], group), vh = ToHeads(kv[1], group);
        for (const Tile& tile : tiles) {
          at::Tensor scores =
              Scores(qh.index_select(1, tile.queries),
                     kh.index_select(1, tile.keys), tile.allowed, plan->scale);
          at::Tensor tile_lse = at::logsumexp(scores, -1);  // [h, nq]
          block_lse.index_copy_(1, tile.queries, tile_lse);
          block_out.index_copy_(
              1, tile.queries,
              at::matmul(at::exp(scores - Safe(tile_lse).unsqueeze(-1)),
                         vh.index_select(1, tile.keys)));
        }
        // lse' = log(e^lse + e^block_lse), -inf while both are.
        at::Tensor top = Safe(at::maximum(lse, block_lse));
        at::Tensor merged =
            top + at::log(at::exp(lse - top) + at::exp(block_lse - top));
        at::Tensor safe = Safe(merged);
        out = out * at::exp(lse - safe).unsqueeze(-1) +
              block_out * at::exp(block_lse - safe).unsqueeze(-1);
        lse = merged;
      }
      if (next) kv = next->Finish();
    }
    at::Tensor result = out.transpose(0, 1).contiguous();  // [S, h, d]
    ctx->save_for_backward({q, k, v, result, lse});
    ctx->saved_data["plan"] = c10::IValue::make_capsule(std::move(plan));
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2];
    const at::Tensor &out = saved[3], &lse = saved[4];
    auto plan = c10::intrusive_ptr<RingPlan>::reclaim_copy(
        static_cast<RingPlan*>(ctx->saved_data["plan"].toCapsule().get()));
    const int c = plan->size;
    const int64_t kv_heads = k.size(1), group = q.size(1) / kv_heads;
    at::Tensor qh = q.transpose(0, 1);
    at::Tensor doh = grads[0].transpose(0, 1);  // [h, S, d]
    // D_i = sum_j P_ij dP_ij = dO_i . O_i.
    at::Tensor delta = (doh * out.transpose(0, 1)).sum(-1, /*keepdim=*/true);
    at::Tensor lse_safe = Safe(lse).unsqueeze(-1);
    at::Tensor dq = at::zeros_like(qh);
    at::Tensor kv = at::stack({k, v});
    // The dK/dV accumulator of the block held travels with it: pass s sends
    // it on while the next block's share is computed, and after c passes
    // each accumulator is home again.
    std::optional<Pass> grads_in_flight;
    at::Tensor dkv;
    for (int s = 0; s < c; ++s) {
      const int source = (plan->rank - s + c) % c;
      std::optional<Pass> next;
      if (s + 1 < c) next.emplace(*plan, kv, kBackwardKvTag + s);
      const std::vector<Tile>& tiles = plan->tiles[source];
      at::Tensor share;  // This rank's queries' dK/dV of the block.
      if (!tiles.empty()) {
        const at::Tensor kh = ToHeads(kv[0], group), vh = ToHeads(kv[1], group);
        at::Tensor dkh = at::zeros_like(kh), dvh = at::zeros_like(vh);
        for (const Tile& tile : tiles) {
          const at::Tensor qt = qh.index_select(1, tile.queries);
          const at::Tensor dot = doh.index_select(1, tile.queries);
          const at::Tensor kt = kh.index_select(1, tile.keys);
          const at::Tensor vt = vh.index_select(1, tile.keys);
          at::Tensor probs =
              at::exp(Scores(qt, kt, tile.allowed, plan->scale) -
                      lse_safe.index_select(1, tile.queries));
          dvh.index_add_(1, tile.keys, at::matmul(probs.transpose(1, 2), dot));
          at::Tensor dscores =
              probs * (at::matmul(dot, vt.transpose(1, 2)) -
                       delta.index_select(1, tile.queries));
          dq.index_add_(1, tile.queries,
                        at::matmul(dscores, kt) * plan->scale);
          dkh.index_add_(1, tile.keys,
                         at::matmul(dscores.transpose(1, 2), qt) * plan->scale);
        }
        share = at::stack({FromHeads(dkh, kv_heads), FromHeads(dvh, kv_heads)});
      }
      at::Tensor accumulated =
          s == 0 ? at::zeros_like(kv) : grads_in_flight->Finish();
      if (share.defined()) accumulated = accumulated + share;
      if (c > 1) {
        grads_in_flight.emplace(*plan, accumulated, kBackwardGradTag + s);
      } else {
        dkv = accumulated;
      }
      if (next) kv = next->Finish();
    }
    if (c > 1) dkv = grads_in_flight->Finish();
    return {dq.transpose(0, 1), dkv[0], dkv[1], at::Tensor()};
  }
};

absl::Status CheckInputs(const at::Tensor& q, const at::Tensor& k,
                         const at::Tensor& v, const RingMask& mask, int c) {
  for (const at::Tensor* t : {&q, &k, &v}) {
    if (!t->defined() || t->dim() != 3) {
      return absl::InvalidArgumentError(
          "ring attention: q, k and v must be 3-d [tokens, heads, dim]");
    }
  }
  if (k.sizes() != v.sizes() || q.size(0) != k.size(0) ||
      q.size(2) != k.size(2) || k.size(1) == 0 || q.size(1) % k.size(1) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ring attention: q ", c10::str(q.sizes()), ", k ", c10::str(k.sizes()),
        ", v ", c10::str(v.sizes()),
        " must share tokens and head dim, with kv heads dividing q heads"));
  }
  if (static_cast<int>(mask.positions.size()) != c ||
      static_cast<int>(mask.samples.size()) != c) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ring attention: the mask describes ", mask.positions.size(), " and ",
        mask.samples.size(), " ring positions, the ring has ", c));
  }
  for (int r = 0; r < c; ++r) {
    if (static_cast<int64_t>(mask.positions[r].size()) != q.size(0) ||
        static_cast<int64_t>(mask.samples[r].size()) != q.size(0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ring attention: ring position ", r, " has ",
          mask.positions[r].size(), " positions and ", mask.samples[r].size(),
          " samples, not one per token (", q.size(0), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<at::Tensor> RingAttention(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const RingMask& mask, const c10::intrusive_ptr<c10d::ProcessGroup>& ring) {
  const int c = ring ? ring->getSize() : 1;
  const int rank = ring ? ring->getRank() : 0;
  if (absl::Status s = CheckInputs(q, k, v, mask, c); !s.ok()) return s;
  try {
    auto plan = c10::make_intrusive<RingPlan>();
    plan->group = c > 1 ? ring : c10::intrusive_ptr<c10d::ProcessGroup>();
    plan->size = c;
    plan->rank = rank;
    plan->scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
    for (int source = 0; source < c; ++source) {
      plan->tiles.push_back(MakeTiles(mask, rank, source));
    }
    return RingFunction::apply(q, k, v, std::move(plan));
  } catch (const c10::Error& e) {
    return absl::UnavailableError(
        absl::StrCat("ring attention over a ring of ", c, " (ring rank ", rank,
                     ") failed: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("ring attention over a ring of ",
                                               c, " (ring rank ", rank,
                                               ") failed: ", e.what()));
  }
}

}  // namespace dcp::train
