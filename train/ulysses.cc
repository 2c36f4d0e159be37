#include "train/ulysses.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <exception>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace dcp::train {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int GroupSize(const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  return group ? group->getSize() : 1;
}

// send[j] goes to rank j; the result's [j] came from rank j.
at::Tensor Exchange(const at::Tensor& send,
                    const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  if (GroupSize(group) == 1) return send;
  at::Tensor input = send.contiguous();
  at::Tensor output = at::empty_like(input);
  std::vector<int64_t> equal_splits;
  group->alltoall_base(output, input, equal_splits, equal_splits)->wait();
  return output;
}

// [s/p, n, d] -> [s, n/p, d].
at::Tensor SeqToHeadsRaw(const at::Tensor& x,
                         const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  const int64_t p = GroupSize(group);
  const int64_t s_local = x.size(0), n = x.size(1), d = x.size(2);
  // Chunk j of the heads goes to rank j: [p, s/p, n/p, d].
  at::Tensor send = x.reshape({s_local, p, n / p, d}).permute({1, 0, 2, 3});
  return Exchange(send, group).reshape({p * s_local, n / p, d});
}

// [s, n/p, d] -> [s/p, n, d].
at::Tensor HeadsToSeqRaw(const at::Tensor& x,
                         const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  const int64_t p = GroupSize(group);
  const int64_t s = x.size(0), n_local = x.size(1), d = x.size(2);
  // Chunk j of the sequence goes to rank j; what comes back is indexed by
  // the sender's head chunk.
  at::Tensor recv = Exchange(x.reshape({p, s / p, n_local, d}), group);
  return recv.permute({1, 0, 2, 3}).reshape({s / p, p * n_local, d});
}

using RawExchange = at::Tensor (*)(
    const at::Tensor&, const c10::intrusive_ptr<c10d::ProcessGroup>&);

// An exchange whose backward is the inverse exchange of the gradient.
template <RawExchange kForward, RawExchange kBackward>
struct ExchangeFunction
    : torch::autograd::Function<ExchangeFunction<kForward, kBackward>> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            c10::intrusive_ptr<c10d::ProcessGroup> group) {
    at::Tensor out = kForward(x, group);
    ctx->saved_data["group"] = c10::IValue::make_capsule(std::move(group));
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto group = c10::intrusive_ptr<c10d::ProcessGroup>::reclaim_copy(
        static_cast<c10d::ProcessGroup*>(
            ctx->saved_data["group"].toCapsule().get()));
    return {kBackward(grads[0], group), at::Tensor()};
  }
};

using SeqToHeadsFunction = ExchangeFunction<SeqToHeadsRaw, HeadsToSeqRaw>;
using HeadsToSeqFunction = ExchangeFunction<HeadsToSeqRaw, SeqToHeadsRaw>;

absl::Status CheckShape(const at::Tensor& x, int64_t p, int split_dim,
                        const char* what) {
  if (!x.defined() || x.dim() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": expected a 3-d tensor [tokens, heads, dim]"));
  }
  if (x.size(split_dim) % p != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": dimension ", split_dim, " (", x.size(split_dim),
                     ") does not divide over the group of ", p));
  }
  return absl::OkStatus();
}

template <typename Fn>
absl::StatusOr<at::Tensor> Run(
    const char* what, const at::Tensor& x,
    const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  const int p = GroupSize(group);
  absl::Status shape =
      CheckShape(x, p, /*split_dim=*/
                 std::is_same_v<Fn, SeqToHeadsFunction> ? 1 : 0, what);
  if (!shape.ok()) return shape;
  try {
    // Without peers the same reshapes run as plain differentiable views.
    if (p == 1) {
      return std::is_same_v<Fn, SeqToHeadsFunction> ? SeqToHeadsRaw(x, group)
                                                    : HeadsToSeqRaw(x, group);
    }
    return Fn::apply(x, group);
  } catch (const c10::Error& e) {
    return absl::UnavailableError(absl::StrCat(
        what, " over a group of ", p, " (rank ", group ? group->getRank() : 0,
        ") failed: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat(what, " over a group of ", p, " failed: ", e.what()));
  }
}

}  // namespace

absl::StatusOr<at::Tensor> SequenceToHeads(
    const at::Tensor& x, const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  return Run<SeqToHeadsFunction>("Ulysses sequence-to-heads all-to-all", x,
                                 group);
}

absl::StatusOr<at::Tensor> HeadsToSequence(
    const at::Tensor& x, const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  return Run<HeadsToSeqFunction>("Ulysses heads-to-sequence all-to-all", x,
                                 group);
}

}  // namespace dcp::train
